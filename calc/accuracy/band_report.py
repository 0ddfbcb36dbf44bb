"""The bands section of `roofline accuracy`: build the shipped bands, measure their coverage.

``make_bands`` takes the accuracy run's held-out residuals (and any held-out under-load rows
in reports/accuracy/under_load.csv), builds the band table that ships as calc/data/bands.yaml,
and checks the 80% band on held-out rows (calc.accuracy.bands.held_out_check); ``section``
renders what it found for the report, ``done_when`` the issue's targets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from calc.accuracy.bands import (
    GROUPINGS,
    TARGET_HALF_WIDTH,
    TARGET_OVERALL,
    TARGET_REGIME,
    TARGET_REGIME_ROWS,
    Check,
    Residual,
    bands_yaml,
    build,
    coverage,
    held_out_check,
    per_group,
    per_pass,
    residuals,
    shipped_half_width,
    table_residuals,
)
from calc.core import text as render
from calc.spec.bands import KEYS, LOW_MAX, MEDIUM_MAX, MIN_ROWS, MIN_SOURCES, QUANTILES, BandTable

SOURCE = "roofline accuracy: held-out (leave-one-source-out) residuals of the published measurements"


@dataclass(frozen=True)
class BandRun:
    table: BandTable
    residuals: list[Residual]
    checks: list[Check]
    notes: tuple[str, ...]


def make_bands(results, extra: tuple[Path, ...] = ()) -> BandRun:
    """The shipped bands from the run's LOSO residuals plus those of each ``extra`` CSV."""
    res = residuals(results)
    notes = [f"published.csv: {len(res)} residuals of {len(results)} predictable rows "
             "(rows with no prediction, the KV cache not fitting, have none)"]
    for path in extra:
        more, note = table_residuals(path)
        res += more
        notes.append(note)
    return BandRun(build(res, source=SOURCE, min_sources=MIN_SOURCES, calibrate=True), res,
                   held_out_check(res, min_sources=MIN_SOURCES, calibrate=True), tuple(notes))


def write_bands_file(run: BandRun, path: Path) -> Path:
    from calc.core.files import atomic_write

    header = (f"Prediction bands (calc/spec/bands.py): {SOURCE}.\n"
              "Written by `roofline accuracy`; do not edit. Per group: rows, the publishers they came from (sources),\n"
              f"and log(predicted / measured time) at the {QUANTILES[0]:g} and {QUANTILES[1]:g} quantiles "
              "(type 6, numpy method='weibull', each publisher's rows weighing 1 in all).\n"
              f"A group is kept with >= {MIN_ROWS} rows from >= {MIN_SOURCES} publishers; a lookup falls back from "
              "family/load/arch/engine/precision/gpu to broader groups, then all,\n"
              "and widens the band's log half-width by widen_groups[its group], else widen[family/load level] "
              "(calibrated on rows held out by publisher; 'all' for any other key).")
    return atomic_write(path, bands_yaml(run.table, header), "--bands-out")


