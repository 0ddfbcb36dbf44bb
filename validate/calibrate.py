"""Fit a hardware profile's efficiencies to measured pass times; write it atomically.

The calculator's time of a pass (calc/roofline.py) is

    t = sum_ops max(c_i / e_c, m_i / e_m) + K * k_o + s_o

with c_i, m_i an operator's compute and memory times at unit efficiency (times its
layer count), K the pass's kernel count, e_c, e_m the compute and memory
efficiencies, k_o the per-kernel and s_o the per-step overhead. We fit (e_c, e_m,
k_o, s_o) per compute dtype by least squares on relative error, sum (t/y - 1)^2
over the fit points: for fixed (e_c, e_m) the model is linear in (k_o, s_o), solved
in closed form (non-negative); (e_c, e_m) come from a log grid refined three times.
When every point has the same kernel count (one model: prefill and decode run the
same operators) k_o and s_o cannot be told apart; k_o then stays at its prior (the
probe's tiny-kernel time, else the base profile's) and s_o takes the rest.

Points are split deterministically: within each (dtype, phase), sorted by (batch,
size), every third point (the 2nd, 5th, ...) is held out and never seen by the fit.
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from calc.core.files import atomic_write
from calc.core.units import MICRO, TERA
from calc.cost.dtypes import Dtypes
from calc.cost.efficiency import Efficiency
from calc.cost.opcost import Pass
from calc.cost.operators import pass_ops
from calc.cost.roofline import op_time
from calc.spec.hardware import HardwareSpec
from calc.spec.model import ModelSpec

HELD_OUT_EVERY = 3


@dataclass(frozen=True)
class Terms:
    """The calculator's pieces of each point's time at unit efficiency: [points, ops] and [points]."""

    compute_s: np.ndarray
    memory_s: np.ndarray
    attention: np.ndarray  # bool [points, ops]: attention operators
    kernels: np.ndarray

    def take(self, mask) -> Terms:
        return Terms(self.compute_s[mask], self.memory_s[mask], self.attention[mask], self.kernels[mask])


@dataclass(frozen=True)
class Fit:
    compute: float
    memory: float
    kernel_overhead_s: float
    step_overhead_s: float
    attention: float = 1.0
    kernel_overhead_fitted: bool = True

    def efficiency(self) -> Efficiency:
        return Efficiency(self.compute, self.memory, self.kernel_overhead_s, self.step_overhead_s, self.attention)


def point_ops(model: ModelSpec, dtype: str, phase: str, batch: int, size: int):
    """The calculator's operators for a grid point: prefill of ``size`` tokens, or a decode step at context ``size``."""
    dt = Dtypes(dtype, dtype, dtype)
    B = np.float64(batch)
    ps = Pass(B, np.float64(size), np.float64(0), "prefill") if phase == "prefill" else \
        Pass(B, np.float64(1), np.float64(size), "decode")
    return pass_ops(model, ps, dt), dt


def terms(model: ModelSpec, hw: HardwareSpec, points) -> Terms:
    """``points``: objects with dtype, phase, batch, size. Evaluated with calc's own op_time at unit efficiency."""
    rows_c, rows_m, rows_a, kern = [], [], [], []
    unit = Efficiency()
    for p in points:
        ops, dt = point_ops(model, p.dtype, p.phase, p.batch, p.size)
        ts = [op_time(op, hw, dt, unit) for op in ops if op.kind != "comm"]
        rows_c.append([float(t.compute_s) * t.op.layers for t in ts])
        rows_m.append([float(t.memory_s) * t.op.layers for t in ts])
        rows_a.append([t.op.kind == "attention" for t in ts])
        kern.append(sum(t.op.kernels * t.op.layers for t in ts))
    width = max((len(r) for r in rows_c), default=0)
    pad = lambda rows, fill: np.array([r + [fill] * (width - len(r)) for r in rows])  # noqa: E731
    return Terms(pad(rows_c, 0.0), pad(rows_m, 0.0), pad(rows_a, False).astype(bool), np.array(kern, float))


