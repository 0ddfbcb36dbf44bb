"""Measure kernel tables (hardware_profiles/kernels/FORMAT.md) with torch on the local device.

Each kernel is timed as validate/reference.py runs it (F.linear with [N, K] weights, the
KV-cache write + SDPA + output reshape, F.rms_norm, rotate-half RoPE, silu(g) * u, x + y,
F.embedding, .float().argmax), with validate.timing.time_call: warm-up, samples >= 2 ms, the
fastest sample (see _timer), contended samples dropped on CPU. Shapes: the widths the catalog's models
use (and their TP shards), a few per axis, picked at log-spaced quantiles; the models
named in ``exclude`` (the ones `roofline validate` holds out) contribute none.
"""

from __future__ import annotations

import datetime as _dt
import math
import platform
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from calc.spec.catalog import load_model, model_catalog
from calc.spec.kernel_tables import KernelTable

from . import monotone as mono
from .layers import apply_rope, rope_tables
from .reference import RANDOM_BLOCK, TORCH_DTYPES, fill_tiled
from .timing import graph_calls, graph_replay, one_call_s, per_call, synchronizer, time_call

TP = (1, 2, 4, 8)


def catalog_widths(exclude: tuple[str, ...] = ()) -> dict[str, list[float]]:
    """Distinct matmul K and N widths, query/KV heads and head dims of the catalog's models and
    their TP shards (heads and widths divided by 2, 4, 8 where they divide)."""
    ks, ns, hq, hkv, ds, vocab = set(), set(), set(), set(), set(), set()
    for name in model_catalog():
        if name in exclude or name == "tiny-decoder":  # the seed toy is no real model
            continue
        m = load_model(name)
        a = m.attention
        if a.kind == "mla":
            continue
        H, D = m.hidden_size, a.head_dim
        F_ = m.moe.expert_intermediate_size if m.moe and m.moe.num_experts else m.mlp.intermediate_size or 4 * H
        for tp in TP:
            if a.num_heads % tp:
                continue
            q, kv = a.num_heads // tp, max(a.num_kv_heads // tp, 1)
            hq.add(q)
            hkv.add(kv)
            ks.update([H, q * D, F_ // tp])
            ns.update([(q + 2 * kv) * D, H, 2 * F_ // tp, m.vocab_size // tp])
        ds.add(D)
        vocab.add(m.vocab_size)
    return {"K": sorted(ks), "N": sorted(ns), "Hq": sorted(hq), "Hkv": sorted(hkv), "D": sorted(ds),
            "vocab": sorted(vocab)}


def pick(values, n: int, cap: float | None = None, floor: float = 0.0) -> list[float]:
    """``n`` of ``values`` within [floor, cap] at log-spaced quantiles, the smallest and largest included."""
    v = sorted({float(x) for x in values if (cap is None or x <= cap) and x >= floor})
    if len(v) <= n:
        return v
    logs = np.log(v)
    targets = np.linspace(logs[0], logs[-1], n)
    return sorted({v[int(np.argmin(np.abs(logs - t)))] for t in targets})


def _timer(device: str, threads: int | None, budget_s: float, graphs: bool = False) -> Callable[[Callable], float]:
    """``graphs``: each cell times a CUDA graph of back-to-back calls (validate.timing.graph_replay), the
    kernel's time inside an engine's captured pass, not behind Python's launch of each call."""
    sync = synchronizer(device)
    # the descheduling check (process CPU time against wall x threads) holds at 1 thread only: with
    # more, a kernel too small to use them all looks descheduled every time
    cpu_threads = threads if device == "cpu" and threads == 1 else None

    def timed(fn) -> float:
        # the fastest sample: a kernel of microseconds under a busy scheduler has a median of whole
        # time slices (a descheduled thread stalls its team), which no pass of real size sees as often.
        # A cell whose warm-up call took the whole budget (0.15 s and up on a quick CPU profile: whole
        # calls over data far beyond the caches, not time slices) counts that call as a candidate and
        # takes one sample more: 2 calls, not the 4 of min_samples=3 (about 7 s of the 25 s fp32 matmul table)
        i = timed.calls
        timed.calls += 1
        if timed.skip(i):
            return timed.replay[i]
        warm, calls = one_call_s(fn, sync), 1
        if graphs:
            calls = graph_calls(warm)
            fn = graph_replay(fn, calls)
            warm = one_call_s(fn, sync)
        slow = warm >= budget_s
        t = time_call(fn, sync, budget_s, min_samples=1 if slow else 2, max_samples=15, cpu_threads=cpu_threads,
                      warm_call_s=warm)
        timed.samples += len(t.samples_s) + t.contended
        timed.descheduled += t.contended
        best = min(per_call(t, calls).samples_s + ((warm / calls,) if slow else ()))
        return best if timed.replay is None else min(best, timed.replay[i])

    # re-measuring (validate.monotone): ``replay`` holds a table's times, ``redo`` the cells to time again
    timed.samples = timed.descheduled = timed.calls = 0
    timed.replay, timed.redo = None, set()
    timed.skip = lambda i=None: timed.replay is not None and (timed.calls if i is None else i) not in timed.redo
    return timed


def _table(kernel, dtype, axes, seconds, prov, op=None) -> KernelTable:
    return KernelTable(format="roofline-kernels/1", kernel=kernel, dtype=dtype, op=op, provenance=prov,
                       axes={k: [float(x) for x in v] for k, v in axes.items()},
                       seconds=[float(f"{s:.6g}") for s in seconds])


def _cells(axes: dict[str, list[float]]) -> list[dict[str, int]]:
    """Every grid cell, row-major (the last axis fastest), as integer shapes."""
    names = list(axes)
    return [{n: int(axes[n][i]) for n, i in zip(names, idx, strict=True)}
            for idx in np.ndindex(*(len(axes[n]) for n in names))]


ROTATE_BYTES = 128 * 2**20  # CPU: cycle through weight copies of this many bytes in all, beyond the caches
MAX_COPIES = {"cpu": 64, "cuda": 512}  # on a GPU the smallest weights (0.6 MB) need hundreds to pass its L2


def rotate_bytes(device: str) -> int:
    """Bytes of weight copies a matmul cell cycles through: beyond the last-level cache, as a model's
    layers each read their own weight from memory. A GPU's L2 (50-60 MB on Hopper) would otherwise hold
    every weight under it and time decode matmuls at cache speed; 4x the L2 leaves none of it warm."""
    if device.startswith("cuda"):
        l2 = getattr(torch.cuda.get_device_properties(torch.device(device)), "L2_cache_size", 0) or 64 * 2**20
        return 4 * l2
    return ROTATE_BYTES


def matmul_table(dtype, axes, device, timed, prov) -> KernelTable:
    """F.linear over the grid. Each call takes the next of several copies of the weight, as a model's
    layers each read their own from memory (one copy would sit in the cache; see rotate_bytes). The copies
    are views into one pool, allocated once at the grid's largest need and filled by tiling one
    block of normal draws (validate.reference.fill_tiled): drawing fresh values for every cell, and
    then for every larger pool, was most of a quick profile's matmul tables."""
    dt = TORCH_DTYPES[dtype]
    rotate, most = rotate_bytes(device), MAX_COPIES["cuda" if device.startswith("cuda") else "cpu"]

    def layout(c):  # (elements of one weight, copies, each copy's aligned stride)
        one = c["K"] * c["N"]
        n = max(1, min(most, -(-rotate // (one * dt.itemsize))))
        return one, n, -(-one // 64) * 64  # each copy starts 64 elements aligned

    secs, pool = [], None
    for c in _cells(axes):
        if timed.skip():  # re-measuring other cells: this one keeps its time
            secs.append(timed(None))
            continue
        if pool is None:
            gen = torch.Generator().manual_seed(0)
            block = torch.randn(RANDOM_BLOCK, generator=gen).repeat(2).to(device=device, dtype=dt)
            need = max(n * stride for _, n, stride in map(layout, _cells(axes)))
            pool = fill_tiled(torch.empty(need, dtype=dt, device=device), block, gen)
        one, n, stride = layout(c)
        ws = [pool[i * stride:i * stride + one].view(c["N"], c["K"]) for i in range(n)]
        x = torch.randn(c["M"], c["K"], dtype=dt, device=device)
        turn = iter(range(1 << 62))

        def fn(x=x, ws=ws, turn=turn):
            return F.linear(x, ws[next(turn) % len(ws)])

        secs.append(timed(fn))
    return _table("matmul", dtype, axes, secs, prov)


def prefill_table(dtype, axes, device, timed, prov) -> KernelTable:
    dt, secs = TORCH_DTYPES[dtype], []
    for c in _cells(axes):
        if timed.skip():
            secs.append(timed(None))
            continue
        B, T, Hq, Hkv, D = c["B"], c["T"], c["Hq"], c["Hkv"], c["D"]
        q = torch.randn(B, Hq, T, D, dtype=dt, device=device)
        k = torch.randn(B, Hkv, T, D, dtype=dt, device=device)
        v = torch.randn(B, T, Hkv, D, dtype=dt, device=device).transpose(1, 2)  # as the reference's view
        ck, cv = torch.empty_like(k), torch.empty_like(k)

        def fn(q=q, k=k, v=v, ck=ck, cv=cv, B=B, T=T, Hq=Hq, Hkv=Hkv, D=D):
            ck.copy_(k)
            cv.copy_(v)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=Hkv != Hq)
            return out.transpose(1, 2).reshape(B, T, Hq * D)

        secs.append(timed(fn))
    return _table("attention_prefill", dtype, axes, secs, prov)


def decode_table(dtype, axes, device, timed, prov) -> KernelTable:
    dt, secs = TORCH_DTYPES[dtype], []
    slots = int(max(axes["S"])) + 1
    for c in _cells(axes):
        if timed.skip():
            secs.append(timed(None))
            continue
        B, S, Hq, Hkv, D = c["B"], c["S"], c["Hq"], c["Hkv"], c["D"]
        q = torch.randn(B, Hq, 1, D, dtype=dt, device=device)
        k1 = torch.randn(B, 1, Hkv, D, dtype=dt, device=device).transpose(1, 2)
        ck = torch.zeros(B, Hkv, slots, D, dtype=dt, device=device)
        cv = torch.zeros_like(ck)

        def fn(q=q, k1=k1, ck=ck, cv=cv, B=B, S=S, Hq=Hq, Hkv=Hkv, D=D):
            ck.narrow(2, S, 1).copy_(k1)
            cv.narrow(2, S, 1).copy_(k1)
            out = F.scaled_dot_product_attention(q, ck[:, :, :S + 1], cv[:, :, :S + 1], enable_gqa=Hkv != Hq)
            return out.transpose(1, 2).reshape(B, 1, Hq * D)

        secs.append(timed(fn))
    return _table("attention_decode", dtype, axes, secs, prov)


def stream_tables(dtype, sizes, device, timed, prov) -> list[KernelTable]:
    """norm, rope, act, add over bytes as calc counts them; one kernel per element count."""
    dt, a = TORCH_DTYPES[dtype], torch.empty((), dtype=TORCH_DTYPES[dtype]).element_size()
    width, D = 2048, 128
    cos, sin = rope_tables(64, D, dt, device)
    out = []
    for op in ("norm", "rope", "act", "add"):
        secs, got = [], []
        for target in sizes:
            if op == "norm":  # read + write rows x width, plus the weight
                rows = max(1, round(target / (2 * width * a)))
                x, w = torch.randn(rows, width, dtype=dt, device=device), torch.ones(width, dtype=dt, device=device)
                fn, nbytes = (lambda x=x, w=w: F.rms_norm(x, (width,), w, 1e-6)), (2 * rows + 1) * width * a
            elif op == "rope":  # in and out: 2 x elements
                n = max(1, round(target / (2 * a * 64 * D)))
                x = torch.randn(1, n, 64, D, dtype=dt, device=device)
                fn, nbytes = (lambda x=x: apply_rope(x, cos, sin)), 2 * x.numel() * a
            elif op == "act":  # silu(g) * u: reads 2F, writes F per row
                F2 = max(2, 2 * round(target / (3 * a * 2)))
                h = torch.randn(1, F2, dtype=dt, device=device)

                def fn(h=h):
                    g, u = h.chunk(2, dim=-1)
                    return F.silu(g) * u

                nbytes = 3 * (F2 // 2) * a
            else:  # x + y: reads 2, writes 1
                n = max(1, round(target / (3 * a)))
                x, y = torch.randn(n, dtype=dt, device=device), torch.randn(n, dtype=dt, device=device)
                fn, nbytes = (lambda x=x, y=y: x + y), 3 * n * a
            got.append(float(nbytes))
            secs.append(timed(fn))
        order = np.argsort(got)
        vals, ss = [], []
        for i in order:  # sizes rounded to shapes: keep them strictly increasing
            if not vals or got[i] > vals[-1]:
                vals.append(got[i])
                ss.append(secs[i])
        out.append(_table("stream", dtype, {"bytes": vals}, ss, prov, op=op))
    return out


def embedding_table(dtype, rows_list, device, timed, prov) -> KernelTable:
    dt, a = TORCH_DTYPES[dtype], torch.empty((), dtype=TORCH_DTYPES[dtype]).element_size()
    V, H = 32768, 2048
    w = torch.randn(V, H, dtype=dt, device=device)
    secs, nbytes = [], []
    for r in rows_list:
        idx = torch.randint(0, V, (int(r),), device=device)
        secs.append(timed(lambda idx=idx: F.embedding(idx, w)))
        nbytes.append(2.0 * r * H * a)
    return _table("embedding", dtype, {"bytes": nbytes}, secs, prov)


def sample_table(dtype, rows_list, device, timed, prov) -> KernelTable:
    dt, V = TORCH_DTYPES[dtype], 32768
    secs, nbytes = [], []
    for r in rows_list:
        x = torch.randn(int(r), V, dtype=dt, device=device)
        secs.append(timed(lambda x=x: x.float().argmax(-1)))
        nbytes.append(r * V * 4.0 + r * 8.0)
    return _table("sample", dtype, {"bytes": nbytes}, secs, prov)


def provenance(device: str, name: str, threads: int | None, quick: bool, graphs: bool = False) -> dict:
    sw = {"torch": torch.__version__, "python": platform.python_version()}
    if device.startswith("cuda") and torch.version.cuda:
        sw["cuda"] = torch.version.cuda
    return {"device": device, "device_name": name, "software": sw, "threads": threads,
            "date": _dt.date.today().isoformat(),
            "source": f"measured by roofline profile ({'quick' if quick else 'full'}): validate/kernels.py, "
                      "fastest sample per cell of validate.timing.time_call"
                      + (", each sample a CUDA graph of back-to-back calls" if graphs else "")}


def grids(quick: bool, cuda: bool, exclude: tuple[str, ...]) -> dict[str, dict[str, list[float]]]:
    """The shape grid of every table: catalog widths at log-spaced quantiles, capped on CPU."""
    w = catalog_widths(exclude)
    capk, capn = (None, None) if cuda else ((2048, 8192) if quick else (8192, 32768))
    nk, nn = (3, 3) if quick else (4, 5)
    M = [1, 4, 16, 64, 256] if quick else [1, 4, 16, 64, 256, 1024] + ([4096] if cuda else [])
    S = [64, 256, 1024] if quick else [64, 256, 1024, 4096] + ([16384] if cuda else [])
    T = [32, 256] if quick else [32, 128, 512, 2048] + ([8192] if cuda else [])
    hkv = pick(w["Hkv"], 2, 8)
    # every Hkv must divide every Hq (SDPA's grouping): Hq from multiples of the largest Hkv
    hq = pick([h for h in w["Hq"] if all(h % k == 0 for k in hkv)], 2 if quick else 3, 32 if quick else 64)
    heads = {"Hq": hq, "Hkv": hkv, "D": pick(w["D"], 2, 128)}
    sizes = [2.0 ** e for e in range(12, 27 if quick else 29, 2)]
    # on CPU the N axis is capped for time, plus a vocabulary (lm_head: decode's largest matmul): the
    # median one, or in a quick profile the smallest, still 4x the cap and far beyond the caches (beyond
    # the grid a table keeps its edge's rate). At the median, 151936, the vocabulary column was 80% of
    # the quick matmul tables' time (M=256 at fp32: 1.3-1.6 s a call).
    vocab = w["vocab"][0 if quick else len(w["vocab"]) // 2]  # sorted
    return {
        "matmul": {"M": M, "K": pick(w["K"], nk, capk, 512),
                   "N": pick(w["N"], nn, capn, 512) + ([] if cuda else [float(vocab)])},
        "attention_prefill": {"B": [1, 4], "T": T, **heads},
        "attention_decode": {"B": [1, 4] if quick else [1, 4, 16] + ([64] if cuda else []), "S": S, **heads},
        "stream": {"bytes": sizes},
        "embedding": {"rows": [1, 4, 16, 64, 256, 1024] + ([] if quick else [4096])},
        "sample": {"rows": [1, 2, 4, 8, 16, 32]},
    }


def _remeasure(made: list[KernelTable], make, dtype, timed) -> tuple[list[KernelTable], str]:
    """Cells slower than a larger neighbour (validate.monotone) measured again, up to ROUNDS times,
    each keeping its fastest time; the note says how many and the worst ratio left."""
    (t,) = made
    redone, rounds = set(), 0
    while rounds < mono.ROUNDS:
        bad = mono.breaks(t.axes, t.seconds)
        if not bad:
            break
        rounds += 1
        redone |= set(bad)
        timed.replay, timed.redo, timed.calls = list(t.seconds), set(bad), 0
        try:
            (t,) = make(dtype)
        finally:
            timed.replay, timed.redo = None, set()
    if not redone:
        return [t], ""
    return [t], (f"{len(redone)} cells slower than a larger neighbour by > {mono.REMEASURE:g}x measured again "
                 f"({rounds} round{'s' * (rounds > 1)}); worst ratio left {mono.worst_break(t.axes, t.seconds):.2f}")


def measure_tables(device: str, dtypes, quick: bool, threads: int | None, name: str, exclude=(), say=print,
                   budget_s: float | None = None, graphs: bool = False) -> list[KernelTable]:
    """Every table for every dtype; ``say`` reports each as it finishes. ``graphs``: as CUDA graphs."""
    cuda = device.startswith("cuda")
    g = grids(quick, cuda, tuple(exclude))
    # seconds of samples per cell (at most 15 samples of >= 2 ms each): GPU kernels need far fewer
    timed = _timer(device, threads, budget_s or ((0.03 if quick else 0.1) if cuda else (0.15 if quick else 0.5)),
                   graphs)
    prov = provenance(device, name, None if cuda else threads, quick, graphs)
    out: list[KernelTable] = []
    makers = (("matmul", lambda d: [matmul_table(d, g["matmul"], device, timed, prov)]),
              ("attention_prefill", lambda d: [prefill_table(d, g["attention_prefill"], device, timed, prov)]),
              ("attention_decode", lambda d: [decode_table(d, g["attention_decode"], device, timed, prov)]),
              ("stream", lambda d: stream_tables(d, g["stream"]["bytes"], device, timed, prov)),
              ("embedding", lambda d: [embedding_table(d, g["embedding"]["rows"], device, timed, prov)]),
              ("sample", lambda d: [sample_table(d, g["sample"]["rows"], device, timed, prov)]))
    with torch.inference_mode():
        for dtype in dtypes:
            for label, make in makers:
                t0, n0, d0 = time.perf_counter(), timed.samples, timed.descheduled
                made = make(dtype)
                made, fixed = _remeasure(made, make, dtype, timed) if len(made) == 1 else (made, "")
                n, d = timed.samples - n0, timed.descheduled - d0
                note = "; ".join(x for x in (f"{d} of {n} samples descheduled by other programs" if d else "",
                                             fixed) if x)
                out += [t.model_copy(update={"provenance": t.provenance.model_copy(update={"notes": note})})
                        for t in made]
                cells = sum(math.prod(len(v) for v in t.axes.values()) for t in made)
                say(f"  {label} {dtype}: {cells} cells in {time.perf_counter() - t0:.1f} s" + (f" ({note})" if note else ""))
    return out