def _pct(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{100 * x:.1f}%"


def _mark(ok: bool) -> str:
    return "met" if ok else "NOT met"


def regimes_outside(checks: list[Check]) -> list[tuple[str, str, dict]]:
    """(key, value, coverage) of every one-way regime of >= TARGET_REGIME_ROWS rows outside TARGET_REGIME."""
    lo, hi = TARGET_REGIME
    out = []
    for title, key in GROUPINGS[:len(KEYS)]:
        for g, c in per_group(checks, key).items():
            if c["banded"] >= TARGET_REGIME_ROWS and not lo <= c["coverage"] <= hi:
                out.append((title, g, c))
    return out


def done_when(run: BandRun) -> list[str]:
    c = coverage(run.checks)
    lo, hi = TARGET_OVERALL
    outside = regimes_outside(run.checks)
    pass_c = coverage([x for x in run.checks if per_pass(x.residual)])
    loaded = coverage([x for x in run.checks if x.residual.regime.family in ("ttft", "decode") and not per_pass(x.residual)])
    shipped = shipped_half_width(run.table, run.residuals)
    rlo, rhi = TARGET_REGIME
    lines = [f"{'80% band coverage':<26}{_pct(c['coverage']):>6}  (held out by source, {c['banded']} rows; "
             f"target {100 * lo:.0f}-{100 * hi:.0f}%: {_mark(lo <= c['coverage'] <= hi)})",
             f"{'per regime (>= 20 rows)':<26}{len(outside):>6}  regimes outside {100 * rlo:.0f}-{100 * rhi:.0f}%"
             + (": " + ", ".join(f"{k} {g} {_pct(v['coverage'])} (n={v['banded']})" for k, g, v in outside) if outside
                else "") + f" ({_mark(not outside)})",
             f"{'per-pass half-width':<26}{_pct(pass_c['half_width']):>6}  (median over TTFT and decode rows at a fixed "
             f"batch, {pass_c['banded']} rows, the held-out bands; the shipped bands: {_pct(shipped)}; target <= "
             f"{100 * TARGET_HALF_WIDTH:.0f}%: "
             f"{_mark(pass_c['half_width'] <= TARGET_HALF_WIDTH and shipped <= TARGET_HALF_WIDTH)})",
             f"{'under load, half-width':<26}{_pct(loaded['half_width']):>6}  (TTFT and decode rows under load, "
             f"{loaded['banded']} rows; coverage {_pct(loaded['coverage'])})"]
    return lines


def _coverage_table(checks: list[Check], title: str, key) -> str:
    rows = [[g, c["banded"], _pct(c["coverage"]), _pct(c["half_width"])] for g, c in per_group(checks, key).items()]
    return render.table(rows, [title, "n", "coverage", "median half-width"], align="lrrr")


def _shipped_table(table: BandTable) -> str:
    factors = [[f"group {k}", f"{v:.3f}"] for k, v in table.widen_groups.items()]
    factors += [[k, f"{v:.3f}"] for k, v in table.widen.items()]
    widen = render.table(factors, ["widening by", "factor"], align="lr")
    rows = []
    for g, b in table.groups.items():
        t_lo, t_hi = b.interval(1.0, rate=False)
        rows.append([g, b.rows, b.sources, f"{b.log_lo:+.3f}", f"{b.log_hi:+.3f}", f"{float(t_lo):.2f}-{float(t_hi):.2f}"])
    return widen + "\n\nBefore the widening:\n\n" + render.table(
        rows, ["group", "rows", "sources", "log lo", "log hi", "measured / predicted time"], align="lrrrrr")


STATISTICS = f"""A band is the empirical distribution of held-out residuals, r = log(predicted / measured
time) (for a rate, log(measured / predicted), so r > 0 is pessimistic for both), each from the
leave-one-source-out scoring above: never an in-sample fit. The band keeps the {QUANTILES[0]:g} and
{QUANTILES[1]:g} quantiles of r, type 6 (numpy `method="weibull"`: the k-th smallest of n at k / (n + 1),
so a band from n exchangeable residuals covers a new one with probability 0.8 on average;
numpy's default, type 7, would cover (n - 1) / (n + 1) of that), with each publisher's rows
weighing 1 in all (weights w, the k-th smallest at C_k / (W + W / n)): a band is for a source not
yet seen, not for the largest publisher's setup. A prediction x of a time is bracketed by
[x e^-r90, x e^-r10], of a rate by [x e^r10, x e^r90].

Groups, broadest first: all > metric family (ttft: TTFT and prefill tokens/s; decode: TPOT, ITL,
decode tokens/s; e2e; throughput) > model architecture (dense, or moe: routed experts, whose
kernels and balance err otherwise) > load level (pass: a fixed batch, no queue; low: <= {LOW_MAX} requests
in flight; medium: <= {MEDIUM_MAX}; high: more; saturated: offered at an unbounded rate) > engine preset >
precision class (16bit, fp8, fp4, int-weight) > GPU family. A group is kept when it has at least
{MIN_ROWS} residuals (each 10% tail then rests on two rows or more) from at least {MIN_SOURCES} publishers
(one publisher's rows share its setup, so a band from them alone is as narrow as that setup's
scatter); a prediction takes the most specific kept group of its regime, so a regime with too few
rows falls back to the next broader group, and every band states its group and its rows.

Publishers differ by more than their own rows scatter, so quantiles of the other publishers'
rows cover a new publisher's less often than 80%. Each band's half-width (in log space, about its
centre) is therefore widened by a factor calibrated on held-out rows: every publisher's rows are
set against the bands of the others' residuals, a row needs the factor |r - centre| / half-width
to fall inside, and the factor is the 0.8 quantile of those needs (publisher-weighted), per
group the band came from where that group has {MIN_ROWS} such rows from {MIN_SOURCES} publishers
(`widen_groups:`), else per metric family and load level (`widen:`; a key with fewer rows or
publishers takes the factor of all rows). A factor under 1 narrows a band that over-covers.

Coverage is measured on held-out rows: each publisher's rows are checked against bands built, and
their factors calibrated, from the other publishers' residuals alone (its own rows never in a band
or a factor), with the same groups and fallback. Half-width: half the band's width over the
prediction; per-pass: TTFT and decode rows at a fixed batch (what `estimate` answers)."""


def section(run: BandRun) -> str:
    """The report's markdown section."""
    tables = "\n\n".join(f"By {title}:\n\n```\n{_coverage_table(run.checks, title, key)}\n```"
                         for title, key in GROUPINGS)
    notes = "\n".join(f"- {n}" for n in run.notes)
    return f"""## Prediction bands (issue 22)

{STATISTICS}

### Coverage of the 80% band on held-out rows, as measured

```
{chr(10).join(done_when(run))}
```

{tables}

### The shipped bands (calc/data/bands.yaml)

Built from every residual ({len(run.residuals)} rows); what `estimate`, `sweep`, `compare` and `plan` show.

{notes}

```
{_shipped_table(run.table)}
```
"""
