"""Fitting preset fields to published rows, and leave-one-source-out (LOSO) scoring.

Which fields are fitted, their scope, physical bounds and priors are data
(calc/data/accuracy_fit.yaml). A fold fits on every publisher's rows but one, starting from
the priors, and predicts the one left out; no fit sees the rows it is scored on, and no
parameter is per row. The search is a coordinate search in log space, minimising the mean
absolute log error (symmetric in over- and under-prediction); predictions are cached per
(row, the preset's fitted values), so folds that walk the same path cost nothing twice.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from calc.accuracy.predict import SERVING_FIELD, model_metric, serving_time
from calc.accuracy.rows import Row
from calc.core.progress import Progress, silent
from calc.spec.engine import EngineSpec

FIT_FILE = Path(__file__).resolve().parents[1] / "data" / "accuracy_fit.yaml"
FACTORS = (4.0, 2.0, 1.4, 1 / 1.4, 0.5, 0.25)
FAILED_LOSS = 3.0  # |log error| charged for a row the calculator cannot predict (KV does not fit)
SERVERS = ("vllm", "trtllm")  # the "default" preset without rows of its own: their geometric mean


class FitParam(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    scope: Literal["shared", "engine", "own_kernels"]
    bounds: tuple[float, float]
    prior: float | dict[str, float]

    @model_validator(mode="after")
    def _check(self) -> FitParam:
        lo, hi = self.bounds
        priors = self.prior.values() if isinstance(self.prior, dict) else [self.prior]
        if not lo <= hi or any(not lo <= p <= hi for p in priors):
            raise ValueError(f"bounds {self.bounds} must hold every prior {list(priors)}")
        if isinstance(self.prior, dict) and "*" not in self.prior:
            raise ValueError('a prior per preset needs "*" for the rest')
        return self

    def prior_for(self, preset: str) -> float:
        if isinstance(self.prior, dict):
            return self.prior.get(preset, self.prior["*"])
        return self.prior


class FitSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    own_kernels: tuple[str, ...] = ()
    sources: dict[str, str] = Field(default_factory=dict)
    fitted: dict[str, FitParam]

    @model_validator(mode="after")
    def _fields(self) -> FitSpec:
        unknown = [f for f in self.fitted if f not in EngineSpec.model_fields]
        if unknown:
            raise ValueError(f"not engine-preset fields: {', '.join(unknown)}")
        return self

    def applies(self, name: str, preset: str) -> bool:
        return self.fitted[name].scope != "own_kernels" or preset in self.own_kernels


def load_fit_spec(path: Path = FIT_FILE) -> FitSpec:
    from calc.spec.catalog import build, read_yaml

    return build(FitSpec, read_yaml(path), path)


@dataclass
class Predictor:
    """predict() with the model's part cached on the row and its preset's fitted values, less
    the per-request serving time, which is added after (a trial of that field alone costs nothing).
    Per preset state (name and fitted values) a memo for model_metric: the rows it predicts
    share what does not depend on the row (a replica's step model and KV budget); and one
    memo across states (what depends on the row and no fitted value: model_metric's ``across``)."""

    fields: tuple[str, ...]
    cache: dict = field(default_factory=dict)
    memos: dict = field(default_factory=dict)
    across: dict = field(default_factory=dict)

    def __post_init__(self):
        self.keyed = tuple(f for f in self.fields if f != SERVING_FIELD)
        self._last: dict = {}  # preset name -> (the last preset object seen, its state)

    def state(self, preset: EngineSpec) -> tuple:
        """(name, fitted values but the serving field): read once per preset object (a loss asks
        for it once per row; presets are frozen)."""
        last = self._last.get(preset.name)
        if last is None or last[0] is not preset:
            last = self._last[preset.name] = (preset, (preset.name, tuple(getattr(preset, f) for f in self.keyed)))
        return last[1]

    def __call__(self, row: Row, preset: EngineSpec) -> float:
        state = self.state(preset)
        key = (row.id, state)
        if key not in self.cache:
            self.cache[key] = model_metric(row, preset, memo=self.memos.setdefault(state, {}), across=self.across)
        return self.cache[key] + serving_time(row, preset)


def priors(presets: dict[str, EngineSpec], spec: FitSpec) -> dict[str, EngineSpec]:
    """Every non-ideal preset with its fitted fields at their priors: where a fold starts."""
    out = {}
    for name, p in presets.items():
        update = {f: fp.prior_for(name) for f, fp in spec.fitted.items() if not p.ideal and spec.applies(f, name)}
        out[name] = p.model_copy(update=update)
    return out


def loss(rows: list[Row], presets: dict[str, EngineSpec], pred: Callable[[Row, EngineSpec], float]) -> float:
    """Mean absolute log error over ``rows``."""
    errs = []
    for r in rows:
        p = pred(r, presets[r.preset])
        errs.append(abs(math.log(p / r.value)) if p > 0 and math.isfinite(p) else FAILED_LOSS)
    return float(np.mean(errs)) if errs else 0.0


def fit(rows: list[Row], presets: dict[str, EngineSpec], spec: FitSpec, pred: Predictor,
        rounds: int = 2) -> dict[str, EngineSpec]:
    """The spec's fields fitted on ``rows`` from their priors, within their bounds. Shared
    fields move together for every preset with rows whose kernels are the vendor's libraries;
    an engine with kernels of its own (``own_kernels``) gets its own value of them; the rest
    per preset with rows; a preset without rows keeps its priors ("default": the servers'
    geometric mean, see below)."""
    current = priors(presets, spec)
    used = sorted({r.preset for r in rows})
    vendor = tuple(e for e in used if e not in spec.own_kernels)
    shared = [f for f, fp in spec.fitted.items() if fp.scope == "shared"]
    groups = [(vendor, f) for f in shared if vendor]
    groups += [((e,), f) for e in used if e in spec.own_kernels for f in shared]
    groups += [((e,), f) for e in used for f, fp in spec.fitted.items() if fp.scope != "shared" and spec.applies(f, e)]
    best = loss(rows, current, pred)
    for _ in range(rounds):
        for names, f in groups:
            lo, hi = spec.fitted[f].bounds
            for factor in FACTORS:
                trial = dict(current)
                for n in names:
                    v = getattr(trial[n], f)
                    seed = v if v > 0 else (spec.fitted[f].prior_for(n) or (hi if math.isfinite(hi) else 1.0) / 16)
                    trial[n] = trial[n].model_copy(update={f: min(max(seed * factor, lo), hi)})
                trial_loss = loss(rows, trial, pred)
                if trial_loss < best - 1e-9:
                    best, current = trial_loss, trial
    if "default" not in used:
        current = _default_from_servers(current, spec, used)
    return current


def _default_from_servers(presets: dict[str, EngineSpec], spec: FitSpec, used: list[str]) -> dict[str, EngineSpec]:
    """The "default" preset: the geometric mean of the fitted server engines' per-engine
    fields (the documented middle ground), shared fields as fitted."""
    servers = [presets[n] for n in SERVERS if n in used]
    if "default" not in presets or not servers:
        return presets
    update = {f: float(np.exp(np.mean([np.log(max(getattr(e, f), 1e-9)) for e in servers])))
              for f, fp in spec.fitted.items() if fp.scope == "engine"}
    update |= {f: getattr(servers[0], f) for f, fp in spec.fitted.items() if fp.scope == "shared"}  # one vendor value
    return {**presets, "default": presets["default"].model_copy(update=update)}


def folds(rows: list[Row]) -> dict[str, tuple[list[Row], list[Row]]]:
    """publisher -> (rows to fit on: everyone else's, rows to score: the publisher's)."""
    return {s: ([r for r in rows if r.publisher != s], [r for r in rows if r.publisher == s])
            for s in sorted({r.publisher for r in rows})}


def loso(rows: list[Row], presets: dict[str, EngineSpec], spec: FitSpec, pred: Predictor,
         fitter: Callable = fit, progress: Progress = silent) -> tuple[dict[str, float], dict[str, dict[str, EngineSpec]]]:
    """Each row predicted with the presets fitted on the other publishers' rows; and the
    fitted presets per left-out publisher. ``progress`` after each fold."""
    out, fitted = {}, {}
    split = folds(rows)
    for i, (source, (train, test)) in enumerate(split.items()):
        progress(i, len(split) + 1, f"fitting without {source}")
        fitted[source] = fitter(train, presets, spec, pred)
        for r in test:
            out[r.id] = pred(r, fitted[source][r.preset])
    return out, fitted
