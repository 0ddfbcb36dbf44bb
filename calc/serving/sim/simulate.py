"""Discrete-event simulation of one replica's continuous-batching scheduler.

The scheduler, one iteration (step) at a time, as vLLM runs it:

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
             prefix: CachedPrefix | None = None, burst: bool = False) -> SimResult:
    """Simulate ``len(T)`` requests on one replica: an open loop at ``rate_per_s`` (Poisson or
    gamma gaps from ``seed``, or the given unit-rate ``gaps``), or a closed loop of
    ``concurrency`` clients, or (``burst``) every request arriving at t = 0. Deterministic for a seed. A request whose prompt needs more
    pages than the replica has is an error (check with ``rep.kv.pages`` first). ``prefix``: the
    prompt tokens found cached per request and the pages the shared prefix pins (calc.serving.replica.prefix)."""
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
    sim = Scheduler(rep, T, G, arrive, concurrency, prefix)
    sim.run()
    n = T.size
    order = np.argsort(sim.arrive, kind="stable")
    skip = int(WARMUP * n)
    if concurrency is not None:
        skip = max(skip, min(concurrency, n // 2))  # the start burst of a closed loop
    measured = np.zeros(n, bool)
    measured[order[skip:n - int(WARMUP * n)]] = True
    tl = sim.timeline()

    return SimResult(T, G, sim.arrive, sim.first, sim.finish, sim.preempt, measured, tl, sim.bound_time,
                     sim.steps, rep.kv.pages, rate_per_s, time.perf_counter() - t0)
