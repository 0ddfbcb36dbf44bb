"""A plan's configurations at the pessimistic edge of their prediction bands (calc.spec.bands).

Each SLO statistic a trial simulates (TTFT, TPOT, e2e percentiles) is a predicted time: its band
brackets the measurement between v e^-r90 and v e^-r10, and the pessimistic edge is the slow
end, v e^-r10. A configuration *meets its SLOs at the edge* when every edge is within its target;
it is *fragile* when it meets them nominally and not at the edge.

The regime of a trial: the statistic's family, its load level (requests in flight per engine,
by Little's law: served requests/s x mean e2e), the replica's engine preset, precision class
and GPU family. ``robust_targets`` gives the targets a search must meet nominally so that every
configuration it finds meets the real ones at its edge: each divided by the widest edge factor
any candidate could get (any load level, any candidate hardware). The band table arrives as a
value (the serving layer reads no files).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from calc.core import text as render
from calc.spec.bands import LOAD_LEVELS, BandTable, Found, Regime, load_level, regime_of
from calc.spec.workload import Target

FAMILY = {"ttft": "ttft", "tpot": "decode", "e2e": "e2e"}


@dataclass(frozen=True)
class Edge:
    """One trial's SLO statistics at the pessimistic edge of their bands."""

    load: str
    latency_s: dict[str, float]  # statistic -> the band's slow end
    band_s: dict[str, tuple[float, float]]  # statistic -> (fast end, slow end)
    groups: dict[str, tuple[str, int]]  # statistic -> (group, rows)
    misses: list[tuple[str, float, float]]  # (SLO, edge, target) for each SLO missed at the edge

    @property
    def meets(self) -> bool:
        return not self.misses

    def why(self) -> str:
        return "; ".join(f"{Target.of(k, t).label} {render.seconds(v)} > {render.seconds(t)}"
                         for k, v, t in self.misses) or "meets the SLOs"


def load_of(trial) -> str:
    """The trial's load level: requests in flight per engine, served requests/s x mean e2e."""
    sim = trial.sim
    e2e = sim.e2e_s
    in_flight = sim.requests_per_s * float(np.mean(e2e)) if np.size(e2e) else math.nan
    return load_level(in_flight=in_flight)


def _regime(trial, metric: str, load: str) -> Regime:
    r = trial.replica
    return regime_of(FAMILY[metric], r.hw, r.dt.weight, r.dt.compute, load, r.model)


def edge(trial, table: BandTable, targets: dict[str, float]) -> Edge:
    """``trial`` at the pessimistic edge, checked against ``targets`` (e.g. the workload's SLOs)."""
    load = load_of(trial)
    latency, bands, groups = {}, {}, {}
    for key, v in trial.stats.items():
        found = table.lookup(_regime(trial, key.split("_p")[0], load))
        if found is None or not math.isfinite(v):
            continue
        lo, hi = found.interval(v, rate=False)
        latency[key], bands[key], groups[key] = float(hi), (float(lo), float(hi)), (found.group, found.band.rows)
    misses = [(k, latency[k], t) for k, t in targets.items() if k in latency and not latency[k] <= t]
    return Edge(load, latency, bands, groups, misses)


def widest_factor(table: BandTable, hardware, dt, metric: str, model) -> Found | None:
    """The band with the slowest edge (largest e^-r10) a ``metric`` statistic could get on any of
    ``hardware`` at any load level."""
    found = [f for hw in hardware for load in LOAD_LEVELS
             for f in [table.lookup(regime_of(FAMILY[metric], hw, dt.weight, dt.compute, load, model))] if f is not None]
    return max(found, key=lambda f: -f.band.log_lo) if found else None


def robust_targets(targets: dict[str, float], table: BandTable, hardware, dt, model) -> dict[str, float]:
    """Each target divided by the widest edge factor e^-r10 (1 where no band applies, or where the
    band's slow end is faster than the prediction)."""
    out = {}
    for key, t in targets.items():
        f = widest_factor(table, hardware, dt, key.split("_p")[0], model)
        out[key] = t / max(math.exp(-f.band.log_lo), 1.0) if f is not None else t
    return out


@dataclass
class PlanBands:
    """Every simulated trial of a plan at its edge, against the workload's own targets."""

    table: BandTable
    source: str
    targets: dict[str, float]
    robust: bool = False
    searched: dict[str, float] = field(default_factory=dict)  # --robust: the tightened targets searched
    _edges: dict[int, Edge] = field(default_factory=dict)

    def of(self, trial) -> Edge:
        key = id(trial)
        if key not in self._edges:
            self._edges[key] = edge(trial, self.table, self.targets)
        return self._edges[key]

    def fragile(self, trials) -> list:
        """The trials that meet their SLOs nominally and miss them at the edge."""
        return [t for t in trials if t.meets and not self.of(t).meets]
