"""A simulation's result: per-request times, the replica's state over time, and the
statistics the planner reads (percentiles, steady-window rates, SLO attainment, backlog)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from calc.serving.sim.slowatch import lower_bounds
from calc.spec.workload import Target


def latency_percentile(values, q: float) -> float:
    """The q-th percentile of latencies (seconds), nan values left out; nan when none is left.
    The one place the planner's p50/p90/p99 are taken (simulations, disaggregated pools, floors)."""
    v = np.asarray(values, float)
    v = v[~np.isnan(v)]
    return float(np.percentile(v, q)) if v.size else math.nan


@dataclass(frozen=True)
class Phases:
    """A run in the three parts benchmark tools keep apart (AIPerf's warm-up phase,
    docs.nvidia.com/aiperf/tutorials/load-patterns-scheduling/warmup-phase-configuration; GuideLLM's
    warm-up and cool-down shares): warm-up until the first measured request arrives, the steady
    window over the measured arrivals (the statistics), drain after the last one until the last
    finish. ``steady``: the queue did not grow over the window (calc.serving.planner.trial.BACKLOG_LIMIT)."""

    warmup_s: float
    steady_s: float
    drain_s: float
    warmup_requests: int
    steady_requests: int
    drain_requests: int
    backlog_growth: float

    @property
    def steady(self) -> bool:
        return self.backlog_growth <= 0.02

    def record(self) -> dict:
        return {"warmup_s": self.warmup_s, "steady_s": self.steady_s, "drain_s": self.drain_s,
                "warmup_requests": self.warmup_requests, "steady_requests": self.steady_requests,
                "drain_requests": self.drain_requests, "backlog_growth": self.backlog_growth, "steady": self.steady}


@dataclass(frozen=True)
class SimResult:
    """Per-request times (seconds) and the replica's state over time."""

    prompt_len: np.ndarray
    output_len: np.ndarray
    arrive_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    preemptions: np.ndarray  # per request
    measured: np.ndarray  # bool: in the latency statistics (not warm-up or drain)
    timeline: dict  # t_s, kv_used (share of pages), running, waiting, output_tokens (cumulative)
    bound_time_s: dict  # seconds of steps bound by compute / memory / communication
    steps: int
    pages: int
    offered_per_s: float | None
    wall_s: float
    stopped_s: float | None = None  # when a run stopped, its SLOs missed for certain (calc.serving.sim.slowatch)
    # a stopped run's: (factor=None) -> the run on from where it stopped, to its end or (factor) until its SLOs
    # are missed by more than the factor
    rest: Callable[..., SimResult] | None = None

    @property
    def n(self) -> int:
        return int(self.arrive_s.size)

    @property
    def ttft_s(self) -> np.ndarray:
        return self.first_token_s - self.arrive_s

    @property
    def tpot_s(self) -> np.ndarray:
        """(finish - first token) / (G - 1); nan when G = 1."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.output_len > 1, (self.finish_s - self.first_token_s)
                            / np.maximum(self.output_len - 1, 1), np.nan)

    @property
    def e2e_s(self) -> np.ndarray:
        return self.finish_s - self.arrive_s

    def metric(self, name: str) -> np.ndarray:
        """Measured requests' ttft, tpot or e2e (nan-free)."""
        v = getattr(self, f"{name}_s")[self.measured]
        return v[~np.isnan(v)]

    def percentile(self, name: str, q: float) -> float:
        return latency_percentile(self.metric(name), q)

    def at_least(self, name: str, q: float) -> float:
        """percentile(name, q), or for a stopped run what it is at least: the percentile of the
        measured requests' lower bounds at ``stopped_s`` (nothing known yet: 0)."""
        if self.stopped_s is None:
            return self.percentile(name, q)
        m = self.measured
        low = lower_bounds(self.arrive_s[m], self.first_token_s[m], self.finish_s[m], self.output_len[m],
                           self.stopped_s)[name]
        if name == "tpot":
            low = low[self.output_len[m] > 1]
        return latency_percentile(np.nan_to_num(low, nan=0.0), q)

    def _window(self) -> tuple[float, float]:
        """Steady window: from the 10% to the 90% request completion."""
        done = np.sort(self.finish_s)
        return float(done[int(0.1 * (self.n - 1))]), float(done[int(0.9 * (self.n - 1))])

    def _rate(self, column: str) -> float:
        t0, t1 = self._window()
        tl = self.timeline
        if t1 <= t0:
            return math.nan
        v = np.interp([t0, t1], tl["t_s"], tl[column])
        return float((v[1] - v[0]) / (t1 - t0))

    @property
    def output_tokens_per_s(self) -> float:
        """Output tokens per second over the steady window."""
        return self._rate("output_tokens")

    @property
    def requests_per_s(self) -> float:
        """Completed requests per second over the steady window."""
        t0, t1 = self._window()
        return 0.8 * (self.n - 1) / (t1 - t0) if t1 > t0 else math.nan

    def slo_met(self, targets: dict[str, float]) -> np.ndarray:
        """Per measured request: within every SLO bound. A metric's bound is its loosest
        target (TTFT p50 <= 0.3 s and p99 <= 1 s: each request's TTFT <= 1 s)."""
        bounds: dict[str, float] = {}
        for key, limit in targets.items():
            metric = Target.of(key, limit).metric
            bounds[metric] = max(bounds.get(metric, 0.0), limit)
        ok = np.ones(int(self.measured.sum()), bool)
        for metric, limit in bounds.items():
            v = getattr(self, f"{metric}_s")[self.measured]
            ok &= np.nan_to_num(v, nan=0.0) <= limit
        return ok

    def goodput_per_s(self, targets: dict[str, float]) -> float:
        """Requests within all SLO bounds per second: request throughput x the share within them."""
        return self.requests_per_s * float(self.slo_met(targets).mean()) if targets else self.requests_per_s

    @property
    def kv_used_mean(self) -> float:
        """Time-weighted mean share of KV pages in use."""
        tl = self.timeline
        dt = np.diff(tl["t_s"])
        return float((tl["kv_used"][:-1] * dt).sum() / dt.sum()) if dt.sum() > 0 else 0.0

    @property
    def running_mean(self) -> float:
        tl = self.timeline
        dt = np.diff(tl["t_s"])
        return float((tl["running"][:-1] * dt).sum() / dt.sum()) if dt.sum() > 0 else 0.0

    @property
    def phases(self) -> Phases:
        """Warm-up, steady window and drain (see Phases)."""
        idx = np.flatnonzero(self.measured)
        end = float(np.nanmax(self.finish_s)) if self.n else 0.0
        if idx.size == 0:
            return Phases(end, 0.0, 0.0, self.n, 0, 0, 0.0)
        a = self.arrive_s[idx]
        t0, t1 = float(a.min()), float(a.max())
        before = int((self.arrive_s < t0).sum())
        after = int(self.n - before - idx.size)
        return Phases(t0, t1 - t0, max(end - t1, 0.0), before, int(idx.size), after, self.backlog_growth())

    def backlog_growth(self) -> float:
        """Queue growth over the measured arrivals, as a share of them: waiting at the last
        measured arrival minus waiting at the first, over the requests that arrived between
        (about 0 when the replica keeps up; the overload share when it does not)."""
        idx = np.flatnonzero(self.measured)
        if idx.size < 2:
            return 0.0
        a0, a1 = self.arrive_s[idx[0]], self.arrive_s[idx[-1]]
        tl = self.timeline
        w = np.interp([a0, a1], tl["t_s"], tl["waiting"])
        return float((w[1] - w[0]) / idx.size)
