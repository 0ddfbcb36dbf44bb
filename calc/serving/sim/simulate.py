"""Discrete-event simulation of one replica's continuous-batching scheduler.

The scheduler, one iteration (step) at a time, as vLLM runs it:

0. A request reaches the scheduler once the engine's API servers have taken it (Serving.api_servers:
   in turn, the preset's request overhead each, so in a burst it waits for those ahead of it;
   none: at once). The wait counts in its TTFT and e2e; the overhead itself is reported beside.
   Under overlap scheduling (Serving.overlap_schedule: SGLang from 0.3.6, vLLM from 0.14,
   TensorRT-LLM's PyTorch backend from 0.20) a request that reaches it while requests run is
   admitted one step later: the step after the one it arrived in was queued before it came.
1. Running requests first, in admission order: a decoding request adds one token;
   one in prefill adds the next chunk of its prompt, up to the token budget left.
2. A decoding request whose next position starts a new KV page takes a free page;
   when none is free, the most recently admitted request is preempted: its pages
   are freed and it goes back to the head of the queue, to recompute its prompt
   and the tokens it has generated so far (preemption by recompute).
3. Waiting requests are admitted in arrival order (FCFS, no overtaking) while the
   batch is below max batch, tokens are left in the budget, and the free pages
   cover the request's whole prompt plus the watermark.
4. The step's time is the replica's step timer's (calc.serving.steps.timer): the forward pass over
   that ragged batch (calc.serving.steps.stepmodel, which reproduces calc.cost.latency.mixed_step_cost),
   or a speculative step. A request whose prefill completes samples its first token at the end
   of the step; each decode step emits the timer's tokens (one, or the accepted drafts).

TTFT = first token - arrival (queueing included); TPOT = (finish - first token) /
(G - 1); e2e = finish - arrival. Runs of pure decode steps between events
(an arrival that could be admitted, a request finishing, a page shortfall) are
advanced in one vectorised call, which is what makes 10,000 requests take seconds.
"""

from __future__ import annotations

import time

import numpy as np

from calc.serving.replica.capacity import Replica
from calc.serving.replica.prefix import CachedPrefix
from calc.serving.sim.scheduler import Scheduler
from calc.serving.sim.simresult import SimResult
from calc.serving.sim.slowatch import SloWatch

__all__ = ["SimResult", "arrival_gaps", "simulate"]

WARMUP = 0.05  # share of requests (by arrival order) left out of the latency statistics at each end


def arrival_gaps(n: int, process: str = "poisson", cv: float = 1.0, seed: int = 0) -> np.ndarray:
    """n inter-arrival gaps at rate 1 (divide by the rate): exponential (Poisson
    arrivals), or gamma with shape 1 / cv^2 and mean 1 (burstier when cv > 1)."""
    rng = np.random.default_rng([seed, 2])
    if process == "poisson":
        return rng.exponential(1.0, n)
    shape = 1.0 / cv**2
    return rng.gamma(shape, 1.0 / shape, n)


def simulate(rep: Replica, T, G, *, rate_per_s: float | None = None, concurrency: int | None = None,
             process: str = "poisson", cv: float = 1.0, seed: int = 0, gaps: np.ndarray | None = None,
             prefix: CachedPrefix | None = None, burst: bool = False,
             stop_on_miss: dict[str, float] | None = None, api: bool = True) -> SimResult:
    """Simulate ``len(T)`` requests on one replica: an open loop at ``rate_per_s`` (Poisson or
    gamma gaps from ``seed``, or the given unit-rate ``gaps``), or a closed loop of
    ``concurrency`` clients, or (``burst``) every request arriving at t = 0. Deterministic for a seed. A request whose prompt needs more
    pages than the replica has is an error (check with ``rep.kv.pages`` first). ``prefix``: the
    prompt tokens found cached per request and the pages the shared prefix pins (calc.serving.replica.prefix).
    ``stop_on_miss`` (SLO targets, {"ttft_p99": seconds, ...}): stop once the measured requests
    miss one for certain (calc.serving.sim.slowatch); the result's ``stopped_s`` says when, and
    the requests unfinished then have nan times. ``api`` False: the requests come from another
    replica (disaggregated decode), not through the replica's API servers."""
    t0 = time.perf_counter()
    T = np.asarray(T, np.int64)
    G = np.asarray(G, np.int64)
    if (rate_per_s is not None) + (concurrency is not None) + bool(burst) != 1:
        raise ValueError("give exactly one of rate_per_s, concurrency and burst")
    if rep.kv.pages <= 0:
        raise ValueError(f"{rep.label}: no KV pages (the model does not fit)")
    arrive = None
    if rate_per_s is not None:
        g = arrival_gaps(T.size, process, cv, seed) if gaps is None else np.asarray(gaps, float)
        arrive = np.cumsum(g) / rate_per_s
    elif burst:
        arrive = np.zeros(T.size)
    n = T.size
    skip = int(WARMUP * n)
    if concurrency is not None:
        skip = max(skip, min(concurrency, n // 2))  # the start burst of a closed loop
    lo, hi = skip, n - int(WARMUP * n)  # the measured requests, by arrival order
    sim = Scheduler(rep, T, G, arrive, concurrency, prefix, api)
    # arrival order is index order: open-loop gaps are >= 0, a burst arrives at once, and a closed
    # loop issues requests in index order as earlier ones finish
    sim.run(None if stop_on_miss is None else SloWatch(stop_on_miss, G, lo, hi))
    return _result(sim, stop_on_miss, lo, hi, T, G, rep.kv.pages, rate_per_s, t0)


def _result(sim: Scheduler, targets, lo: int, hi: int, T, G, pages: int, rate_per_s, t0: float) -> SimResult:
    """The scheduler's run as a SimResult; a stopped one's with copies of the state, and ``rest``,
    which runs the scheduler on to the end (the same result as a run never stopped), or with a
    factor until the SLOs are missed by more than it."""
    order = np.argsort(sim.arrive, kind="stable")
    measured = np.zeros(T.size, bool)
    measured[order[lo:hi]] = True
    tl = sim.timeline()
    stopped = sim.stopped_s is not None
    arrays = [v.copy() if stopped else v for v in (sim.arrive, sim.first, sim.finish, sim.preempt)]
    wall = time.perf_counter() - t0
    rest = None
    if stopped:
        def rest(factor: float | None = None) -> SimResult:
            resumed = time.perf_counter()
            sim.run(None if factor is None else SloWatch(targets, G, lo, hi, factor))
            return _result(sim, targets, lo, hi, T, G, pages, rate_per_s, resumed - wall)  # wall_s: every part
    return SimResult(T, G, *arrays, measured, tl, dict(sim.bound_time) if stopped else sim.bound_time, sim.steps,
                     pages, rate_per_s, wall, sim.stopped_s, rest)
