"""Roofline time of each operator and of a whole pass.

time(op) = max(FLOPs / (peak * compute_eff), bytes / (bandwidth * memory_eff))
           + kernels * kernel_overhead
           (matmuls: compute_eff x M / (M + m_half); each kernel's stream efficiency
            x bytes / (bytes + half): small GEMMs and small transfers fall short of peak)
           collectives: calc.cost.parallel.collective_time (by algorithm where fitted)
time(op)   = max(table time, FLOPs / peak, bytes / bandwidth)   where the profile's kernel
           tables time every kernel of the op (calc.cost.kernels; "measured"), before curves
time(pass) = sum over operators + step_overhead

Attention operators use both efficiencies times the profile's attention share; a
profile may override its efficiencies per compute dtype (efficiency.by_dtype). A profile
with kernel curves fitted to measured kernels (efficiency.kernels) times GEMMs, attention
and streaming kernels by those instead (calc.cost.curves), plus kernels * the preset's
launch cost. ``kernels`` is the engine's kernel set's count for the operator. Weight-only GEMMs
(int8/int4/fp4 weights, 16-bit activations) under a preset with a measured weight-only kernel
(EngineSpec.weight_only) take its compute and memory fractions times the 16-bit ones, its
fixed time per kernel and its dequantising kernel's traffic (run before the GEMM), on curves and on the efficiency model
alike; routed experts under an older fused-MoE kernel family (EngineSpec.moe_kernels, named by the
run's Serving.moe_kernel) take its compute and memory fractions, M half and fixed time the same
way; under a preset with matrix-vector kernels (EngineSpec.gemv_max_rows), matmuls of that
few rows stream their weights as stored, with no small-M tile penalty and no weight-only kernel.

An operator's bound is whichever of its two terms won; a pass's is where its time goes (the
largest of its seconds in compute-bound operators, memory-bound ones and collectives:
bound_of), or "measured" when tables gave most of the pass's time. Intensity is FLOPs / bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from calc.core.units import INTEGER_WEIGHTS, MICRO
from calc.cost.curves import curve_terms
from calc.cost.dtypes import Dtypes
from calc.cost.efficiency import Efficiency
from calc.cost.kernels import measured_time
from calc.cost.opcost import STREAMS, OpCost, accumulate, total
from calc.cost.parallel import NO_LINK, Link, collective_time
from calc.spec.hardware import HardwareSpec

BOUNDS = np.array(["compute", "memory", "communication"])  # what bounds a pass, by bound_code


def peak_for(hw: HardwareSpec, dt: Dtypes, peak: str, fp16_accumulate: bool = False) -> float:
    """FLOP/s roof for an operator class: matmul at the compute dtype (fp16 GEMMs that
    accumulate in fp16 at the profile's fp16_accumulate_tflops, where it states one), attention
    at its own (16-bit) dtype, elementwise ("vector") at fp32 without tensor cores."""
    if peak == "matmul":
        if fp16_accumulate and dt.compute == "fp16":
            return hw.fp16_accumulate_rate_per_s
        return hw.peak_flops_per_s(dt.compute)
    if peak == "attention":
        return hw.peak_flops_per_s(dt.attention_compute)
    return hw.peak_flops_per_s("fp32")


@dataclass(frozen=True)
class OpTime:
    """An operator with its roofline terms, per occurrence (multiply by op.layers for totals)."""

    op: OpCost
    compute_s: np.ndarray
    memory_s: np.ndarray
    overhead_s: np.ndarray
    comm_s: np.ndarray = np.float64(0.0)
    measured_s: np.ndarray | None = None  # from a kernel table (clamped to the roofs); None: modelled

    @cached_property
    def time_s(self) -> np.ndarray:
        if self.measured_s is not None:
            return self.measured_s + self.comm_s
        return np.maximum(self.compute_s, self.memory_s) + self.overhead_s + self.comm_s

    @property
    def total_time_s(self) -> np.ndarray:
        return self.time_s * self.op.layers

    @property
    def compute_bound(self) -> np.ndarray:
        return self.compute_s >= self.memory_s

    @property
    def intensity(self) -> np.ndarray:
        """FLOPs / bytes moved; 0 for an operator with no FLOPs (a collective, a lookup), inf only
        for FLOPs that move no bytes."""
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = self.op.flops / np.where(self.op.bytes > 0, self.op.bytes, 1)
            return np.where(self.op.bytes > 0, ratio, np.where(self.op.flops > 0, np.inf, 0.0))


def op_time(op: OpCost, hw: HardwareSpec, dt: Dtypes, eff: Efficiency, link: Link = NO_LINK) -> OpTime:
    """Roofline terms of one operator; ``link`` is the split's scale-up link (calc.cost.parallel).
    A matmul with dtypes of its own (OpCost.dtypes: lm_head, linears the checkpoint leaves
    unquantised) is timed at them, not at the pass's ``dt``."""
    if op.dtypes is not None:
        dt = op.dtypes
    if eff.tables is not None:
        t = measured_time(op, dt, eff.tables)
        if t is not None:
            return _measured(op, hw, dt, t, link)
    if op.kind == "comm":
        if not eff.fitted_collectives and link.collectives is not None:
            link = replace(link, collectives=None)
        z = np.float64(0.0)
        return OpTime(op, z, z, z, collective_time(op.collective, op.message_bytes, op.group, op.comm_bytes,
                                                   op.comm_hops, link, eff.custom_allreduce))
    eff = eff.for_dtype(dt.compute)
    kernels = eff.kernels_of(op)
    if eff.curves is not None:
        terms = curve_terms(op, hw, dt, eff, kernels, peak_for(hw, dt, op.peak, eff.fp16_accumulate))
        if terms is not None:
            compute, memory, fixed = terms
            return OpTime(op, compute, memory, fixed + kernels * eff.kernel_overhead_s)
    share = eff.attention if op.kind == "attention" else 1.0
    roof = peak_for(hw, dt, op.peak, eff.fp16_accumulate) * eff.compute
    rc, rm, extra_s, extra_bytes, tile = _gemm_terms(op, dt, eff, hw, roof)
    compute = op.flops / (roof * share * rc) * tile
    # a kernel moving b bytes reaches memory x b / (b + half): its time gains half / bandwidth
    moved = op.bytes + kernels * eff.memory_half_bytes
    bw = hw.memory_bandwidth_bytes_per_s * eff.memory * share * rm
    # a dequantising kernel runs before its GEMM: its traffic adds to the GEMM's time
    overhead = np.float64(kernels * (eff.kernel_overhead_s + extra_s)) + extra_bytes / bw
    return OpTime(op, compute, moved / bw, overhead)


def _gemm_terms(op: OpCost, dt: Dtypes, eff: Efficiency, hw: HardwareSpec, roof: float):
    """(compute fraction, memory fraction, fixed s per kernel, extra bytes, compute-time factor) a
    matmul's kernel adds on the efficiency model, the compute fraction of ``roof`` (the 16-bit
    GEMM's FLOP/s at the profile's efficiency): a GEMM of M rows reaches compute x M / (M +
    m_half) (small-M tiles run mostly empty), and a weight-only GEMM its kernel's fractions, fixed
    time and dequantisation traffic (an INT32-bound one its FLOPs per INT32 op x the profile's
    int32_tops, restated as a fraction of ``roof``); a matrix-vector kernel (M <= the preset's
    gemv_max_rows) neither: it streams the weights as stored, and on int8/int4 weights computes at
    the preset's gemv_int32_flops per INT32 op where it states one (llama.cpp's MMVQ unpacks and
    dots the quantised blocks on the CUDA cores). Other operators: (1, 1, 0, 0, 1)."""
    if op.kind != "linear":
        return 1.0, 1.0, 0.0, 0.0, 1.0
    wo = eff.weight_only_for(dt)
    rc, rm, extra_s, extra_bytes = 1.0, 1.0, 0.0, 0.0
    if wo is not None:
        rc, rm, extra_s = wo.compute, wo.memory, wo.fixed_us * MICRO
        if wo.peak == "int32":
            rc = wo.compute * hw.int32_rate_per_s / roof
        extra_bytes = wo.dequant_bytes * op.weight_bytes / dt.weight_bytes_per_param()
    m_half = eff.gemm_m_half
    mk = eff.moe_kernel_for(op, dt)
    if mk is not None:  # an older fused-MoE kernel family for the routed experts, with its own M ramp
        rc, rm, extra_s, m_half = rc * mk.compute, rm * mk.memory, extra_s + mk.fixed_us * MICRO, mk.m_half
    tile = 1.0 + m_half / np.maximum(op.rows, 1e-9) if m_half else 1.0
    if not eff.gemv_max_rows:
        return rc, rm, extra_s, extra_bytes, tile
    gemm = np.asarray(op.rows) > eff.gemv_max_rows
    gemv_rc = eff.gemv_int32_flops * hw.int32_rate_per_s / roof if (
        eff.gemv_int32_flops and dt.weight in INTEGER_WEIGHTS) else 1.0
    return (np.where(gemm, rc, gemv_rc), np.where(gemm, rm, 1.0), np.where(gemm, extra_s, 0.0),
            np.where(gemm, extra_bytes, 0.0), np.where(gemm, tile, 1.0))


def _measured(op: OpCost, hw: HardwareSpec, dt: Dtypes, t: np.ndarray, link: Link) -> OpTime:
    """A table's time, never faster than the roofs at unit efficiency (the profile's peaks)."""
    z = np.float64(0.0)
    if op.kind == "comm":
        return OpTime(op, z, z, z, np.maximum(t, op.comm_bytes / link.bandwidth_bytes_per_s), measured_s=z)
    compute = op.flops / peak_for(hw, dt, op.peak)
    memory = op.bytes / hw.memory_bandwidth_bytes_per_s
    return OpTime(op, compute, memory, z, measured_s=np.maximum(t, np.maximum(compute, memory)))


@dataclass(frozen=True)
class PhaseCost:
    """A whole pass: totals over operators, its time and what bounds it.

    ``shape``: the scenarios' shape when the operators' arrays are smaller and broadcast to it
    (a grid's axes, not expanded): each total is computed once at the operators' own shape
    and returned as a read-only view of ``shape``. () keeps the totals' own shape.
    """

    ops: tuple[OpTime, ...]
    step_overhead_s: float
    shape: tuple[int, ...] = ()

    def _full(self, value) -> np.ndarray:
        if not self.shape or np.shape(value) == self.shape:
            return value
        return np.broadcast_to(value, np.broadcast_shapes(np.shape(value), self.shape))

    def _sum(self, field: str) -> np.ndarray:
        return self._full(total([t.op for t in self.ops], field))

    @cached_property
    def flops(self) -> np.ndarray:
        return self._full(accumulate(t.op.flops * t.op.layers for t in self.ops))

    @cached_property
    def linear_flops(self) -> np.ndarray:
        return self._sum("linear_flops")

    @cached_property
    def attention_flops(self) -> np.ndarray:
        return self._sum("attention_flops")

    @cached_property
    def other_flops(self) -> np.ndarray:
        return self._sum("other_flops")

    @cached_property
    def bytes(self) -> np.ndarray:
        return self._full(accumulate(t.op.bytes * t.op.layers for t in self.ops))

    def stream_bytes(self) -> dict[str, np.ndarray]:
        return {s: self._sum(s) for s in STREAMS}

    @cached_property
    def compute_s(self) -> np.ndarray:
        return self._full(accumulate(t.compute_s * t.op.layers for t in self.ops))

    @cached_property
    def memory_s(self) -> np.ndarray:
        return self._full(accumulate(t.memory_s * t.op.layers for t in self.ops))

    @cached_property
    def time_s(self) -> np.ndarray:
        return self._full(accumulate(t.total_time_s for t in self.ops) + self.step_overhead_s)

    @cached_property
    def comm_s(self) -> np.ndarray:
        """Time spent in collectives (included in time_s)."""
        return self._full(accumulate(t.comm_s * t.op.layers for t in self.ops))

    @property
    def comm_bytes(self) -> np.ndarray:
        """Bytes this GPU sends over the link during the pass."""
        return self._sum("comm_bytes")

    @property
    def intensity(self) -> np.ndarray:
        return self.flops / self.bytes

    @cached_property
    def time_shares(self) -> np.ndarray:
        """Seconds [3, ...] in BOUNDS order: in compute-bound operators, in memory-bound ones (each
        its larger roof term, or its table's time), and in collectives."""
        def roof(t):
            return (t.measured_s if t.measured_s is not None else np.maximum(t.compute_s, t.memory_s)) * t.op.layers
        comp = [t for t in self.ops if t.op.kind != "comm"]
        c = accumulate(np.where(t.compute_bound, roof(t), 0.0) for t in comp)
        m = accumulate(np.where(t.compute_bound, 0.0, roof(t)) for t in comp)
        shape = np.broadcast_shapes(np.shape(c), np.shape(m), np.shape(self.comm_s))
        return np.stack([np.broadcast_to(v, shape) for v in (c, m, self.comm_s)])

    @property
    def compute_bound(self) -> np.ndarray:
        """The phase is compute-bound when most of its operators' time is in compute-bound ones."""
        return self.bound_code == 0

    @cached_property
    def measured_s(self) -> np.ndarray:
        """Time the profile's kernel tables gave (included in time_s)."""
        return accumulate(t.time_s * t.op.layers for t in self.ops if t.measured_s is not None)

    @property
    def bound_code(self) -> np.ndarray:
        """Index into BOUNDS: where the pass's time goes (bound_code_of its time_shares)."""
        return self._full(bound_code_of(self.time_shares))

    @property
    def bound(self):
        """compute, memory, or communication when collectives outweigh both; "measured" when
        kernel tables gave more than half of the pass's time."""
        return np.where(self.measured_s > 0.5 * self.time_s, "measured", BOUNDS[self.bound_code])


def bound_code_of(shares) -> np.ndarray:
    """The bound rule, once: a pass, a step or a run of steps is labelled by where its time goes,
    the largest of its seconds in compute-bound operators, in memory-bound ones and in collectives
    (``shares`` [3, ...] in BOUNDS order; a tie goes to the first), not by its aggregate FLOP/B:
    Llama-3.1-8B's 512-token prefill on an L4 has FLOP/B 342 under the ridge 403, yet most of its
    time is in compute-bound GEMMs. Returns the index into BOUNDS."""
    return np.argmax(np.asarray(shares), axis=0).astype(np.int8)


def bound_name(c: float, m: float, k: float) -> str:
    """bound_of one step's shares in scalars (compute ``c``, memory ``m``, communication ``k``
    seconds), for callers that label steps one at a time: the first largest, as argmax."""
    return _BOUND_NAMES[0 if c >= m and c >= k else 1 if m >= k else 2]


def bound_of(shares):
    """BOUNDS[bound_code_of(shares)]: "compute", "memory" or "communication"."""
    shares = np.asarray(shares)
    if shares.ndim == 1:
        return _BOUND_NAMES[int(shares.argmax())]
    return BOUNDS[bound_code_of(shares)]


_BOUND_NAMES = BOUNDS.tolist()


def phase_cost(ops: list[OpCost], hw: HardwareSpec, dt: Dtypes, eff: Efficiency,
               link: Link = NO_LINK, shape: tuple[int, ...] = ()) -> PhaseCost:
    step_s = eff.for_dtype(dt.compute).step_overhead_s
    return PhaseCost(tuple(op_time(op, hw, dt, eff, link) for op in ops), step_s, tuple(shape))
