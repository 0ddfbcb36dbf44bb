"""Serving under load: every row of reports/accuracy/under_load.csv predicted through the
serving simulator, held out by source, and the error figures by metric, load level, engine
and publisher.

Held out by source (leave-one-source-out): nothing is fitted on the load rows. The engine
presets' fitted fields (step_overhead_us, request_overhead_us, ...) come from the per-pass fit
of `roofline accuracy` (calc.accuracy.fit): a publisher's load rows are predicted with the
presets fitted on every *other* publisher's per-pass rows (its LOSO fold), and a publisher
with no per-pass rows with the presets fitted on all of them (none of which are its own).
Scheduler values the engines' docs state are not fitted.

Each run is one simulation (calc.accuracy.compare.predict on a Scenario built by
calc.accuracy.loadrows.scenario), each of the run's own request count.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from calc.accuracy.loadrows import GROUP, LEVELS, LoadRow, level, load_rows, preset_name, runs, scenario
from calc.core import text as render
from calc.core.errors import SpecError
from calc.spec.engine import EngineSpec


@dataclass(frozen=True)
class LoadResult:
    row: LoadRow
    preset: str
    predicted: float  # nan: not predicted (the model and its KV cache do not fit, or the run failed)

    @property
    def error(self) -> float:
        """Signed relative error, (predicted - measured) / measured."""
        return self.predicted / self.row.value - 1.0 if math.isfinite(self.predicted) else math.nan


@dataclass(frozen=True)
class LoadRun:
    results: list[LoadResult]
    skipped: list[tuple[str, str]]  # (row or run id, why it is not predicted)
    seconds: float  # wall time of the scoring
    cpu_s: float = math.nan  # its process time (the machine may be shared)


def held_out(publisher: str, folds: dict[str, dict[str, EngineSpec]],
             fitted_all: dict[str, EngineSpec]) -> dict[str, EngineSpec]:
    """The presets a publisher's load rows are predicted with: fitted without its per-pass rows."""
    return folds.get(publisher, fitted_all)


def predict_all(rows: list[LoadRow], presets_for: Callable[[str], dict[str, EngineSpec]],
                predictor: Callable | None = None) -> tuple[list[LoadResult], list[tuple[str, str]]]:
    """Every row predicted, one simulation per run, with the presets ``presets_for(publisher)``
    gives; ``predictor(scenario, preset) -> {measured name: value}`` (calc.accuracy.compare.predict)."""
    if predictor is None:
        from calc.accuracy.compare import predict as predictor
    out, failed = [], []
    for name, rs in runs(rows).items():
        presets = presets_for(rs[0].publisher)
        pname = preset_name(rs[0].engine, presets)
        try:
            pred = predictor(scenario(rs, pname), presets[pname])
        except (SpecError, RuntimeError, ValueError) as exc:  # a run the simulator cannot take
            failed.append((name, str(exc).splitlines()[0]))
            pred = {}
        out += [LoadResult(r, pname, float(pred.get(r.measured_as, math.nan))) for r in rs]
    return out, failed


def score(presets_for: Callable[[str], dict[str, EngineSpec]], rows: list[LoadRow] | None = None) -> LoadRun:
    import time

    t0, c0 = time.perf_counter(), time.process_time()
    skipped: list[tuple[str, str]] = []
    if rows is None:
        rows, skipped = load_rows()
    results, failed = predict_all(rows, presets_for)
    return LoadRun(results, skipped + failed, time.perf_counter() - t0, time.process_time() - c0)


def figures(errors) -> dict:
    """n, median and p90 of |error|, and the median signed error, over the finite errors."""
    e = np.asarray([x for x in errors if math.isfinite(x)], float)
    if e.size == 0:
        return {"n": 0, "median": math.nan, "p90": math.nan, "signed": math.nan}
    a = np.abs(e)
    return {"n": int(e.size), "median": float(np.median(a)), "p90": float(np.percentile(a, 90)),
            "signed": float(np.median(e))}


def _pct(x: float, signed: bool = False) -> str:
    return "-" if not math.isfinite(x) else f"{100 * x:+.0f}%" if signed else f"{100 * x:.0f}%"


def _cell(s: dict) -> str:
    return "-" if not s["n"] else f"{_pct(s['median'])} / {_pct(s['p90'])} / {_pct(s['signed'], True)} ({s['n']})"


METRIC_GROUPS = ("TTFT", "TPOT/ITL", "throughput", "e2e")


def table(results: list[LoadResult], title: str, key: Callable[[LoadResult], str], order=None) -> str:
    """One line per group: the overall figures, then each metric group's, each cell
    'median |err| / p90 |err| / median signed (n)'."""
    groups = [g for g in (order or sorted({key(r) for r in results})) if any(key(r) == g for r in results)]
    metrics = [m for m in METRIC_GROUPS if any(GROUP[r.row.metric] == m for r in results)]
    lines = []
    for g in groups:
        sub = [r for r in results if key(r) == g]
        lines.append([g, _cell(figures(r.error for r in sub)),
                      *[_cell(figures(r.error for r in sub if GROUP[r.row.metric] == m)) for m in metrics]])
    return render.table(lines, [title, "all", *metrics])


def summary_lines(results: list[LoadResult]) -> list[str]:
    """The headline figures: overall and per metric group."""
    s = figures(r.error for r in results)
    out = [f"{'all rows':<14} median |error| {_pct(s['median'])}, p90 {_pct(s['p90'])}, median signed "
           f"{_pct(s['signed'], True)} ({s['n']} of {len(results)} rows predicted)"]
    for m in METRIC_GROUPS:
        f = figures(r.error for r in results if GROUP[r.row.metric] == m)
        if f["n"]:
            out.append(f"{m:<14} median |error| {_pct(f['median'])}, p90 {_pct(f['p90'])}, median signed "
                       f"{_pct(f['signed'], True)} ({f['n']} rows)")
    return out


