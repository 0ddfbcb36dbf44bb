"""Prediction bands from held-out residuals, and their coverage measured on held-out rows.

The residuals are those of the leave-one-source-out scoring (calc.accuracy.fit.loso): each
row predicted with parameters fitted without its publisher. ``build`` turns residuals into
a calc.spec.bands.BandTable: for every group of every residual's regime (calc.spec.bands,
"all" to family/load/arch/engine/precision/gpu), the QUANTILES of the group's residuals, each
source's rows weighing 1 in all, kept when the group has at least MIN_ROWS of them (and, for
the published bands, MIN_SOURCES publishers); with ``calibrate``, the factors that widen the
bands to cover COVERAGE of rows held out by source (``widening``).

Quantiles are Hyndman and Fan's type 6 (numpy's method="weibull"): the k-th smallest of n
residuals sits at probability k / (n + 1), the expected share of a new draw below it. A band
between the 10% and 90% points of n exchangeable residuals then covers a new one with
probability 0.8 on average, where the interpolation numpy uses by default (type 7) covers
(n - 1) / (n + 1) x 0.8 (72% at n = 20).

Coverage is measured, not assumed (``held_out_check``): the rows of each publisher S are
checked against bands built from the other publishers' residuals alone, so no band is
scored on rows it was built from, and no widening calibrated on them. (The other publishers' residuals come from folds whose
fit saw S's rows: the fit moves a handful of preset fields, so that much of S reaches the
band's centre; a band's rows never include S's.)
"""

from __future__ import annotations

import csv
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from calc.accuracy.rows import Row
from calc.spec.bands import (
    COVERAGE,
    KEYS,
    MIN_ROWS,
    MIN_SOURCES,
    QUANTILES,
    Band,
    BandTable,
    Found,
    Regime,
    gpu_family,
    is_rate,
    load_level,
    metric_family,
    precision_class,
)
from calc.spec.catalog import arch_of_name

TARGET_OVERALL = (0.75, 0.85)  # issue 22: the 80% band's held-out coverage, over every row
TARGET_REGIME = (0.65, 0.95)  # ... and in every regime of at least TARGET_REGIME_ROWS rows
TARGET_REGIME_ROWS = 20
TARGET_HALF_WIDTH = 0.25  # median half-width for per-pass metrics (TTFT, decode)
PER_PASS = ("ttft", "decode")  # per-pass metrics: these families at load "pass" (a fixed batch, no queue)


def per_pass(r: Residual) -> bool:
    """Whether a residual is of a per-pass prediction (what `estimate` answers), not one under load."""
    return r.regime.family in PER_PASS and r.regime.load == "pass"


@dataclass(frozen=True)
class Residual:
    """One held-out prediction: log(predicted / measured time) of a row, its regime and its source."""

    id: str
    source: str
    regime: Regime
    log_ratio: float
    rate: bool


def residual(row: Row, predicted: float) -> Residual | None:
    """A published row's residual (None: no finite prediction, e.g. the KV cache does not fit)."""
    if not (math.isfinite(predicted) and predicted > 0 and row.value > 0):
        return None
    rate = is_rate(row.metric)
    r = math.log(predicted / row.value)
    regime = Regime(metric_family(row.metric), load_level(row.batch, row.concurrency), row.preset,
                    precision_class(row.weight_dtype, row.compute_dtype), gpu_family(row.hardware), arch_of_name(row.model))
    return Residual(row.id, row.publisher, regime, -r if rate else r, rate)


def residuals(results, which: str = "current") -> list[Residual]:
    """The residuals of calc.accuracy.harness Results' ``which`` prediction (the LOSO one)."""
    out = [residual(x.row, getattr(x, which)) for x in results]
    return [r for r in out if r is not None]


UNDER_LOAD_COLUMNS = ("id", "publisher", "metric", "measured", "current")


