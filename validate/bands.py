"""The bands a calibrated profile carries: from its own held-out validation, never from its fit.

Each timed grid point of `roofline validate` is a residual log(predicted / measured time) of
the kernel profile on a model the profile never saw (prefill: the TTFT family; decode steps:
decode), at load level "pass", the profile's engine preset, the point's precision class.
calc.accuracy.bands builds them into a band table, as `roofline accuracy` does for the
published rows (the same quantiles, groups, fallback, minimum rows and widening calibrated on
held-out units), with the held-out model as the unit: coverage is checked with each model's
points against bands built, and widened, from the other models' points alone.
"""

from __future__ import annotations

import math
from pathlib import Path

from calc.accuracy.bands import Residual, build, coverage, held_out_check
from calc.spec.bands import BandTable, arch_of, gpu_family, precision_class
from calc.spec.bands import Regime as _Regime
from calc.spec.catalog import arch_of_name
from calc.spec.hardware import HardwareSpec

FAMILY = {"prefill": "ttft", "decode": "decode"}


def residuals(rows, hw: HardwareSpec, specs=()) -> list[Residual]:
    """The kernel profile's residuals on every timed held-out point; ``specs``: the models as built
    (a row names its reduced model, e.g. llama-3.2-1b@2L), else catalog names."""
    arch = {s.name: arch_of(s) for s in specs}
    engine = hw.preset.name if hw.preset is not None else "default"
    out = []
    for r in rows:
        p, m = r.predicted_calibrated_s, r.measured_s
        if r.status != "ok" or not p or not m or not (math.isfinite(p) and p > 0 and m > 0):
            continue
        if r.point.phase not in FAMILY:  # a mixed step is no metric a band brackets (TTFT, TPOT, ...)
            continue
        d = r.point.dtype
        regime = _Regime(FAMILY[r.point.phase], "pass", engine, precision_class(d, d), gpu_family(hw.name),
                         arch[r.model] if r.model in arch else arch_of_name(r.model))
        out.append(Residual(f"{r.model}/{d}/{r.point.phase}/{r.point.batch}/{r.point.size}", r.model, regime,
                            math.log(p / m), False))
    return out


def profile_bands(rows, hw: HardwareSpec, specs=()) -> tuple[BandTable | None, dict]:
    """The band table for the profile (None: too few points for even one group) and its coverage,
    checked leave-one-model-out (calc.accuracy.bands.coverage's dict)."""
    res = residuals(rows, hw, specs)
    table = build(res, source=f"roofline validate: held-out models {', '.join(sorted({r.source for r in res}))}",
                  calibrate=True)
    return (table if table.groups else None), coverage(held_out_check(res, calibrate=True))


def write_with_bands(hw: HardwareSpec, table: BandTable, path: Path, header: str) -> Path:
    """The profile rewritten with its bands (atomically: the profile without them stays until then)."""
    from .calibrate import write_profile

    return write_profile(hw.model_copy(update={"bands": table}), path, header)