# Issue 20's done-when figures for runs under load: (label, metric group or None for all, figure, bound)
TARGETS = (("median |error|", None, "median", 0.10), ("p90 |error|", None, "p90", 0.30),
           ("TTFT median |error|", "TTFT", "median", 0.15))


def target_lines(results: list[LoadResult]) -> list[str]:
    """Each target with its figure as measured and whether it is met."""
    out = []
    for label, group, key, bound in TARGETS:
        f = figures(r.error for r in results if group is None or GROUP[r.row.metric] == group)
        ok = f["n"] and f[key] <= bound
        out.append(f"{label:<20} {_pct(f[key]):>5}  (target <= {_pct(bound)}: {'met' if ok else 'NOT met'})")
    return out


GROUPINGS: tuple[tuple[str, Callable[[LoadResult], str], tuple | None], ...] = (
    ("load level", lambda r: level(r.row), LEVELS),
    ("engine", lambda r: r.row.engine, None),
    ("publisher", lambda r: r.row.publisher, None),
)


def worst(results: list[LoadResult], n: int = 10) -> str:
    """The ``n`` runs with the largest median |error| over their rows: where to look first."""
    by_run: dict[str, list[LoadResult]] = {}
    for r in results:
        by_run.setdefault(r.row.run, []).append(r)
    scored = [(figures(x.error for x in rs)["median"], name, rs) for name, rs in by_run.items()]
    scored = sorted((s for s in scored if math.isfinite(s[0])), key=lambda s: -s[0])[:n]
    lines = [[name, rs[0].row.publisher, rs[0].row.engine, level(rs[0].row), _pct(m),
              ", ".join(f"{x.row.metric}/{x.row.statistic} {_pct(x.error, True)}" for x in rs)] for m, name, rs in scored]
    return render.table(lines, ["run", "publisher", "engine", "level", "median |err|", "rows"])


def _version_rules() -> str:
    """The presets' by_version rules in words: "vllm before 0.8.0: unchunked_prefill prefill_first"."""
    from calc.spec.engine import engines

    return "; ".join(f"{name} {r.when()}: " + ", ".join(f"{k} {v}" for k, v in r.set.items())
                     for name, preset in engines().items() for r in preset.by_version) or "none"


def _shipped(shipped: LoadRun | None) -> str:
    if shipped is None:
        return ""
    return f"""
With the presets as committed (calc/data/engines.yaml: what `roofline compare` and `plan` run; their
fitted fields were fitted on the per-pass rows, every publisher's, never on these):

```
{chr(10).join(summary_lines(shipped.results))}
```
"""


def section(lr: LoadRun, n_file: int, loso: bool = True, shipped: LoadRun | None = None) -> str:
    """The accuracy report's "Serving under load" section (markdown); ``shipped``: the same rows with
    the presets as committed (what `roofline compare` runs), beside the held-out figures."""
    from calc.accuracy.loadrows import ROUNDS_UNSTATED

    res = lr.results
    held = ("each publisher's rows predicted with the engine presets fitted, in the per-pass fit above, on "
            "every *other* publisher's rows (its LOSO fold; a publisher with no per-pass rows: the presets "
            "fitted on all of them)") if loso else "**--no-fit: the presets as committed, not held out**"
    tables = "\n\n".join(f"### By {title}\n\n```\n{table(res, title, key, order)}\n```"
                         for title, key, order in GROUPINGS)
    skipped = "\n".join(f"- `{rid}`: {why}" for rid, why in lr.skipped) or "- none"
    return f"""## Serving under load

Every row of [under_load.csv](under_load.csv) ({n_file} published measurements of engines serving
many requests at once: {len({r.row.run for r in res})} runs, {len({r.row.publisher for r in res})} publishers, {len({r.row.engine for r in res})} engines; sources in
[SOURCES.md](SOURCES.md)) predicted through the serving simulator, as
`roofline compare` predicts a `vllm bench serve` run: {held}. Nothing is fitted on these
rows. One simulation per run, of the run's own request count, uncapped (a burst: all its
requests; {ROUNDS_UNSTATED} per client where the
count is not published), each request at the published lengths, or (lengths "uniform R", as
the benchmark's random dataset drew them) at its own, drawn from [int(L x R), L] (prompts at least 1 token, outputs at least 1) with a fixed
seed, or (lengths "varied O" / "varied P/O": published means of lengths that varied, a dataset such
as ShareGPT or outputs that end at EOS) at its own output (and prompt) drawn on [1, cap] from the
maximum-entropy law with the published mean (a geometric law truncated at the cap), scaled to the
run's total; a median ITL is predicted as the median request's TPOT. A run whose engine version a
preset's `by_version` rules name runs that version's scheduler and kernels (calc/data/engines.yaml,
each rule cited there: {_version_rules()}). Load level is
the number of requests in flight (clients, or a burst's size); open-loop runs are "rate". Cells:
median |error| / p90 |error| / median signed error (rows); signed < 0: the prediction is
below the measurement (optimistic for a time, pessimistic for a rate). Scored in {lr.seconds:.1f} s
({lr.cpu_s:.1f} s of CPU).

```
{chr(10).join(summary_lines(res))}

{chr(10).join(target_lines(res))}
```
{_shipped(shipped)}
{tables}

### The runs missed most

```
{worst(res)}
```

### Rows not predicted

{skipped}
"""