def table_residuals(path: Path) -> tuple[list[Residual], str]:
    """Residuals from a CSV of held-out predictions laid out as predictions.csv (e.g. the
    under-load rows, reports/accuracy/under_load.csv): columns UNDER_LOAD_COLUMNS, and where
    present preset (else engine), gpu, batch, concurrency (or in_flight), weight_dtype,
    compute_dtype (or act_dtype). Returns (residuals, a line saying what was read)."""
    if not path.exists():
        return [], f"{path.name}: absent"
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in UNDER_LOAD_COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            return [], f"{path.name}: not used, it lacks the column(s) {', '.join(missing)}"
        rows = list(reader)

    def num(v):
        try:
            f = float(v)
        except (TypeError, ValueError):
            return None
        return f if math.isfinite(f) else None

    out = []
    for r in rows:
        family, pred, meas = metric_family(r["metric"]), num(r["current"]), num(r["measured"])
        if family is None or not pred or not meas or pred <= 0 or meas <= 0:
            continue
        rate = is_rate(r["metric"])
        x = math.log(pred / meas)
        batch = num(r.get("batch"))
        in_flight = num(r.get("concurrency")) or num(r.get("in_flight"))
        regime = Regime(family, load_level(int(batch) if batch else None, in_flight), r.get("preset") or r.get("engine", ""),
                        precision_class(r.get("weight_dtype"), r.get("compute_dtype") or r.get("act_dtype")),
                        gpu_family(r.get("gpu", "")), arch_of_name(r["model"]))
        out.append(Residual(r["id"], r["publisher"], regime, -x if rate else x, rate))
    return out, f"{path.name}: {len(out)} residuals of {len(rows)} rows"


def quantile(values, q: float) -> float:
    """Type-6 (Weibull) quantile: the k-th smallest of n at probability k / (n + 1), linear between."""
    return float(np.quantile(np.asarray(values, dtype=float), q, method="weibull"))


def weighted_quantile(values, weights, q: float) -> float:
    """Type 6 with weights: the k-th smallest at C_k / (W + W / n) (C_k: the weights up to and
    including it, W: all of them), linear between, clamped at the ends; equal weights give
    ``quantile``'s k / (n + 1)."""
    x, w = np.asarray(values, dtype=float), np.asarray(weights, dtype=float)
    order = np.argsort(x, kind="stable")
    x, w = x[order], w[order]
    at = np.cumsum(w) / (w.sum() * (1 + 1 / len(w)))
    return float(np.interp(q, at, x))


def source_weights(res) -> list[float]:
    """Each residual's weight when every source's rows weigh 1 in all: a band then describes a
    new source's rows, not the largest publisher's."""
    n = Counter(r.source for r in res)
    return [1 / n[r.source] for r in res]


def _groups(res, min_rows: int, min_sources: int) -> dict[str, Band]:
    by_group: dict[str, list[Residual]] = defaultdict(list)
    for r in res:
        for g in r.regime.groups():
            by_group[g].append(r)
    lo_q, hi_q = QUANTILES
    groups = {}
    for g in sorted(by_group):
        rs = by_group[g]
        sources = len({r.source for r in rs})
        if len(rs) >= min_rows and sources >= min_sources:
            x, w = [r.log_ratio for r in rs], source_weights(rs)
            groups[g] = Band(rows=len(rs), log_lo=weighted_quantile(x, w, lo_q),
                             log_hi=weighted_quantile(x, w, hi_q), sources=sources)
    return groups


def widening(res, min_rows: int = MIN_ROWS,
             min_sources: int = MIN_SOURCES) -> tuple[dict[str, float], dict[str, float]]:
    """The factors on each band's log half-width that make the bands cover COVERAGE of rows held
    out by source: by Regime.scale_key, and by the group a band came from (the finer of the two
    where it has enough rows). Each source's rows are set against the bands of the other sources'
    residuals (an inner leave-one-source-out over ``res`` alone); a row needs the factor |r -
    centre| / half-width to fall inside, and a key's factor is the COVERAGE quantile of its rows'
    needs, source-weighted. A key with fewer than ``min_rows`` such rows or ``min_sources``
    sources has no factor (a scale key then takes that of all rows, "all")."""
    need = [(c, abs(c.residual.log_ratio - c.found.band.log_centre) / max(c.found.band.log_half, 1e-12))
            for c in held_out_check(res, min_rows, min_sources) if c.found is not None]
    by_key: dict[str, list[tuple[Residual, float]]] = defaultdict(list)
    by_group: dict[str, list[tuple[Residual, float]]] = defaultdict(list)
    for c, x in need:
        by_key[c.residual.regime.scale_key].append((c.residual, x))
        by_group[c.found.group].append((c.residual, x))
    by_key["all"] = [(c.residual, x) for c, x in need]

    def factors(keyed):
        return {key: weighted_quantile([x for _, x in pairs], source_weights([r for r, _ in pairs]), COVERAGE)
                for key, pairs in sorted(keyed.items())
                if len(pairs) >= min_rows and len({r.source for r, _ in pairs}) >= min_sources}

    return factors(by_key), factors(by_group)


