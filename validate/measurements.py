"""One row per grid point: inputs, measured and predicted times, relative errors; CSV in and out.

Columns of measurements.csv (times in seconds; errors are predicted / measured - 1):

    model, layers, device, threads, dtype, phase, batch, prompt_len (prefill T),
    context (decode S; a mixed step's rows' S), chunk and cached (a mixed step's prompt chunk T
    and the C tokens cached before it), split (fit | held-out), status (ok | oom | skipped: ...),
    measured_s (median), min_s, max_s, spread (std/mean), samples, others_cores, flags,
    predicted_default_s, predicted_calibrated_s, error_default, error_calibrated, bound_default
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from calc.core.errors import SpecError
from calc.cost.dtypes import Dtypes
from calc.cost.efficiency import Efficiency
from calc.cost.latency import decode_cost, mixed_step_cost, prefill_cost
from calc.spec.catalog import load_model
from calc.spec.hardware import HardwareSpec
from calc.spec.model import ModelSpec

from .timing import Point, Timing

COLUMNS = ["model", "layers", "device", "threads", "dtype", "phase", "batch", "prompt_len", "context", "chunk",
           "cached", "split",
           "status", "measured_s", "min_s", "max_s", "spread", "samples", "others_cores", "flags",
           "predicted_default_s", "predicted_calibrated_s", "error_default", "error_calibrated", "bound_default"]


@dataclass(frozen=True)
class Row:
    model: str
    layers: int
    device: str
    threads: int
    point: Point
    split: str
    status: str = "pending"
    measured_s: float | None = None
    min_s: float | None = None
    max_s: float | None = None
    spread: float | None = None
    samples: int = 0
    others_cores: float = 0.0
    flags: str = ""
    predicted_default_s: float | None = None
    predicted_calibrated_s: float | None = None
    bound_default: str = ""

    def timed(self, timing: Timing) -> Row:
        """This row with a measurement."""
        return replace(self, status="ok", measured_s=timing.median_s, min_s=min(timing.samples_s),
                       max_s=max(timing.samples_s), spread=timing.spread, samples=len(timing.samples_s),
                       others_cores=timing.others_cores, flags="; ".join(timing.flags()))

    @staticmethod
    def error(pred, meas):
        return None if pred is None or not meas else pred / meas - 1.0

    def record(self) -> dict:
        p = self.point
        r = {
            "model": self.model, "layers": self.layers, "device": self.device, "threads": self.threads,
            "dtype": p.dtype, "phase": p.phase, "batch": p.batch,
            "prompt_len": p.size if p.phase == "prefill" else "", "context": p.size if p.phase != "prefill" else "",
            "chunk": p.chunk if p.phase == "mixed" else "", "cached": p.cached if p.phase == "mixed" else "",
            "split": self.split, "status": self.status, "measured_s": self.measured_s, "min_s": self.min_s,
            "max_s": self.max_s, "spread": self.spread, "samples": self.samples,
            "others_cores": round(self.others_cores, 3), "flags": self.flags,
            "predicted_default_s": self.predicted_default_s, "predicted_calibrated_s": self.predicted_calibrated_s,
            "error_default": self.error(self.predicted_default_s, self.measured_s),
            "error_calibrated": self.error(self.predicted_calibrated_s, self.measured_s),
            "bound_default": self.bound_default,
        }
        return {k: ("" if v is None else f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()}


def write_rows(path: str | Path, rows: list[Row]) -> Path:
    """Rewrite the CSV atomically (an interrupted run keeps every finished point)."""
    from calc.core.files import atomic_write as write_atomic

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow(r.record())
    return write_atomic(path, buf.getvalue())


def predict_point(spec: ModelSpec, hw: HardwareSpec, p: Point) -> tuple[float, str]:
    """The calculator's time for a grid point (seconds) and what bounds it, at the run's dtype."""
    dt = Dtypes(p.dtype, p.dtype, p.dtype)
    eff = Efficiency.of(hw)
    if p.phase == "prefill":
        cost, _ = prefill_cost(spec, hw, np.float64(p.batch), np.float64(p.size), dt, eff)
    elif p.phase == "mixed":  # what the serving simulator's step timer reproduces (calc/serving/steps)
        cost = mixed_step_cost(spec, hw, [1.0] * p.batch + [float(p.chunk)], [float(p.size)] * p.batch + [float(p.cached)],
                               dt, eff, phase="prefill")
    else:
        cost = decode_cost(spec, hw, np.float64(p.batch), np.float64(p.size), dt, eff)
    return float(cost.time_s), str(cost.bound)


__all__ = ["Row", "write_rows", "predict_point"]


SEED = (2, 128, 16)  # the seed experiment: prompt [2, 128], 16 generated tokens


def resolve_spec(ref: str, layers: int | None) -> ModelSpec:
    """The model to build: a catalog name or file, at ``layers`` layers of its real widths."""
    from .reference import reduced

    spec = load_model(ref)
    if layers is not None and not 1 <= layers <= spec.num_layers:
        raise SpecError("--layers", None, f"must be between 1 and {spec.num_layers} for {spec.name}, got {layers}")
    try:
        return reduced(spec, layers)
    except ValueError as exc:
        errors = getattr(exc, "errors", lambda: [])()
        why = errors[0]["msg"].removeprefix("Value error, ") if errors else str(exc)
        raise SpecError("--layers", None, f"{spec.name} with {layers} layers: {why}") from None


def request_prediction(spec, hw, dtype) -> dict:
    """The seed request's TTFT, first decode step and TPOT, predicted with ``hw``."""
    from calc.cost.latency import estimate
    from calc.cost.setup import Setup

    B, T, G = SEED
    est = estimate(spec, hw, B, T, G, Setup.of(weight_dtype=dtype, kv_dtype=dtype, compute_dtype=dtype))
    return {"ttft_s": float(est.ttft_s), "first_decode_s": float(est.decode.time_s), "tpot_s": float(est.tpot_s)}
