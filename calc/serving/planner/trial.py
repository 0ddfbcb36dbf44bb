"""One simulated configuration of the planner: R aggregated replicas at the workload's load,
its latency percentiles, the SLOs it misses and what limits it."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from calc.core import text as render
from calc.core.units import usd_per_million_tokens
from calc.serving.replica.capacity import Replica, SteadyState
from calc.serving.sim.simresult import latency_percentile
from calc.serving.sim.simulate import SimResult
from calc.spec.scheduler import engine_args_of
from calc.spec.workload import Target

RUNNERS_UP = 4
BACKLOG_LIMIT = 0.02  # queue growth (share of arrivals) above which a replica falls behind
GUESS_UTIL = 0.85  # first guess: the fewest replicas at or below this closed-form utilisation


class Priced:
    """What a deployment's tokens cost, from its ``usd_per_hour``, ``output_tokens_per_s`` and
    ``prompt_share`` (prompt tokens per output token of the requests it served)."""

    @property
    def total_tokens_per_s(self) -> float:
        """Prompt plus output tokens per second."""
        return self.output_tokens_per_s * (1.0 + self.prompt_share)

    @property
    def usd_per_million_output_tokens(self) -> float | None:
        return self._per_million(self.output_tokens_per_s)

    @property
    def usd_per_million_total_tokens(self) -> float | None:
        """Per million prompt + output tokens (what a provider prices when input and output cost alike)."""
        return self._per_million(self.total_tokens_per_s)

    def _per_million(self, tokens_per_s: float) -> float | None:
        if self.usd_per_hour is None or not tokens_per_s > 0:
            return None
        return usd_per_million_tokens(self.usd_per_hour, tokens_per_s)


def prompt_share(sim: SimResult) -> float:
    """Prompt tokens per output token over a simulation's requests."""
    return float(sim.prompt_len.sum()) / max(float(sim.output_len.sum()), 1.0)