def build(res: Iterable[Residual], min_rows: int = MIN_ROWS, source: str = "", min_sources: int = 1,
          calibrate: bool = False) -> BandTable:
    """Every group of every residual's regime with at least ``min_rows`` residuals from at least
    ``min_sources`` sources, as a band of its source-weighted QUANTILES; ``calibrate``: with the
    widening that makes them cover COVERAGE of rows held out by source (``widening``)."""
    res = list(res)
    widen, widen_groups = widening(res, min_rows, min_sources) if calibrate else ({}, {})
    return BandTable(coverage=COVERAGE, quantiles=QUANTILES, min_rows=min_rows, min_sources=min_sources,
                     source=source, groups=_groups(res, min_rows, min_sources), widen=widen,
                     widen_groups=widen_groups)


@dataclass(frozen=True)
class Check:
    """One held-out row against the band built without its source."""

    residual: Residual
    found: Found | None

    @property
    def inside(self) -> bool:
        b = self.found.band if self.found else None
        return b is not None and b.log_lo <= self.residual.log_ratio <= b.log_hi

    @property
    def half_width(self) -> float:
        return self.found.band.half_width(self.residual.rate) if self.found else math.nan


def held_out_check(res: list[Residual], min_rows: int = MIN_ROWS, min_sources: int = 1,
                   calibrate: bool = False) -> list[Check]:
    """Each source's rows checked against bands built from every other source's residuals (their
    widening calibrated on those sources alone)."""
    out = []
    for s in sorted({r.source for r in res}):
        table = build([r for r in res if r.source != s], min_rows, min_sources=min_sources, calibrate=calibrate)
        out += [Check(r, table.lookup(r.regime)) for r in res if r.source == s]
    return out


def coverage(checks: list[Check]) -> dict:
    """n, share inside the band, median half-width (rows with a band)."""
    banded = [c for c in checks if c.found is not None]
    return {"n": len(checks), "banded": len(banded),
            "coverage": float(np.mean([c.inside for c in banded])) if banded else math.nan,
            "half_width": float(np.median([c.half_width for c in banded])) if banded else math.nan}


GROUPINGS: tuple[tuple[str, Callable[[Check], str]], ...] = (
    *((k, (lambda c, k=k: getattr(c.residual.regime, k))) for k in KEYS),
    ("publisher", lambda c: c.residual.source))


def per_group(checks: list[Check], key: Callable[[Check], str]) -> dict[str, dict]:
    groups: dict[str, list[Check]] = defaultdict(list)
    for c in checks:
        groups[key(c)].append(c)
    return {g: coverage(v) for g, v in sorted(groups.items())}


def shipped_half_width(table: BandTable, res: list[Residual], keep: Callable[[Residual], bool] = per_pass) -> float:
    """Median half-width of the shipped bands over the rows ``keep`` selects (per-pass ones)."""
    w = [f.band.half_width(r.rate) for r in res if keep(r) for f in [table.lookup(r.regime)] if f is not None]
    return float(np.median(w)) if w else math.nan


def bands_yaml(table: BandTable, header: str) -> str:
    import yaml

    body = yaml.safe_dump(table.model_dump(mode="json"), sort_keys=False, default_flow_style=None, width=110)
    return "\n".join(f"# {line}" if line else "#" for line in header.splitlines()) + "\n" + body
