"""Timed prefill and decode passes over a grid of (batch, prompt length, decode context).

As nanochat's benchmark does it: warm-up calls of the same shape, a synchronize
before every clock read (CUDA), ``time.perf_counter`` with a fixed thread count
(CPU), the median per point. Calls shorter than 1 ms are looped inside one sample
(as timeit does) so no sample is under the clock's comfort zone. Instability is
flagged as pyperf flags it.

TTFT = prefill(tokens[B, T]) + argmax of the last position's logits.
TPOT = one decode step at context S (token[B, 1] at position S, attending S + 1)
+ argmax; the cache is primed with zeros up to S (values do not change the work).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from calc.core.errors import SpecError

# torch is imported inside the functions that run passes: Point and Timing serve torch-free
# code too (measurements.csv, `roofline calibrate`).
MIN_SAMPLE_S = 1e-3
TARGET_SAMPLE_S = 2e-3  # calls shorter than this are looped inside one sample
MAX_INNER = 200


@dataclass(frozen=True)
class Point:
    """One grid point. ``size`` is T for prefill and S for decode. A mixed step (a continuous-batching
    engine's step) is ``batch`` decode rows at context S = ``size`` plus one prompt chunk of ``chunk``
    tokens after ``cached`` ones, in one pass."""

    dtype: str
    phase: str  # prefill | decode | mixed
    batch: int
    size: int
    chunk: int = 0
    cached: int = 0

    @property
    def label(self) -> str:
        key = "T" if self.phase == "prefill" else "S"
        tail = f" +T={self.chunk}@{self.cached}" if self.phase == "mixed" else ""
        return f"{self.phase} {self.dtype} B={self.batch} {key}={self.size}{tail}"

    @property
    def positions(self) -> int:
        """The cache positions the point needs: S + 1 for a decode row, T (prefill), C + T (a chunk)."""
        return max(self.size + (self.phase != "prefill"), self.cached + self.chunk)


@dataclass(frozen=True)
class Timing:
    """Per-call seconds of the clean samples (a sample may loop ``inner`` calls).

    On CPU a sample whose process CPU time fell below CONTENDED_SHARE of wall time
    x threads was descheduled (another program took the core); such samples are
    dropped and counted in ``contended``, and more are taken in their place.
    """

    samples_s: tuple[float, ...]
    inner: int
    contended: int = 0
    others_cores: float = 0.0  # CPU cores other processes kept busy meanwhile (Linux /proc/stat)
    sampling_s: float = 0.0  # wall seconds of the sampling (kept and dropped samples; no warm-up)

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples_s)

    @property
    def mean_s(self) -> float:
        return statistics.fmean(self.samples_s)

    @property
    def std_s(self) -> float:
        return statistics.stdev(self.samples_s) if len(self.samples_s) > 1 else 0.0

    @property
    def spread(self) -> float:
        """Standard deviation over mean."""
        return self.std_s / self.mean_s if self.mean_s > 0 else 0.0

    def flags(self) -> list[str]:
        """pyperf's warnings: std >= 10% of mean, min or max 50% off the mean, samples under 1 ms."""
        out = []
        if self.spread >= 0.10:
            out.append(f"std dev {100 * self.spread:.0f}% of mean")
        if min(self.samples_s) < 0.5 * self.mean_s:
            out.append("min 50% below mean")
        if max(self.samples_s) > 1.5 * self.mean_s:
            out.append("max 50% above mean")
        if self.inner * self.median_s < MIN_SAMPLE_S:
            out.append("samples under 1 ms")
        if self.contended:
            out.append(f"{self.contended} samples descheduled (CPU busy with other work)")
        if self.others_cores >= BUSY_CORES:
            out.append(f"other processes used {self.others_cores:.1f} cores meanwhile")
        return out


ADVICE = ("unstable timings: close other programs, keep --threads fixed (and below the core count), "
          "or rerun with a longer budget; on GPU, lock clocks if you can")


def check_device(device: str):
    try:
        import torch
    except ImportError:
        raise SpecError("--device", None, "torch is not installed; pip install 'roofline[torch]'") from None
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise SpecError("--device", None, f"CUDA is not available (torch {torch.__version__}); "
                                              "use --device cpu") from None
    elif device != "cpu":
        raise SpecError("--device", None, f"expected cpu or cuda, got {device!r}")
    return torch


def check_graphs(device: str, graphs: bool) -> None:
    """--cuda-graphs needs a CUDA device: a SpecError on any other."""
    if graphs and not device.startswith("cuda"):
        raise SpecError("--cuda-graphs", None, "replays CUDA graphs; it needs --device cuda")


def synchronizer(device: str) -> Callable[[], None]:
    if device.startswith("cuda"):
        import torch

        return torch.cuda.synchronize
    return lambda: None


CONTENDED_SHARE = 0.85
BUSY_CORES = 0.2
BUSY_THREADS = 0.5  # cores other programs keep busy before a CPU run leaves them their cores


def _cpu_busy_s() -> tuple[float, float] | None:
    """(seconds of CPU all processes used, seconds this process used), from /proc/stat; None off Linux."""
    try:
        with open("/proc/stat") as f:
            fields = [float(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    hz = os.sysconf("SC_CLK_TCK")
    busy = (sum(fields[:8]) - fields[3] - fields[4]) / hz  # all but idle and iowait
    t = os.times()
    return busy, t.user + t.system


def idle_threads(say=print, sample_s: float = 0.5) -> int | None:
    """Threads for a CPU run that asked for none: when other programs keep at least BUSY_THREADS of a
    core busy (measured over ``sample_s``), the idle cores' count, said in one line; else None
    (torch's default, every core). A thread team on a core another program holds waits at its
    barriers for that core's time slices: tables and passes then time the scheduler, not the kernels."""
    cores = os.cpu_count() or 1
    before, t0 = _cpu_busy_s(), time.perf_counter()
    time.sleep(sample_s)
    others = busy_cores(before, _cpu_busy_s(), time.perf_counter() - t0)
    if others is None or others < BUSY_THREADS or cores < 2:
        return None
    threads = max(1, cores - math.ceil(others - BUSY_THREADS))
    say(f"other programs keep {others:.1f} of {cores} CPU cores busy: timing with {threads} thread"
        f"{'s' if threads > 1 else ''} on the idle cores (--threads N to choose)")
    return threads


def busy_cores(before, after, wall_s: float) -> float | None:
    """CPU cores other processes kept busy between two _cpu_busy_s readings ``wall_s`` apart
    (None off Linux)."""
    if not before or not after or wall_s <= 0:
        return None
    return max(0.0, (after[0] - before[0]) - (after[1] - before[1])) / wall_s


def one_call_s(fn: Callable[[], object], sync: Callable[[], None]) -> float:
    """Seconds of one call of ``fn``, the device synchronised before and after."""
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


GRAPH_TARGET_S = 1e-3  # a captured graph of kernel calls lasts about this long (graph launch ~10 us)
MAX_GRAPH_CALLS = 256  # enough back-to-back copies of the smallest weight (0.6 MB) to pass a 60 MB L2


def graph_replay(fn: Callable[[], object], calls: int = 1) -> Callable[[], None]:
    """``fn`` called ``calls`` times, captured once as a CUDA graph; returns its replay.

    Serving engines replay decode steps (vLLM, SGLang, TensorRT-LLM: whole forward passes) as CUDA
    graphs, so the GPU runs kernels back to back without Python's launches between them. Warm-up runs
    on a side stream, as torch.cuda.graph asks. A pass with a host sync or data-dependent shapes
    (the reference MoE's per-expert token lists) cannot be captured: torch raises, the caller says so."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph.replay


def graph_calls(one_call_s: float) -> int:
    """Calls of a kernel to capture in one graph: about GRAPH_TARGET_S of work, at most MAX_GRAPH_CALLS."""
    return max(1, min(MAX_GRAPH_CALLS, math.ceil(GRAPH_TARGET_S / max(one_call_s, 1e-7))))


def per_call(t: Timing, calls: int) -> Timing:
    """A Timing of graph replays of ``calls`` calls each, as seconds per call."""
    return replace(t, samples_s=tuple(s / calls for s in t.samples_s))


def time_call(fn: Callable[[], object], sync: Callable[[], None], budget_s: float, min_samples: int = 5,
              max_samples: int = 50, warmup: int = 2, cpu_threads: int | None = None,
              warm_call_s: float | None = None) -> Timing:
    """Warm up, pick ``inner`` so a sample lasts >= 2 ms, then take samples until the budget is spent.

    ``warm_call_s``: the caller already made a warm call that took this long (no more warm-up).
    ``cpu_threads``: on CPU, the torch thread count; samples whose process CPU time is
    under CONTENDED_SHARE * wall * threads are dropped (at most as many again are retaken).
    """
    if warm_call_s is None:
        for _ in range(max(warmup - 1, 0)):
            fn()
        warm_call_s = one_call_s(fn, sync)
    one = max(warm_call_s, 1e-7)
    inner = min(MAX_INNER, max(1, math.ceil(TARGET_SAMPLE_S / one)))
    n = int(min(max_samples, max(min_samples, budget_s / (one * inner))))
    samples, dropped, tries = [], 0, 0
    before, start = _cpu_busy_s(), time.perf_counter()
    while len(samples) < n and tries < 2 * n:
        tries += 1
        sync()
        c = time.process_time()
        t = time.perf_counter()
        for _ in range(inner):
            fn()
        sync()
        wall = time.perf_counter() - t
        cpu = time.process_time() - c
        if cpu_threads and cpu < CONTENDED_SHARE * wall * cpu_threads and len(samples) + (2 * n - tries) >= n:
            dropped += 1
            continue
        samples.append(wall / inner)
    sampling = time.perf_counter() - start
    return Timing(tuple(samples), inner, dropped, busy_cores(before, _cpu_busy_s(), sampling) or 0.0, sampling)


def _random_tokens(batch: int, width: int, vocab: int, device: str, key: int):
    """A [batch, width] block of random token ids, the same for the same (batch, key)."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(batch * 7919 + key)
    return torch.randint(0, vocab, (batch, width), generator=gen).to(device)


def prefill_fn(model, batch: int, prompt_len: int, vocab: int, device: str):
    tokens = _random_tokens(batch, prompt_len, vocab, device, prompt_len)
    return lambda: model.prefill(tokens).float().argmax(-1)


def decode_fn(model, batch: int, context: int, vocab: int, device: str):
    """One decode step of ``batch`` sequences, each its own random token: a batch is of different
    requests, and an MoE layer routes identical rows to the same k experts (batch 4 of
    qwen3-30b-a3b read 8 experts per layer where four requests read 29 on average)."""
    model.cache.prime()
    token = _random_tokens(batch, 1, vocab, device, context)
    return lambda: model.decode_step(token, context).float().argmax(-1)


def mixed_fn(model, batch: int, context: int, chunk: int, cached: int, vocab: int, device: str):
    """One mixed step: ``batch`` decode rows at context S (each its own random token) and one prompt
    chunk of ``chunk`` tokens after ``cached`` ones (its own batch-1 cache), in one pass."""
    model.cache.prime()
    token = _random_tokens(batch, 1, vocab, device, context)
    prompt = _random_tokens(1, chunk, vocab, device, cached + chunk)
    model.setup_chunk(cached + chunk)
    return lambda: model.mixed_step(token, context, prompt, cached).float().argmax(-1)


def seed_request(model, batch: int, prompt_len: int, new_tokens: int, vocab: int, device: str,
                 warmup: int = 3) -> dict:
    """The seed experiment: one whole request (prefill + argmax, then G - 1 decode steps),
    timed per phase after ``warmup`` same-shape requests. Returns seconds and the cache shape."""
    import torch

    sync = synchronizer(device)
    gen = torch.Generator(device="cpu").manual_seed(31)
    prompt = torch.randint(0, vocab, (batch, prompt_len), generator=gen).to(device)

    def request():
        model.cache.reset()
        sync()
        t = time.perf_counter()
        token = model.prefill(prompt).float().argmax(-1, keepdim=True)
        sync()
        ttft = time.perf_counter() - t
        generated, steps = [token], []
        for s in range(prompt_len, prompt_len + new_tokens - 1):
            t = time.perf_counter()
            token = model.decode_step(token, s).float().argmax(-1, keepdim=True)
            sync()
            steps.append(time.perf_counter() - t)
            generated.append(token)
        return torch.cat(generated, 1), ttft, steps

    with torch.inference_mode():
        for _ in range(warmup):
            request()
        generated, ttft, steps = request()
    return {
        "generated_shape": list(generated.shape),
        "kv_shape": list(model.cache.shapes(0)),
        "ttft_s": ttft,
        "first_decode_s": steps[0] if steps else None,
        "tpot_median_s": statistics.median(steps) if steps else None,
        "tpot_mean_s": statistics.fmean(steps) if steps else None,
        "steps": len(steps),
    }
