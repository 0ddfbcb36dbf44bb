"""Calibration of a run's measurements: fit per dtype, write the profile, re-predict through calc.

`roofline validate` calls ``calibrate_run`` on its fresh rows; `roofline calibrate` calls
``refit`` on a saved measurements.csv (torch-free). Both fit on the rows marked "fit",
write the profile atomically, load it back with calc.spec.catalog.load_hardware and
predict every row with calc itself, so the reported "calibrated" numbers are what
`roofline estimate --hardware calibrated.yaml` says.
"""

from __future__ import annotations

import datetime as _dt
import platform
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from calc.core.errors import SpecError
from calc.core.units import GB, MICRO
from calc.spec.catalog import load_hardware, load_model
from calc.spec.hardware import HardwareSpec
from validate import calibrate as cal
from validate.measurements import predict_point, read_rows, request_prediction, resolve_spec

if TYPE_CHECKING:
    from validate.runner import Run


def calibrate_run(state: Run, ko_prior: float) -> None:
    """Fit per dtype on the fit points, write calibrated.yaml, re-predict every row through calc."""
    out = Path(state.opts.out)
    prov = provenance(state)
    hw, fits = fit_rows(state.spec, state.base, state.rows, ko_prior, prov)
    if hw is None:
        state.notes.append("no measured fit points: nothing to calibrate")
        return
    path = cal.write_profile(hw, out / "calibrated.yaml",
                             f"Calibrated by `roofline validate` on {state.device_name}; load with --hardware {out / 'calibrated.yaml'}")
    state.calibrated = load_hardware(path)  # the file, as users will load it
    state.fits = fits
    state.rows = [r if r.status != "ok" else
                  replace(r, predicted_calibrated_s=predict_point(state.spec, state.calibrated, r.point)[0])
                  for r in state.rows]
    state.errors = held_out_errors(state.rows)
    state.notes += plausibility_notes(state)
    # the profile as written must reproduce the fit: calc's times vs the fit's own formula
    for r in state.rows:
        if r.status == "ok" and r.point.dtype in fits:
            mine = cal.predict(cal.terms(state.spec, state.base, [r.point]), fits[r.point.dtype])[0]
            if abs(r.predicted_calibrated_s / mine - 1) > 1e-3:
                state.notes.append(f"calibrated.yaml predicts {r.point.label} {100 * (r.predicted_calibrated_s / mine - 1):+.2f}% "
                                   "off the fit (a raised fp32 peak moves other dtypes' elementwise roofs)")
                break
    for req in state.requests:
        req["predicted_calibrated"] = request_prediction(state.spec, state.calibrated, req["dtype"])


def plausibility_notes(state: Run) -> list[str]:
    """Say where a fit left physics: rates far above what the probes measured, or overheads that
    swallow most of a pass (then the profile describes these points, not the device)."""
    out, probe = [], state.probes
    for d, f in state.fits.items():
        bw = state.base.memory_bandwidth_bytes_per_s * f.memory
        if probe is not None and bw > 2 * probe.bandwidth_bytes_per_s:
            out.append(f"{d}: the fit's bandwidth {bw / GB:.3g} GB/s is over twice the probes' "
                       f"{probe.bandwidth_bytes_per_s / GB:.3g} GB/s (weights cache-resident, or memory terms do not "
                       "bound these points): do not carry this profile to larger models")
        rate = state.base.peak_flops_per_s(d) * f.compute
        measured = probe.peak_flops_per_s(d) if probe is not None else None
        if measured and rate > 2 * measured:
            out.append(f"{d}: the fit's matmul rate {rate / 1e9:.3g} GFLOP/s is over twice the probes' "
                       f"{measured / 1e9:.3g} GFLOP/s")
        times = [r.measured_s for r in state.rows if r.status == "ok" and r.point.dtype == d]
        if times and f.step_overhead_s > 0.5 * min(times):
            out.append(f"{d}: the fitted step overhead ({f.step_overhead_s * 1e3:.3g} ms) is over half the fastest "
                       f"pass ({min(times) * 1e3:.3g} ms): fixed costs dominate these points")
    V, H = state.spec.vocab_size, state.spec.hidden_size
    if "fp32" in state.fits and state.spec.serving_dtype != "fp32" and 2 * V * H > 0.1 * 4 * state.spec.params_total:
        out.append(f"fp32 runs: calc reads the lm_head ({V * H / 1e6:.0f} M weights) at the model's serving dtype "
                   f"({state.spec.serving_dtype}), not fp32 (calc/operators.py pass_ops); the fp32 fit absorbs it")
    return out


