"""Stopping a simulation once it has missed its SLOs for certain (the planner's search only needs
to know that a configuration misses; calc.serving.planner.trial runs it in full when a report
reads its figures).

While a run is under way each measured request's latency has a lower bound: its TTFT is at least
(first token, or the clock while it has none) - arrival, its e2e (finish, or the clock) - arrival,
its TPOT (finish, or the clock, - first token) / (G - 1) once it has a first token; an exact
value once known (the same arithmetic as calc.serving.sim.simresult.SimResult, and the clock only
grows). The q-th percentile (numpy's linear interpolation over n values, as
calc.serving.sim.simresult.latency_percentile takes it) is at least the value of rank
floor((n - 1) q / 100) in ascending order, so it exceeds a limit for certain once
n - floor((n - 1) q / 100) of the n values are known to exceed it."""

from __future__ import annotations

import math

import numpy as np

from calc.spec.workload import Target

CHECK_EVERY = 64  # scheduler events between checks (a check is a few numpy calls over the requests)


def lower_bounds(arrive, first, finish, G, clock: float) -> dict[str, np.ndarray]:
    """Per request (of output length ``G``) at ``clock``: what its TTFT, TPOT and e2e are at least
    (exact once known; nan where nothing is known yet, or TPOT where G = 1)."""
    f_now = np.where(np.isnan(first), clock, first)
    e_now = np.where(np.isnan(finish), clock, finish)
    with np.errstate(invalid="ignore"):
        here = arrive <= clock
        return {"ttft": np.where(here, f_now - arrive, np.nan), "e2e": np.where(here, e_now - arrive, np.nan),
                "tpot": np.where(G > 1, (e_now - first) / np.maximum(G - 1, 1), np.nan)}


class SloWatch:
    """The SLO ``targets`` ({"ttft_p99": seconds, ...}) of the measured requests ``lo``..``hi`` - 1
    (in arrival order, which is index order), of output lengths ``G``; ``factor``: missed by more
    than that factor (a statistic above factor x its target), 1 a plain miss."""

    def __init__(self, targets: dict[str, float], G: np.ndarray, lo: int, hi: int, factor: float = 1.0):
        self.lo, self.hi = lo, hi
        self.G = G = np.asarray(G, np.int64)[lo:hi]
        self.checks = []
        for key, limit in targets.items():
            t = Target.of(key, limit)
            n = int(np.count_nonzero(G > 1)) if t.metric == "tpot" else hi - lo
            if n:  # no values: the percentile is nan, a miss the full run reports
                self.checks.append((t.metric, factor * limit, n - math.floor((n - 1) * t.percentile / 100)))

    def missed(self, arrive, first, finish, clock: float) -> bool:
        """Whether some SLO is missed (by more than the factor) whatever happens after ``clock``."""
        if not self.checks:
            return False
        sl = slice(self.lo, self.hi)
        low = lower_bounds(arrive[sl], first[sl], finish[sl], self.G, clock)
        with np.errstate(invalid="ignore"):
            return any(int(np.count_nonzero(low[m] > limit)) >= need for m, limit, need in self.checks)