@dataclass(frozen=True)
class Trial(Priced):
    """R replicas of one configuration, simulated at the workload's load (one replica's share; a PP
    replica runs PP engines, one micro-batch each in flight: one engine's share, R x PP in all)."""

    replica: Replica
    replicas: int
    price_per_gpu_hour: float | None
    # the search's simulation: the whole run, or one stopped once it missed the SLOs for certain
    # (SimResult.stopped_s), enough to know it misses; ``sim`` runs the rest when a report reads it
    run: SimResult
    saturation: SteadyState  # closed form, one replica, at saturation
    # () -> (closed form, one replica, at its share of the load; offered / closed-form capacity,
    # open loop, else None): called when first read (a plan reads it for the few trials it shows)
    closed_form: Callable[[], tuple[SteadyState, float | None]]
    targets: dict
    same_as: int | None = None  # the max batch whose simulation this reuses (its cap never bound)
    note: str = ""  # e.g. ", chunk 4,096" when the chunked-prefill size is searched
    # () -> the whole run of a stopped one that is another replica's (same_as), else its run goes on
    rerun: Callable[[], SimResult] | None = None
    _further: list = field(default_factory=list, compare=False, repr=False)  # advance's runs, the last furthest

    @cached_property
    def sim(self) -> SimResult:
        """The whole simulation (a stopped run of the search's run on to its end)."""
        last = self._last
        if last.stopped_s is None:
            return last
        whole = self.rerun() if self.rerun is not None else last.rest()
        self._further.append(whole)
        return whole

    @property
    def _last(self) -> SimResult:
        return self._further[-1] if self._further else self.run

    @property
    def whole(self) -> bool:
        """Whether its whole run is known (never stopped, or run on to its end)."""
        return self._last.stopped_s is None

    def advance(self, factor: float) -> None:
        """Run a stopped run on until its SLOs are missed by more than ``factor`` for certain, or to
        its end (what calc.serving.planner.trial.nearest_miss needs to rank it)."""
        if self.whole:
            return
        if self.rerun is not None or not math.isfinite(factor):
            _ = self.sim
        else:
            self._further.append(self._last.rest(factor))

    @property
    def stopped(self) -> bool:
        """Whether the search stopped this trial's run once it missed the SLOs for certain (its
        figures, when read, come from the whole run)."""
        return self.run.stopped_s is not None

    @cached_property
    def _at_load(self) -> tuple[SteadyState, float | None]:
        return self.closed_form()

    @property
    def load(self) -> SteadyState:
        """The closed form, one replica, at its share of the load."""
        return self._at_load[0]

    @property
    def utilisation(self) -> float | None:
        """Offered / closed-form capacity (open loop)."""
        return self._at_load[1]

    @property
    def scheduler(self):
        """The engine's scheduler this trial ran (calc.spec.scheduler.Serving), max_num_seqs its max batch."""
        return self.replica.serving.model_copy(update={"max_num_seqs": self.replica.max_batch})

    @property
    def engine_args(self) -> dict:
        """The scheduler in the engine's own argument names (--max-num-seqs ... for vLLM)."""
        preset = self.replica.hw.preset
        return {} if preset is None else engine_args_of(preset, self.scheduler)

    @property
    def gpus(self) -> int:
        return self.replicas * self.replica.gpus

    @property
    def usd_per_hour(self) -> float | None:
        return None if self.price_per_gpu_hour is None else self.price_per_gpu_hour * self.gpus

    @property
    def label(self) -> str:
        r = self.replica
        return f"{self.replicas} x {r.hw.name} {r.split}, max batch {r.max_batch}{self.note}"

    @cached_property
    def stats(self) -> dict[str, float]:
        """p50, p90, p99 of TTFT, TPOT and e2e over the measured requests (seconds)."""
        out = {}
        for m in ("ttft", "tpot", "e2e"):
            v = self.sim.metric(m)  # once per metric, not per percentile
            out.update((f"{m}_p{q}", latency_percentile(v, q)) for q in (50, 90, 99))
        return out

    @property
    def output_tokens_per_s(self) -> float:
        return self.replica.engines(self.replicas) * self.sim.output_tokens_per_s

    @property
    def goodput_per_s(self) -> float:
        return self.replica.engines(self.replicas) * self.sim.goodput_per_s(self.targets)

    @property
    def prompt_share(self) -> float:
        return prompt_share(self.sim)

    @cached_property
    def misses(self) -> list[tuple[str, float, float]]:
        """(SLO, observed, target) for every SLO the simulation misses."""
        out = []
        for key, target in self.targets.items():
            v = self.stats.get(key)
            if v is not None and not (v <= target):
                out.append((key, v, target))
        return out

    @property
    def falls_behind(self) -> bool:
        return self.sim.offered_per_s is not None and self.sim.backlog_growth() > BACKLOG_LIMIT

    @property
    def meets(self) -> bool:
        return not self.stopped and not self.misses and not self.falls_behind

    def p99_at_least(self, metric: str) -> float:
        """The metric's p99, or for a run not whole what it is at least (no whole run needed)."""
        return self.stats[f"{metric}_p99"] if self.whole else self._last.at_least(metric, 99)

    @property
    def miss_ratio(self) -> float:
        """Worst observed / target over the SLOs (<= 1: all met); inf when the queue grows."""
        if self.falls_behind:
            return math.inf
        return max([v / t for _, v, t in self.misses] or [max([self.stats[k] / t for k, t in self.targets.items()]
                                                               or [0.0])])

    @property
    def miss_ratio_at_least(self) -> float:
        """miss_ratio, or for a stopped run what it is at least (its SLO statistics' lower bounds
        over their targets, where the run has got to; no whole run needed)."""
        if self.whole:
            return self.miss_ratio
        return max([v / t.limit_s for t, v in self._at_least(self._last) if not math.isnan(v)], default=0.0)

    def _at_least(self, run: SimResult) -> list[tuple[Target, float]]:
        """Each SLO target and what its statistic is at least, where ``run`` stopped."""
        return [(t, run.at_least(t.metric, t.percentile)) for t in (Target.of(k, v) for k, v in self.targets.items())]

    def why(self, whole: bool = False) -> str:
        """The failures in words, e.g. 'TTFT p99 2.1 s > 1 s'; of a stopped run, unless ``whole``
        (then the rest is run), what was certain when it stopped: 'TTFT p99 at least 1.2 s > 1 s'."""
        if self.stopped and not whole:
            run = self.run
            parts = [f"{t.label} at least {render.seconds(v)} > {render.seconds(t.limit_s)}"
                     for t, v in self._at_least(run) if v > t.limit_s]
            return "; ".join(parts) + f" (run stopped at {render.seconds(run.stopped_s)}, once certain)"
        parts = []
        if self.falls_behind:
            parts.append(f"falls behind: the queue grows by {self.sim.backlog_growth():.0%} of arrivals "
                         f"(serves {self.sim.requests_per_s:.3g} of {self.sim.offered_per_s:.3g} req/s per replica)")
        parts += [f"{Target.of(k, t).label} {render.seconds(v)} > {render.seconds(t)}" for k, v, t in self.misses]
        return "; ".join(parts) or "meets the SLOs"

    @property
    def bottleneck(self) -> str:
        """What limits the replica: the KV cache (preemptions or > 90% of pages in use), the max
        batch (running batch at its cap), else the roof most of the step time sits under."""
        s = self.sim
        if s.preemptions.sum() > 0 or s.kv_used_mean > 0.9:
            return "KV cache"
        if s.running_mean >= 0.9 * self.replica.engine_max_batch:
            return "max batch"
        bt = s.bound_time_s
        top = max(bt, key=bt.get)
        return {"memory": "memory bandwidth", "compute": "compute", "communication": "interconnect"}[top]


def nearest_miss(trials: list[Trial]) -> Trial | None:
    """The trial whose worst SLO is nearest its target, ties to the cheaper (min of (miss_ratio,
    cost_key), the first on a tie), running stopped runs on only as far as ranking them needs: the
    one whose ratio may be least runs on until it is certainly above the next one's lower bound
    (or to its end, its ratio then exact); the first with an exact ratio at the head is the answer."""
    heap = [(t.miss_ratio_at_least, cost_key(t), i, t.whole, t) for i, t in enumerate(trials)]
    heapq.heapify(heap)
    while heap:
        _, key, i, exact, t = heapq.heappop(heap)
        if exact:
            return t
        if not t.whole:  # (it may be whole by now: a trial reusing its run ran it on)
            t.advance(heap[0][0] if heap else math.inf)
        heapq.heappush(heap, (t.miss_ratio_at_least, key, i, t.whole, t))
    return None


def cost_key(t) -> tuple:
    """Ranking key of a deployment (aggregated or disaggregated): priced ones by USD/hour, then
    unpriced ones by GPU count."""
    c = t.usd_per_hour
    return (0, c, t.gpus) if c is not None else (1, t.gpus, 0.0)
