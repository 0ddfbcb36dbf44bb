"""`roofline compare --fit`: refit an engine preset's free parameters on a user's own runs.

The parameters refitted are those the kernel-level calibration leaves to the engine
(DESIGN.md, "Calibration"): the per-kernel launch gap, the per-step framework time and
the per-request serving-stack time, plus the large-GEMM / streaming scales for engines
with their own matmul kernels (calc.accuracy.harness.OWN_KERNELS). Each stays inside the
physical range calc.accuracy.harness.BOUNDS states. The loss is the mean absolute log
error (symmetric in over- and under-prediction) of each run, averaged over the runs.

Held out by run: with k = min(runs, 5) folds (run i in fold i mod k; leave-one-run-out
for up to five runs), each fold is predicted by the preset fitted on the other folds, so
the "after" error is on runs the fit never saw; "before" is the preset as it was. The
preset written is then fitted on every run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np

from calc.accuracy.compare import predict
from calc.accuracy.harness import BOUNDS, OWN_KERNELS
from calc.accuracy.scenario import Scenario
from calc.core.errors import SpecError
from calc.spec.engine import EngineSpec

OVERHEADS = ("kernel_overhead_us", "step_overhead_us", "request_overhead_us")
SCALES = ("compute_scale", "memory_scale")
FACTORS = (4.0, 2.0, 1.4, 1 / 1.4, 0.5, 0.25)
SEED = {"request_overhead_us": 1000.0}  # a start for a parameter at 0 (a factor cannot move it)
MAX_FOLDS = 5
BAD = 3.0  # the loss of a prediction that is not a finite positive number


def free_parameters(preset: EngineSpec) -> tuple[str, ...]:
    return OVERHEADS + (SCALES if preset.name in OWN_KERNELS else ())


def errors(scenarios: list[Scenario], preset: EngineSpec) -> list[float]:
    """|log(predicted / measured)| for every measured metric of every run (nan-free)."""
    out = []
    for sc in scenarios:
        pred = predict(sc, preset)
        for m, v in sc.measured.items():
            p = pred.get(m, math.nan)
            if math.isnan(p) and m.startswith("itl_p"):
                continue  # not predicted at all (calc.accuracy.compare): not the fit's to fix
            out.append(abs(math.log(p / v)) if p > 0 and math.isfinite(p) and v > 0 else BAD)
    return out


def loss(scenarios: list[Scenario], preset: EngineSpec) -> float:
    """Mean over runs of each run's mean |log error|: every run weighs the same, however many
    correlated metrics (TTFT mean, p50, p99, ...) its tool reports."""
    per_run = [np.mean(e) for sc in scenarios if (e := errors([sc], preset))]
    return float(np.mean(per_run)) if per_run else 0.0


def fit(scenarios: list[Scenario], preset: EngineSpec, rounds: int = 2) -> EngineSpec:
    """Coordinate search in log space over the free parameters, within BOUNDS."""
    best, current = loss(scenarios, preset), preset
    for _ in range(rounds):
        for param in free_parameters(preset):
            lo, hi = BOUNDS[param]
            for factor in FACTORS:
                v = getattr(current, param)
                new = min(max((v if v > 0 else SEED.get(param, 1.0)) * factor, lo), hi)
                trial = current.model_copy(update={param: new})
                value = loss(scenarios, trial)
                if value < best - 1e-9:
                    best, current = value, trial
    return current


@dataclass(frozen=True)
class Fold:
    held_out: tuple[str, ...]  # run names
    fitted: EngineSpec
    before: tuple[float, ...]  # |log error| per held-out metric, the preset as it was
    after: tuple[float, ...]  # the same metrics, the preset fitted on the other folds


@dataclass(frozen=True)
class Refit:
    base: EngineSpec
    fitted: EngineSpec  # on every run
    folds: tuple[Fold, ...]
    runs: tuple[str, ...]

    @property
    def free(self) -> tuple[str, ...]:
        return free_parameters(self.base)

    @staticmethod
    def median_pct(logs) -> float:
        """Median absolute relative error, in the ratio form exp(|log|) - 1."""
        a = np.asarray(logs, float)
        return float(np.expm1(np.median(a))) if a.size else math.nan

    @property
    def held_out_before(self) -> float:
        return self.median_pct([e for f in self.folds for e in f.before])

    @property
    def held_out_after(self) -> float:
        return self.median_pct([e for f in self.folds for e in f.after])


def refit(scenarios: list[Scenario], preset: EngineSpec) -> Refit:
    if len(scenarios) < 2:
        raise SpecError("--fit", None, f"needs at least 2 runs for engine {preset.name} to hold one out "
                                       f"(got {len(scenarios)})")
    if preset.ideal:
        raise SpecError("--fit", None, "the ideal preset has no parameters to fit")
    k = min(len(scenarios), MAX_FOLDS)
    folds = []
    for j in range(k):
        held = [sc for i, sc in enumerate(scenarios) if i % k == j]
        train = [sc for i, sc in enumerate(scenarios) if i % k != j]
        fitted = fit(train, preset)
        folds.append(Fold(tuple(sc.run.name for sc in held), fitted, tuple(errors(held, preset)),
                          tuple(errors(held, fitted))))
    return Refit(preset, fit(scenarios, preset), tuple(folds), tuple(sc.run.name for sc in scenarios))


def preset_yaml(results: list[Refit], files: list[str], tool_versions: list[str], version: str) -> str:
    """The refitted presets as an engines.yaml fragment, with provenance; every number cites
    its source (the fit, or the base preset it was not refitted from)."""
    import hashlib
    import json
    from pathlib import Path

    date = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    digests = []
    for f in files:
        try:
            digests.append(f"{f} (sha256 {hashlib.sha256(Path(f).read_bytes()).hexdigest()[:16]})")
        except OSError:
            digests.append(f)
    head = ["# Engine presets refitted by `roofline compare --fit` on the runs below.",
            f"# date: {date}; roofline {version}",
            *[f"# file: {d}" for d in digests],
            *[f"# tool: {t}" for t in sorted(set(tool_versions))],
            "# Use: --engine THIS_FILE (compare, estimate, sweep, ops, plot) or a workload's engine: THIS_FILE; or copy a preset into calc/data/engines.yaml."]
    body = []
    fields = ("attention_kernel", "attention", "gemm_m_half", "memory_half_mb", "kernel_overhead_us",
              "step_overhead_us", "request_overhead_us", "compute_scale", "memory_scale")
    for r in results:
        b, p = r.base, r.fitted
        free = free_parameters(b)
        fit_note = (f"roofline compare --fit on {len(r.runs)} runs, held out by run ({len(r.folds)} folds): "
                    f"median error {100 * r.held_out_before:.1f}% before, {100 * r.held_out_after:.1f}% after")
        body += [f"{b.name}-fit:",
                 f"  description: {json.dumps(f'{b.name} preset refitted on {len(r.runs)} runs ({date[:10]})')}",
                 "  sources:",
                 f"    base: {json.dumps(f'calc/data/engines.yaml preset {b.name}')}",
                 f"    fit: {json.dumps(fit_note)}",
                 f"  cuda_graphs: {str(p.cuda_graphs).lower()}  # source: base",
                 f"  logits_all_positions: {str(p.logits_all_positions).lower()}  # source: base"]
        for name in fields:
            v = getattr(p, name)
            text = v if isinstance(v, str) else f"{v:.4g}"
            body.append(f"  {name}: {text}  # source: {'fit' if name in free else 'base'}")
        # the base's kernel set, as it is (JSON is YAML): its kernel families are what the family's
        # scheduler and version rules name (calc.accuracy.scenario._scheduler_preset)
        for name in KERNEL_FIELDS:
            body.append(f"  {name}: {json.dumps(b.model_dump(mode='json')[name])}  # source: base")
    return "\n".join(head + body) + "\n"


KERNEL_FIELDS = ("kernels", "kernel_sets", "launch_us", "custom_allreduce", "kernel_curves", "gemv_max_rows", "gemv_int32_flops",
                 "fp16_accumulate", "gemm_dtype", "weight_only", "weight_only_kernels", "moe_kernels")


def refit_groups(results, presets: dict[str, EngineSpec]) -> tuple[list[Refit], list[str]]:
    """One refit per preset the runs were predicted with (runs of each engine fit its own
    preset); a preset with a single run is skipped, with a message."""
    groups: dict[str, list[Scenario]] = {}
    for r in results:
        groups.setdefault(r.scenario.engine, []).append(r.scenario)
    refits, skipped = [], []
    for engine, scs in groups.items():
        preset = presets[engine]
        if len(scs) < 2 or preset.ideal:
            why = "the ideal preset has no parameters" if preset.ideal else "one run cannot be held out"
            skipped.append(f"{preset.name}: not refitted ({why})")
            continue
        refits.append(refit(scs, preset))
    return refits, skipped