def _roofs(t: Terms, ec, em, ea) -> np.ndarray:
    """sum_ops max(c/e_c, m/e_m) (attention ops: both scaled by e_a) for parameter vectors -> [g, points]."""
    ec, em, ea = (np.atleast_1d(np.asarray(x, float))[:, None, None] for x in (ec, em, ea))
    share = np.where(t.attention[None], ea, 1.0)
    return np.maximum(t.compute_s[None] / (ec * share), t.memory_s[None] / (em * share)).sum(axis=2)


def predict(t: Terms, fit: Fit) -> np.ndarray:
    return _roofs(t, fit.compute, fit.memory, fit.attention)[0] + t.kernels * fit.kernel_overhead_s \
        + fit.step_overhead_s


def _overheads(A: np.ndarray, y: np.ndarray, K: np.ndarray, ko_prior: float | None):
    """Best non-negative (k_o, s_o) for roofline sums A[g, p]: minimise sum ((A + K k_o + s_o)/y - 1)^2.
    Returns (loss[g], ko[g], so[g])."""
    b = 1.0 - A / y  # what the overheads must supply, relative
    u, v = K / y, 1.0 / y
    if ko_prior is not None:  # k_o fixed, s_o alone
        b = b - u * ko_prior
        so = np.maximum((b @ v) / (v @ v), 0.0)
        ko = np.full(len(A), ko_prior)
        loss = ((b - so[:, None] * v) ** 2).sum(axis=1)
        return loss, ko, so
    uu, uv, vv = u @ u, u @ v, v @ v
    bu, bv = b @ u, b @ v
    det = uu * vv - uv * uv
    ko = (bu * vv - bv * uv) / det
    so = (bv * uu - bu * uv) / det
    cands = [(ko, so), (np.maximum(bu / uu, 0), 0 * so), (0 * ko, np.maximum(bv / vv, 0)), (0 * ko, 0 * so)]
    best_loss = np.full(len(A), np.inf)
    best_ko, best_so = np.zeros(len(A)), np.zeros(len(A))
    for k, s in cands:
        ok = (k >= 0) & (s >= 0)
        loss = ((b - k[:, None] * u - s[:, None] * v) ** 2).sum(axis=1)
        better = ok & (loss < best_loss)
        best_loss = np.where(better, loss, best_loss)
        best_ko, best_so = np.where(better, k, best_ko), np.where(better, s, best_so)
    return best_loss, best_ko, best_so


def fit_terms(t: Terms, y: np.ndarray, ko_prior: float = 0.0) -> Fit:
    """Least squares on relative error over the points of ``t`` (measured seconds ``y``)."""
    y = np.asarray(y, float)
    collinear = np.ptp(t.kernels) <= 1e-9 * max(t.kernels.max(initial=0.0), 1.0)
    prior = ko_prior if collinear else None
    has_attention = bool(t.attention.any())
    # log-space box: e_c, e_m relative to the base peaks (may exceed 1), e_a in (0, 1]
    lo = np.log(np.array([1e-4, 1e-4, 1e-2 if has_attention else 1.0]))
    hi = np.log(np.array([1e2, 1e2, 1.0]))
    n = 25
    best = None
    for _ in range(5):
        axes = [np.linspace(a, b, n) if b > a else np.array([a]) for a, b in zip(lo, hi, strict=True)]
        g = [np.exp(x.ravel()) for x in np.meshgrid(*axes, indexing="ij")]
        loss, ko, so = _overheads(_roofs(t, *g), y, t.kernels, prior)
        i = int(np.argmin(loss))
        best = Fit(float(g[0][i]), float(g[1][i]), float(ko[i]), float(so[i]), float(g[2][i]), prior is None)
        centre = np.log([best.compute, best.memory, best.attention])
        half = 3 * (hi - lo) / (n - 1)
        lo, hi = centre - half, np.minimum(centre + half, [np.inf, np.inf, 0.0])
        lo = np.minimum(lo, hi)
    return best


