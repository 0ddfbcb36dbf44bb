"""Operator times from kernel curves fitted to measured kernels (calc.spec.kernels).

Used by calc.cost.roofline.op_time when the profile has ``efficiency.kernels``; the fractions
are of the data-sheet peak and bandwidth (each <= 1), so no time beats the pure roofline.

  matmul     compute = FLOPs / (peak * c * f(M) f(N) f(K)),  f(X) = X / (X + X_half)
             memory  = bytes / (bandwidth * m);  fixed = kernels * fixed_us
             (routed experts, one grouped GEMM over many experts: the M ramp alone, M the
             tokens per expert; its N and K tiles span the experts). The curve is the GEMM
             class's: the compute dtype's (bf16, fp8, fp4 = block-scaled NVFP4/MXFP4 W4A4).
             Weight-only GEMMs (int8/int4/fp4 weights, 16-bit activations): the compute
             dtype's curve with the preset's weight-only kernel's compute and memory fractions
             multiplying c and m, its M half for M_half, its fixed time added per kernel
             (calc.spec.engine.WeightOnlyKernel). Routed experts under an older fused-MoE kernel
             family (calc.spec.engine.MoeKernel, the run's Serving.moe_kernel): its compute and
             memory fractions multiplying c and m, its M half for M_half, its fixed time added per kernel
  attention  prefill (T > 1 queries per sequence):
               compute = FLOPs / (peak16 * c * f(T)), memory = bytes / (bandwidth * m), fixed
             decode (one query per sequence):
               compute = FLOPs / (peak16 * c_prefill), memory = bytes / (bandwidth * m_decode),
               fixed = fixed_us + B * per_sequence_us
  other      memory = bytes / (bandwidth * m_stream); compute as the profile's; fixed = kernels * fixed_us

The preset's compute and memory scales multiply c and m (engines with their own kernels).
A compute dtype without a GEMM curve, or weight-only weights under a preset with no measured
weight-only kernel for them, returns None: the caller keeps the efficiency model.
"""

from __future__ import annotations

import numpy as np

from calc.core.units import MICRO
from calc.cost.dtypes import Dtypes
from calc.cost.efficiency import ROUTED_EXPERTS, Efficiency
from calc.cost.opcost import OpCost
from calc.spec.hardware import HardwareSpec


def saturation(x, half) -> np.ndarray:
    """x / (x + half): the share of a kernel's large-size rate a size x reaches (x <= 0: unknown, 1)."""
    if np.ndim(x) == 0:  # one scenario (the fit's and the simulator's hot path): the same arithmetic on floats
        x = float(x)
        return np.float64(x / max(x + half, 1e-30) if x > 0 else 1.0)
    x = np.asarray(x, dtype=float)
    return np.where(x > 0, x / np.maximum(x + half, 1e-30), 1.0)


def curve_terms(op: OpCost, hw: HardwareSpec, dt: Dtypes, eff: Efficiency, kernels: float, peak: float):
    """(compute_s, memory_s, fixed_s) of ``op`` from the profile's curves, or None when no curve
    covers it. ``peak`` is the FLOP/s roof of the op's class, ``kernels`` its launch count."""
    c = eff.curves
    bw = hw.memory_bandwidth_bytes_per_s
    if op.kind == "linear":
        # the GEMM class: the compute dtype's curve, weights at that dtype (or 16-bit), or a
        # weight-only kernel the preset measured on top of it
        wo = eff.weight_only_for(dt)
        if (dt.weight_only and wo is None) or (wo is not None and wo.peak == "int32"):
            return None  # no measured kernel, or one bound by integer work: the efficiency model
        g = c.gemm_for(dt.compute) if wo is not None or dt.weight in (dt.compute, "fp16", "bf16") else None
        if g is None:
            return None
        rc, rm, extra_us = (wo.compute, wo.memory, wo.fixed_us) if wo is not None else (1.0, 1.0, 0.0)
        m_half = g.m_half if wo is None else wo.m_half
        mk = eff.moe_kernel_for(op, dt)
        if mk is not None:  # an older fused-MoE kernel family: its fractions of the grouped GEMM's, its own M ramp
            rc, rm, extra_us, m_half = rc * mk.compute, rm * mk.memory, extra_us + mk.fixed_us, mk.m_half
        f = saturation(op.rows, m_half)
        if op.name != ROUTED_EXPERTS:  # a grouped GEMM's N and K tiles span its experts
            f = f * saturation(op.out_features, g.n_half) * saturation(op.in_features, g.k_half)
        compute = op.flops / (peak * g.compute * rc * eff.compute_scale * np.maximum(f, 1e-12))
        stream = bw * g.memory * rm * eff.memory_scale
        # a dequantising kernel (wo.dequant_bytes per weight) runs before the GEMM, adding its traffic
        extra = wo.dequant_bytes * op.weight_bytes / dt.weight_bytes_per_param() / stream if wo is not None else 0.0
        return compute, op.bytes / stream, np.float64(kernels * (g.fixed_us + extra_us) * MICRO) + extra
    if op.kind == "attention":
        pre, dec = c.prefill_attention, c.decode_attention
        T = np.asarray(op.rows, dtype=float)
        prefill = T > 1.0
        c_pre = pre.compute * eff.compute_scale
        compute = np.where(prefill, op.flops / (peak * c_pre * np.maximum(saturation(T, pre.tokens_half), 1e-12)),
                           op.flops / (peak * c_pre))
        memory = np.where(prefill, op.bytes / (bw * pre.memory * eff.memory_scale),
                          op.bytes / (bw * dec.memory * eff.memory_scale))
        fixed = np.where(prefill, pre.fixed_us * op.present,
                         dec.fixed_us * op.present + np.asarray(op.sequences) * dec.per_sequence_us)
        return compute, memory, fixed * MICRO
    s = c.stream
    compute = op.flops / (peak * eff.compute)
    memory = op.bytes / (bw * s.memory * eff.memory_scale)
    return compute, memory, np.float64(kernels * s.fixed_us * MICRO)