def fit_rows(spec, base, rows, ko_prior, prov):
    """(calibrated profile, fits per dtype) from measured rows; (None, {}) if no dtype has fit points."""
    ok = [r for r in rows if r.status == "ok" and r.measured_s]
    fits = {}
    for d in dict.fromkeys(r.point.dtype for r in ok):
        mine = [r for r in ok if r.point.dtype == d and r.split == "fit"]
        if not mine:
            continue
        t = cal.terms(spec, base, [r.point for r in mine])
        fits[d] = cal.fit_terms(t, np.array([r.measured_s for r in mine]), ko_prior)
    if not fits:
        return None, {}
    prov = {**prov, "fits": {d: {"compute": f.compute, "memory": f.memory, "attention": f.attention,
                                 "kernel_overhead_us": f.kernel_overhead_s / MICRO,
                                 "step_overhead_us": f.step_overhead_s / MICRO,
                                 "kernel_overhead_fitted": f.kernel_overhead_fitted}
                             for d, f in fits.items()}}
    hw = cal.calibrated_profile(base, fits, prov)
    residuals = {}
    for r in ok:
        if r.point.dtype in fits:
            pred = cal.predict(cal.terms(spec, base, [r.point]), fits[r.point.dtype])[0]
            residuals.setdefault(r.split, []).append(float(pred / r.measured_s - 1))
    data = hw.model_dump(mode="json", exclude_none=True)
    data["calibration"]["residuals"] = {
        k: {"median_abs": float(np.median(np.abs(v))), "p90_abs": float(np.percentile(np.abs(v), 90)),
            "n": len(v)} for k, v in residuals.items()}
    return HardwareSpec(**data), fits


def held_out_errors(rows) -> dict:
    """{(dtype, phase): {"before": stats, "after": stats}} over held-out measured points."""
    out = {}
    for r in rows:
        if r.status == "ok" and r.split == "held-out":
            out.setdefault((r.point.dtype, r.point.phase), []).append(r)
    return {k: {"before": cal.error_stats([r.predicted_default_s for r in v], [r.measured_s for r in v]),
                "after": cal.error_stats([r.predicted_calibrated_s for r in v], [r.measured_s for r in v])}
            for k, v in sorted(out.items())}


def provenance(state: Run) -> dict:
    import torch

    pts = [r for r in state.rows if r.status == "ok"]
    return {
        "kind": "calibrated", "device": state.opts.device, "device_name": state.device_name,
        "torch": torch.__version__, "python": platform.python_version(), "threads": state.threads,
        "date": _dt.datetime.now().isoformat(timespec="seconds"), "model": state.spec.name,
        "layers": state.spec.num_layers, "dtypes": sorted({r.point.dtype for r in pts}),
        "method": "least squares on relative error, per compute dtype; held-out: every 3rd point per (dtype, phase)",
        "split": {"fit": [r.point.label for r in pts if r.split == "fit"],
                  "held-out": [r.point.label for r in pts if r.split == "held-out"]},
    }


def refit(csv_path: Path, base_ref: str, out: Path, model_ref: str | None = None):
    """`roofline calibrate`: refit a base profile from a saved measurements.csv; write ``out`` atomically.
    Returns (profile, fits, held-out errors, rows)."""
    rows = read_rows(csv_path)
    base = load_hardware(base_ref)
    folder = Path(csv_path).parent
    layers = next((r.layers for r in rows if r.layers), None)
    if model_ref is not None:
        spec = resolve_spec(model_ref, layers)
    elif (folder / "model.yaml").is_file():
        spec = load_model(folder / "model.yaml")
    else:
        spec = resolve_spec(rows[0].model.split("@")[0], layers)
    ko_prior = base.kernel_overhead_s
    probes = folder / "probes.yaml"
    if probes.is_file():
        ko_prior = load_hardware(probes).kernel_overhead_s
    ok = [r for r in rows if r.status == "ok" and r.measured_s]
    if not any(r.split == "fit" for r in ok):
        raise SpecError(csv_path, "split", "no measured points marked fit: nothing to calibrate from")
    rows = [replace(r, predicted_default_s=predict_point(spec, base, r.point)[0]) if r.status == "ok" else r
            for r in rows]
    prov = {"kind": "calibrated", "device": rows[0].device, "date": _dt.datetime.now().isoformat(timespec="seconds"),
            "model": spec.name, "layers": spec.num_layers, "threads": rows[0].threads,
            "measurements": str(csv_path), "method": "least squares on relative error, per compute dtype",
            "split": {"fit": [r.point.label for r in ok if r.split == "fit"],
                      "held-out": [r.point.label for r in ok if r.split == "held-out"]}}
    try:
        import torch

        prov["torch"] = torch.__version__
    except ImportError:
        pass
    hw, fits = fit_rows(spec, base, rows, ko_prior, prov)
    path = cal.write_profile(hw, out, f"Calibrated by `roofline calibrate` from {csv_path}")
    hw = load_hardware(path)
    rows = [replace(r, predicted_calibrated_s=predict_point(spec, hw, r.point)[0]) if r.status == "ok" else r
            for r in rows]
    return hw, fits, held_out_errors(rows), rows