def split(points) -> list[str]:
    """'fit' or 'held-out' per point: within each (dtype, phase), sorted by (batch, size), every third."""
    out = ["fit"] * len(points)
    groups: dict[tuple, list[int]] = {}
    for i, p in enumerate(points):
        groups.setdefault((p.dtype, p.phase), []).append(i)
    for idx in groups.values():
        idx.sort(key=lambda i: (points[i].batch, points[i].size))
        for j, i in enumerate(idx):
            if j % HELD_OUT_EVERY == 1:
                out[i] = "held-out"
    return out


def error_stats(pred, meas) -> dict:
    """Median and p90 of |pred/meas - 1|, and the count."""
    e = np.abs(np.asarray(pred, float) / np.asarray(meas, float) - 1.0)
    e = e[np.isfinite(e)]
    if not len(e):
        return {"n": 0, "median": None, "p90": None}
    return {"n": int(len(e)), "median": float(np.median(e)), "p90": float(np.percentile(e, 90))}


# --------------------------------------------------------------------------- profiles


def calibrated_profile(base: HardwareSpec, fits: dict[str, Fit], provenance: dict,
                       primary: str | None = None) -> HardwareSpec:
    """``base`` with efficiencies from ``fits`` (one per compute dtype).

    Fitted efficiencies are relative to the base's peaks. Where one exceeds 1 (a
    kernel beat the data sheet, or the base lacks that dtype and fell back to a
    slower one), the peak is raised to the achieved rate and the efficiency set to 1;
    the same for bandwidth. The primary dtype's fit becomes the profile's efficiency;
    the others go to ``efficiency.by_dtype``.
    """
    dtypes = list(fits)
    primary = primary or dtypes[0]
    peaks = dict(base.peak_tflops)
    bw = base.memory_bandwidth_tb_s
    mem_scale = max(1.0, *(f.memory for f in fits.values()))
    notes = []
    if mem_scale > 1.0:
        notes.append(f"memory bandwidth raised from {bw:g} to {bw * mem_scale:.4g} TB/s (measured above it)")
    eff = {}
    for d, f in fits.items():
        compute = f.compute
        if compute > 1.0 or d not in peaks:
            old = base.peak_flops_per_s(d) / TERA
            new = old * compute
            peaks[d] = float(f"{new:.6g}")
            notes.append(f"{d} peak set to the achieved {new:.4g} TFLOP/s (was {old:g}"
                         f"{'' if d in base.peak_tflops else ', a fallback'}); its compute efficiency is 1")
            compute = old * compute / peaks[d]
        eff[d] = {"compute": round(min(compute, 1.0), 6), "memory": round(f.memory / mem_scale, 6),
                  "attention": round(min(f.attention, 1.0), 6),
                  "kernel_overhead_us": round(f.kernel_overhead_s / MICRO, 4),
                  "step_overhead_us": round(f.step_overhead_s / MICRO, 4)}
    top = dict(eff[primary])
    others = {d: e for d, e in eff.items() if d != primary}
    efficiency = {**top, "source": f"roofline calibrate, {provenance.get('date', _dt.date.today().isoformat())}: "
                  f"least squares on relative error ({', '.join(dtypes)})"}
    if others:
        efficiency["by_dtype"] = others
    data = base.model_dump(mode="json", exclude_none=True)
    data.update(
        name=f"{base.name}-calibrated",
        description=f"{base.description or base.name}, calibrated on {provenance.get('device_name', 'this device')}",
        memory_bandwidth_tb_s=float(f"{bw * mem_scale:.6g}"),
        peak_tflops=peaks,
        efficiency=efficiency,
        calibration={**provenance, "base_profile": base.name, "notes": notes},
    )
    return HardwareSpec(**data)


def profile_yaml(hw: HardwareSpec, header: str = "") -> str:
    data = hw.model_dump(mode="json", exclude_none=True)
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=110)
    lines = [f"# {line}" for line in header.splitlines()] if header else []
    return "\n".join([*lines, body])


def write_profile(hw: HardwareSpec, path: str | Path, header: str = "") -> Path:
    return atomic_write(path, profile_yaml(hw, header))


def fmt_pct(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"

