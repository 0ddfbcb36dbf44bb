"""Timing the held-out grid of whole passes: each point predicted (base and kernel profile) and
printed before it is measured; samples pooled over rounds; points that run out of memory or whose
one call exceeds the cap are skipped and said so."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from .measurements import Row, predict_point, write_rows
from .timing import Point


def is_oom(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, MemoryError) or "out of memory" in text or "can't allocate" in text \
        or "cannot allocate" in text or type(exc).__name__ == "OutOfMemoryError"


PARTS = ("samples kept", "samples taken again (descheduled)", "warm-up calls and cap checks")


def measure_grid(model, spec, base, kernel, points, meta, sync, per_point, max_call, rounds, bar, csv_path,
                  done_rows, device, threads, torch, say, spent: dict | None = None, graphs: bool = False) -> list[Row]:
    """Time ``points`` (one dtype) in ``rounds`` passes over the grid; each point's samples from all
    rounds are pooled. Both predictions are made, and printed, before the last round's measurement.
    A shape is warmed up once, in round 1: later rounds take samples straight away, their samples'
    size set by round 1's per-call time (a warm-up call per round was a quarter of the passes' time).
    ``spent`` adds up the timing's wall seconds by PARTS. ``graphs``: each pass replayed as a CUDA graph."""
    rows = {}
    for p in points:
        pred, bound = predict_point(spec, base, p)
        rows[p] = Row(**meta, point=p, split="held-out", predicted_default_s=pred, bound_default=bound,
                      predicted_calibrated_s=predict_point(spec, kernel, p)[0])
    pooled: dict[Point, list] = {p: [] for p in points}
    dead: dict[Point, str] = {}
    for rnd in range(rounds):
        last = rnd == rounds - 1
        if not last:
            say(f"  round {rnd + 1}/{rounds} over {len(points)} {points[0].dtype} points ...")
        for b in sorted({p.batch for p in points}):
            mine = [p for p in points if p.batch == b]
            try:
                model.setup(b, next(model.parameters()).dtype, device)
            except Exception as exc:  # noqa: BLE001 - OOM for this batch's cache: skip its points
                if not is_oom(exc):
                    raise
                for p in mine:
                    dead.setdefault(p, "oom")
                say(f"out of memory allocating the KV cache for batch {b}: its points skipped")
            for p in mine:
                head = (f"{spec.name} {p.label:<30s} predicted base {rows[p].predicted_default_s * 1e3:9.3f} ms, "
                        f"kernels {rows[p].predicted_calibrated_s * 1e3:9.3f} ms")
                if last:
                    bar.timing(head)
                if p not in dead:
                    warm = _pool(pooled[p]).median_s if pooled[p] else None
                    t0 = time.perf_counter()
                    got = _time_point(model, spec, p, sync, per_point / rounds, max_call, device, threads, torch,
                                      dead, points, warm, graphs)
                    _account(spent, got, time.perf_counter() - t0)
                    if isinstance(got, str):
                        dead[p] = got
                    else:
                        pooled[p].append(got)
                if last:
                    if p in dead:
                        bar.finish(f"{head} -> {dead[p]}")
                    else:
                        t = _pool(pooled[p])
                        rows[p] = rows[p].timed(t)
                        flags = t.flags()
                        bar.finish(f"{head} -> measured {t.median_s * 1e3:9.3f} ms "
                                   f"({100 * (rows[p].predicted_calibrated_s / t.median_s - 1):+6.1f}%)"
                                   + (f"  [{'; '.join(flags)}]" if flags else ""))
                    write_rows(csv_path, done_rows + [rows[q] for q in points if q in dead or
                                                      rows[q].status == "ok"])
    return [replace(rows[p], status=dead[p]) if p in dead else rows[p] for p in points]


def _pool(timings):
    from .timing import Timing

    return Timing(tuple(s for t in timings for s in t.samples_s), min(t.inner for t in timings),
                  sum(t.contended for t in timings), float(np.mean([t.others_cores for t in timings])),
                  sum(t.sampling_s for t in timings))


def _account(spent: dict | None, got, wall_s: float) -> None:
    """One timed point's ``wall_s`` into ``spent`` by PARTS (a skipped point's one call is its check)."""
    if spent is None:
        return
    kept = sum(got.samples_s) * got.inner if not isinstance(got, str) else 0.0
    sampling = got.sampling_s if not isinstance(got, str) else 0.0
    for part, s in zip(PARTS, (kept, max(0.0, sampling - kept), max(0.0, wall_s - sampling)), strict=True):
        spent[part] = spent.get(part, 0.0) + s


def _time_point(model, spec, p: Point, sync, budget, max_call, device, threads, torch, dead, points,
                warm_s: float | None = None, graphs: bool = False):
    """A Timing, or a status string: "skipped: ..." when one call exceeds ``max_call`` (then the
    larger points of the same dtype, phase and batch are skipped too), "oom" when memory runs out.
    ``warm_s``: this shape was timed before (an earlier round), at this many seconds per call: no
    warm-up and no cap check, samples from the first call."""
    from . import timing

    try:
        if p.phase == "prefill":
            fn = timing.prefill_fn(model, p.batch, p.size, spec.vocab_size, device)
        elif p.phase == "mixed":
            fn = timing.mixed_fn(model, p.batch, p.size, p.chunk, p.cached, spec.vocab_size, device)
        else:
            fn = timing.decode_fn(model, p.batch, p.size, spec.vocab_size, device)
        if graphs:  # captured afresh each round: the batch's cache is set up again between rounds
            fn = timing.graph_replay(fn)
        call_s = warm_s
        if warm_s is None:  # the shape's first call: the cap check and the warm-up
            call_s = timing.one_call_s(fn, sync)
            if call_s > max_call:
                status = f"skipped: one call took {call_s:.2f} s (cap {max_call:g} s; use --layers)"
                for q in points:
                    if (q.phase, q.batch) == (p.phase, p.batch) and (q.size, q.chunk) > (p.size, p.chunk):
                        dead.setdefault(q, "skipped: a smaller point was too slow")
                return status
        slow = call_s > 0.05  # a slow first call was warm-up enough; a fast one gets time_call's own
        return timing.time_call(fn, sync, budget, min_samples=1 if call_s > budget / 2 else 2 if slow else 5,
                                max_samples=30, warmup=2, cpu_threads=threads if device == "cpu" else None,
                                warm_call_s=call_s if slow or warm_s is not None else None)
    except Exception as exc:  # noqa: BLE001 - OOM at one point: skip it, keep going
        if not is_oom(exc):
            raise
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
        return "oom"
