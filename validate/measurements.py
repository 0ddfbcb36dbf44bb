"""One row per grid point: inputs, measured and predicted times, relative errors; CSV in and out.

Columns of measurements.csv (times in seconds; errors are predicted / measured - 1):

    model, layers, device, threads, dtype, phase, batch, prompt_len (prefill T),
    context (decode S), split (fit | held-out), status (ok | oom | skipped: ...),
    measured_s (median), min_s, max_s, spread (std/mean), samples, others_cores, flags,
    predicted_default_s, predicted_calibrated_s, error_default, error_calibrated, bound_default
"""

from __future__ import annotations

import csv
import functools
import io
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from calc.core.errors import SpecError
from calc.cost.dtypes import Dtypes
from calc.cost.efficiency import Efficiency
from calc.cost.latency import decode_cost, prefill_cost
from calc.spec.catalog import load_model
from calc.spec.hardware import HardwareSpec
from calc.spec.model import ModelSpec
from validate.timing import Point, Timing

COLUMNS = ["model", "layers", "device", "threads", "dtype", "phase", "batch", "prompt_len", "context", "split",
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
            "prompt_len": p.size if p.phase == "prefill" else "", "context": p.size if p.phase == "decode" else "",
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


def read_rows(path: str | Path) -> list[Row]:
    """Rows of a measurements.csv; problems are SpecErrors naming the file, line and column.
    Every number is finite and in range (calc.core.limits) and the row count is capped before parsing."""
    from calc.core import limits
    from calc.core.files import read_text

    path = Path(path)
    text = read_text(path, "measurements CSV")
    count = text.count("\n")
    if count > limits.max_csv_rows():
        raise SpecError(path, None, limits.too_many("rows", count, limits.max_csv_rows(), limits.ROWS_ENV))
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in ("dtype", "phase", "batch", "prompt_len", "context", "split", "status", "measured_s")
               if c not in (reader.fieldnames or [])]
    if missing:
        raise SpecError(path, None, f"not a measurements.csv: missing column(s) {', '.join(missing)}")
    rows = []
    for line, rec in enumerate(reader, start=2):
        if None in rec.values() or None in rec:
            raise SpecError(path, f"line {line}", f"expected {len(reader.fieldnames)} columns, got "
                                                  f"{len([v for v in rec.values() if v is not None])} (a truncated row?)")
        try:
            phase = rec["phase"]
            if phase not in ("prefill", "decode"):
                raise ValueError(f"phase: must be prefill or decode, got {phase!r}")
            size_col = "prompt_len" if phase == "prefill" else "context"
            point = Point(_dtype(rec), phase, _int(rec, "batch", limits.MAX_BATCH),
                          _int(rec, size_col, limits.MAX_TOKENS))
            num = functools.partial(_num, rec)
            rows.append(Row(rec.get("model", ""), _int(rec, "layers", limits.MAX_LAYERS, 0), rec.get("device", ""),
                            _int(rec, "threads", 1 << 20, 0), point, rec["split"], rec["status"],
                            measured_s=num("measured_s"), min_s=num("min_s"), max_s=num("max_s"),
                            spread=num("spread"), samples=_int(rec, "samples", 1 << 40, 0),
                            others_cores=num("others_cores") or 0.0, flags=rec.get("flags", ""),
                            predicted_default_s=num("predicted_default_s"),
                            predicted_calibrated_s=num("predicted_calibrated_s"),
                            bound_default=rec.get("bound_default", "")))
        except ValueError as exc:
            raise SpecError(path, f"line {line}", str(exc)) from None
    if not rows:
        raise SpecError(path, None, "no rows")
    return rows


def _dtype(rec: dict) -> str:
    from calc.core.units import canonical_dtype

    return canonical_dtype(rec["dtype"].strip()) if rec["dtype"].strip() else _bad("dtype", rec["dtype"], "a dtype")


def _bad(key: str, cell: str, what: str):
    raise ValueError(f"{key}: expected {what}, got {cell[:40]!r}")


def _int(rec: dict, key: str, high: int, low: int = 1) -> int:
    """A whole number in [low, high]; an absent optional column is ``low``."""
    cell = (rec.get(key) or "").strip()
    if not cell and key not in ("batch", "prompt_len", "context"):
        return low
    try:
        value = float(cell)
    except ValueError:
        value = float("nan")
    if not (math.isfinite(value) and value == int(value) and low <= value <= high):
        _bad(key, cell, f"a whole number from {low} to {high:,}")
    return int(value)


def _num(rec: dict, key: str) -> float | None:
    """A finite number >= 0 (times in seconds up to limits.MAX_SECONDS), or None for an empty cell."""
    from calc.core import limits

    cell = (rec.get(key) or "").strip()
    if not cell:
        return None
    try:
        value = float(cell)
    except ValueError:
        _bad(key, cell, "a number")
    if key.startswith(("error_",)):
        return value
    if not 0 <= value <= limits.MAX_SECONDS:  # NaN fails too
        _bad(key, cell, f"a finite number from 0 to {limits.MAX_SECONDS:g}")
    return value


def predict_point(spec: ModelSpec, hw: HardwareSpec, p: Point) -> tuple[float, str]:
    """The calculator's time for a grid point (seconds) and what bounds it, at the run's dtype."""
    dt = Dtypes(p.dtype, p.dtype, p.dtype)
    eff = Efficiency.of(hw)
    if p.phase == "prefill":
        cost, _ = prefill_cost(spec, hw, np.float64(p.batch), np.float64(p.size), dt, eff)
    else:
        cost = decode_cost(spec, hw, np.float64(p.batch), np.float64(p.size), dt, eff)
    return float(cost.time_s), str(cost.bound)


__all__ = ["Row", "read_rows", "write_rows", "predict_point"]


SEED = (2, 128, 16)  # the seed experiment: prompt [2, 128], 16 generated tokens


def resolve_spec(ref: str, layers: int | None) -> ModelSpec:
    """The model to build: a catalog name or file, at ``layers`` layers of its real widths."""
    from validate.reference import reduced

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
