"""How close the calculator comes to published measurements: `roofline accuracy`.

Every row of reports/accuracy/published.csv (calc.accuracy.rows) is predicted
(calc.accuracy.predict) by three models side by side:

- ideal: the pure roofline (data-sheet peaks, no efficiencies, no overheads);
- previous: the engine presets as they were before their kernel-level fields came from
  kernel measurements, as recorded in reports/accuracy/previous_presets.csv (predicted by the
  code of that commit; rows added since have none). Those presets were fitted on a hash
  half of these rows, so this column is not held out;
- current: the model as committed now (catalog profiles, engines.yaml) with the fields
  calc/data/accuracy_fit.yaml lists refitted leave-one-source-out (calc.accuracy.fit): each
  publisher's rows predicted with parameters fitted on every other publisher's rows, no
  parameter per row.

The presets as committed now (no refit) are kept beside them (`presets`), and the
parameters fitted on all rows are reported too: what to adopt into engines.yaml.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from calc.accuracy.fit import FitSpec, Predictor, fit, load_fit_spec, loso
from calc.accuracy.predict import GROUP_SIZE, predict
from calc.accuracy.rows import PUBLISHED, Row, load_rows
from calc.accuracy.stats import error, stats, time_ratio
from calc.core.progress import Progress, silent
from calc.spec.engine import EngineSpec, engines

# also BOUNDS and OWN_KERNELS, read from calc/data/accuracy_fit.yaml when asked (__getattr__)
__all__ = ["GROUP_SIZE", "MODELS", "PUBLISHED", "Result", "Run", "Row", "load_rows", "predict", "run", "stats"]

PREVIOUS = PUBLISHED.parent / "previous_presets.csv"
MODELS = (("ideal", "ideal roofline"), ("previous", "previous presets"), ("current", "current model, LOSO"))


def __getattr__(name: str):
    """BOUNDS (field -> physical bounds) and OWN_KERNELS, as calc/data/accuracy_fit.yaml states
    them, for the code that refits presets on a user's runs (calc.accuracy.refit); read when asked."""
    if name == "BOUNDS":
        return {f: p.bounds for f, p in load_fit_spec().fitted.items()}
    if name == "OWN_KERNELS":
        return load_fit_spec().own_kernels
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class Result:
    row: Row
    ideal: float
    previous: float  # nan where the record has no prediction for the row
    presets: float
    current: float

    def error(self, which: str) -> float:
        """Signed relative error of a prediction, (predicted - measured) / measured."""
        return error(getattr(self, which), self.row.value)

    def time_ratio(self, which: str) -> float:
        """Predicted over measured time (> 1: pessimistic)."""
        return time_ratio(getattr(self, which), self.row.value, self.row.metric)


@dataclass(frozen=True)
class Run:
    results: list[Result]
    skipped: list[tuple[str, str]]
    spec: FitSpec
    fitted_all: dict[str, EngineSpec]  # fitted on every row: what to adopt
    folds: dict[str, dict[str, EngineSpec]]  # left-out publisher -> presets fitted without it


def load_previous(path: Path = PREVIOUS) -> dict[str, float]:
    """Row id -> the previous presets' prediction; empty without a record."""
    if not path.exists():
        return {}
    with open(path, newline="") as fh:
        return {r["id"]: float(r["predicted"]) if r["predicted"] else math.nan for r in csv.DictReader(fh)}


def run(fit_rows: bool = True, rows: list[Row] | None = None, progress: Progress = silent) -> Run:
    """Predict every row three ways; ``fit_rows`` False: the current model is the presets
    as committed (no fit, quick). ``progress`` per fitted fold."""
    if rows is None:
        rows, skipped = load_rows()
    else:
        skipped = []
    presets = engines()
    spec = load_fit_spec()
    pred = Predictor(tuple(spec.fitted))
    committed = {r.id: pred(r, presets[r.preset]) for r in rows}
    if fit_rows:
        current, folds = loso(rows, presets, spec, pred, progress=progress)
        fitted_all = fit(rows, presets, spec, pred)
        progress(1, 1, "fitted")
    else:
        current, folds, fitted_all = committed, {}, presets
    previous = load_previous()
    results = [Result(r, predict(r, None), previous.get(r.id, math.nan), committed[r.id], current[r.id]) for r in rows]
    return Run(results, skipped, spec, fitted_all, folds)
