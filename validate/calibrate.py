"""Shared helpers of validation and calibration: error statistics, writing a profile as YAML.

(The whole-pass least-squares fit that lived here is gone: calibration fits kernels,
validate/kernelfit.py; whole passes only validate, DESIGN.md "Calibration".)
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import yaml

from calc.core.files import atomic_write
from calc.spec.hardware import HardwareSpec


def error_stats(pred, meas) -> dict:
    """Median and p90 of |pred/meas - 1|, and the count."""
    e = np.abs(np.asarray(pred, float) / np.asarray(meas, float) - 1.0)
    e = e[np.isfinite(e)]
    if not len(e):
        return {"n": 0, "median": None, "p90": None}
    return {"n": int(len(e)), "median": float(np.median(e)), "p90": float(np.percentile(e, 90))}


def profile_yaml(hw: HardwareSpec, header: str = "") -> str:
    data = hw.model_dump(mode="json", exclude_none=True)
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=110)
    lines = [f"# {line}" for line in header.splitlines()] if header else []
    return "\n".join([*lines, body])


def write_profile(hw: HardwareSpec, path: str | Path, header: str = "") -> Path:
    return atomic_write(path, profile_yaml(hw, header))


def fmt_pct(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"

