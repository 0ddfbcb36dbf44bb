"""Efficiencies: the fractions of peak and the fixed overheads a time is computed with.

A hardware profile brings the chip's large-GEMM and streaming fractions (measured, cited) and
may override them per compute dtype; the profile's engine preset (``HardwareSpec.preset``,
resolved in the spec layer) brings the kernel-level terms on top. This module is the one
place both are combined, and the one place a preset's pass options (attention kernel,
logits positions) are read.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from calc.core.errors import SpecError
from calc.core.units import MB, MICRO
from calc.spec.engine import EngineSpec, MoeKernel, WeightOnlyKernel
from calc.spec.hardware import HardwareSpec
from calc.spec.kernel_tables import KernelSet
from calc.spec.kernels import KernelCurves
from calc.spec.model import ModelSpec
from calc.spec.scheduler import kernel_of

ROUTED_EXPERTS = "moe.experts"  # calc.cost.operators.moe_ops' grouped expert GEMMs


@dataclass(frozen=True)
class DtypeOverride:
    """What a profile sets apart for passes at one compute dtype (efficiency.by_dtype); None:
    as for every other dtype. Applied when a pass asks (``Efficiency.for_dtype``), on top of
    whatever the efficiencies have become by then (a preset, a run's scheduler, a draft's step)."""

    compute: float | None = None
    memory: float | None = None
    attention: float | None = None
    kernel_overhead_s: float | None = None
    step_overhead_s: float | None = None
    gemm_m_half: float | None = None


@dataclass(frozen=True)
class Efficiency:
    """Fractions of peak and fixed overheads used for times (the profile's, or ideal).

    ``attention`` scales both roofs for attention operators (1: as for GEMMs);
    ``by_dtype`` holds (compute dtype, DtypeOverride) pairs: what differs for passes at that
    compute dtype (see ``for_dtype``); empty unless a profile has them.
    """

    compute: float = 1.0
    memory: float = 1.0
    kernel_overhead_s: float = 0.0
    step_overhead_s: float = 0.0
    attention: float = 1.0
    by_dtype: tuple[tuple[str, DtypeOverride], ...] = ()
    gemm_m_half: float = 0.0  # tokens: matmul efficiency x M / (M + m_half)
    gemv_max_rows: int = 0  # matmuls of at most this many rows run as matrix-vector kernels (EngineSpec)
    gemv_int32_flops: float = 0.0  # their GEMV FLOPs per INT32 op on int8/int4 weights (EngineSpec); 0: none
    fp16_accumulate: bool = False  # fp16 GEMMs accumulate in fp16 (EngineSpec.fp16_accumulate)
    # per kernel, what a pass carrying prefill tokens pays eagerly (graphs of decode-only steps:
    # calc.spec.scheduler.Serving.prefill_launch_us); 0: its graphs hold such passes too
    prefill_launch_s: float = 0.0
    memory_half_bytes: float = 0.0  # bytes: stream efficiency x b / (b + half), per kernel
    engine: str | None = None  # the preset applied, if any
    request_overhead_s: float = 0.0  # per request, outside the model (serving stack); never in TTFT
    # Curves fitted to measured kernels (the profile's efficiency.kernels): where present they
    # time GEMMs, attention and streaming kernels instead of the fractions above, scaled by
    # the preset's compute/memory scales (engines with their own kernels).
    curves: KernelCurves | None = None
    compute_scale: float = 1.0
    memory_scale: float = 1.0
    # (operator name, kernels launched per occurrence) of the preset's kernel set; others keep
    # the operator's own count (calc.cost.operators).
    kernel_counts: tuple[tuple[str, float], ...] = ()
    # every kernel set the preset has, (name, counts), its own under None (Serving.kernel_set names one)
    kernel_sets: tuple[tuple[str | None, tuple[tuple[str, float], ...]], ...] = ()
    custom_allreduce: bool = True  # the engine has a custom (one-/two-shot) all-reduce
    fitted_collectives: bool = False  # time collectives by the profile's fitted algorithms (not ideal)

    def kernels_of(self, op) -> float:
        """Kernels the engine launches for one occurrence of ``op`` (its kernel set, else the op's);
        none for an operator absent from the pass (``op.present`` 0: a ragged step's empty half)."""
        name = op.name.removesuffix(".chunks").removesuffix(".local")
        for key, n in self.kernel_counts:
            if key == name:
                return n * op.present
        return op.kernels * op.present

    def kernels_launched(self, ops) -> float:
        """Kernels a pass of these operators launches: each one's kernels_of, times its layers."""
        return float(sum(self.kernels_of(op) * op.layers for op in ops))

    tables: KernelSet | None = None  # measured kernel tables: they time the operators they cover
    # the run's weight-only GEMMs, (weight dtype, kernel) pairs: what dequantising costs; and every
    # family the preset has, (name, pairs), its own under None (Serving.weight_only_kernel names one)
    weight_only: tuple[tuple[str, WeightOnlyKernel], ...] = ()
    weight_only_kernels: tuple[tuple[str | None, tuple[tuple[str, WeightOnlyKernel], ...]], ...] = ()

    # the preset's fused-MoE kernel families, (name, kernel) pairs, and the one the run's scheduler
    # names (Serving.moe_kernel: an older build's routed-expert kernel; None: the chip's grouped GEMM)
    moe_kernels: tuple[tuple[str, MoeKernel], ...] = ()
    moe_kernel: MoeKernel | None = None

    def moe_kernel_for(self, op, dt) -> MoeKernel | None:
        """The routed experts' kernel family for an operator of a pass (None: not the routed
        experts, no family named, or one for another compute dtype)."""
        k = self.moe_kernel
        if k is None or op.name != ROUTED_EXPERTS or k.compute_dtype != dt.compute:
            return None
        return k

    def weight_only_for(self, dt) -> WeightOnlyKernel | None:
        """The engine's weight-only kernel for a pass's dtypes (None: not weight-only, or no
        measured kernel for that weight dtype: dequantising is then free)."""
        if not dt.weight_only:
            return None
        return next((k for w, k in self.weight_only if w == dt.weight), None)

    @classmethod
    def of(cls, hw: HardwareSpec, ideal: bool = False) -> Efficiency:
        """The profile's efficiencies with its engine preset (``hw.preset``) applied on top;
        ideal (or the "ideal" preset): none at all. The one place a preset is applied. The
        profile's measured kernel tables come along (not when ideal: --ideal is the pure roofline)."""
        if ideal:
            return cls()
        e = hw.efficiency
        top = cls(e.compute, e.memory, hw.kernel_overhead_s, hw.step_overhead_s, e.attention,
                  gemm_m_half=e.gemm_m_half, memory_half_bytes=e.memory_half_mb * MB, curves=e.kernels,
                  fitted_collectives=True, tables=hw.kernel_set or None)
        seconds = lambda us: None if us is None else us * MICRO  # noqa: E731
        top = replace(top, by_dtype=tuple(
            (dtype, DtypeOverride(d.compute, d.memory, d.attention, seconds(d.kernel_overhead_us),
                                  seconds(d.step_overhead_us), d.gemm_m_half))
            for dtype, d in e.by_dtype.items()))
        return top if hw.preset is None else top.under(hw.preset)

    def under(self, preset: EngineSpec) -> Efficiency:
        """A preset's kernel-level parameters on top of these efficiencies (ideal: none at all):
        its attention share, small-GEMM and small-transfer halves and overheads replace the
        profile's; its scales multiply the profile's large-GEMM and streaming fractions; its
        kernel set gives the kernels per operator. A profile's per-dtype fractions stay, scaled
        alike; its per-dtype attention share, halves and overheads give way to the preset's.
        Over measured kernel curves (whose fixed times already hold each kernel's own cost), the
        per-kernel overhead is the preset's ``launch_us`` (what launching adds beyond a measured
        kernel), when it states one."""
        if preset.ideal:
            return type(self)(engine=preset.name)
        curves = self.curves if preset.kernel_curves else None
        per_kernel = preset.kernel_overhead_us
        if curves is not None and preset.launch_us is not None:
            per_kernel = preset.launch_us
        return replace(
            self, engine=preset.name, attention=preset.attention, gemm_m_half=preset.gemm_m_half,
            memory_half_bytes=preset.memory_half_mb * MB, kernel_overhead_s=per_kernel * MICRO,
            step_overhead_s=preset.step_overhead_us * MICRO, request_overhead_s=preset.request_overhead_s,
            compute=self.compute * preset.compute_scale, memory=self.memory * preset.memory_scale,
            # a dtype keeps its own fractions (scaled as the profile's are); the rest is the preset's
            by_dtype=tuple((d, DtypeOverride(o.compute, o.memory)) for d, o in self.by_dtype),
            compute_scale=preset.compute_scale, memory_scale=preset.memory_scale, curves=curves,
            kernel_sets=tuple((n, tuple(k.items())) for n, k in [(None, preset.kernels), *preset.kernel_sets.items()]),
            custom_allreduce=preset.custom_allreduce,
            weight_only_kernels=tuple((n, tuple(t.items())) for n, t in
                                      [(None, preset.weight_only), *preset.weight_only_kernels.items()]),
            gemv_max_rows=preset.gemv_max_rows, gemv_int32_flops=preset.gemv_int32_flops,
            fp16_accumulate=preset.fp16_accumulate,
            moe_kernels=tuple(preset.moe_kernels.items()),
        ).with_serving(preset.scheduler)  # the families and graph policy its own scheduler names

    def with_serving(self, serving) -> Efficiency:
        """These efficiencies under a resolved scheduler (a workload's or a run's engine arguments,
        or the run's version, may change whether prefill passes replay graphs and which kernel
        families run): its prefill launch cost, MoE and weight-only kernels (ideal: none)."""
        if self.engine is None or self.engine == "ideal":
            return self
        families, sets = dict(self.weight_only_kernels), dict(self.kernel_sets)
        own, own_set = families.pop(None, self.weight_only), sets.pop(None, self.kernel_counts)
        name, set_name = serving.weight_only_kernel, serving.kernel_set
        return replace(self, prefill_launch_s=serving.prefill_launch_us * MICRO,
                       moe_kernel=kernel_of(dict(self.moe_kernels), serving.moe_kernel),
                       weight_only=own if name is None else kernel_of(families, name, "weight_only_kernel"),
                       kernel_counts=own_set if set_name is None else kernel_of(sets, set_name, "kernel_set"))

    def with_step_overhead(self, seconds: float) -> Efficiency:
        """These efficiencies with another per-pass overhead (every dtype's): a draft pass run
        inside the target's engine step pays its own cost, not the engine's step."""
        return replace(self, step_overhead_s=seconds,
                       by_dtype=tuple((d, replace(o, step_overhead_s=None)) for d, o in self.by_dtype))

    def for_dtype(self, compute_dtype: str) -> Efficiency:
        """The efficiencies of a pass at ``compute_dtype``: these, with that dtype's overrides
        (its compute and memory fractions scaled by the preset's scales, as the profile's are)."""
        for dtype, o in self.by_dtype:
            if dtype == compute_dtype:
                scale = {"compute": self.compute_scale, "memory": self.memory_scale}
                return replace(self, by_dtype=(), **{f.name: getattr(o, f.name) * scale.get(f.name, 1.0)
                                                     for f in fields(o) if getattr(o, f.name) is not None})
        return self


def pass_options(model: ModelSpec, hw: HardwareSpec, ideal: bool, attention: str | None = None) -> tuple[str, int]:
    """(attention kernel, logits positions per prefill sequence) of the preset in effect: an
    explicit ``attention`` wins; else the preset's kernel (fused by default) and, for presets
    that compute logits for every prompt position, all of them."""
    preset = None if ideal else hw.preset
    attention = attention or (preset.attention_kernel if preset else "fused")
    if attention not in ("fused", "unfused"):
        raise SpecError("--attention", None, f"must be fused or unfused, got {attention!r}")
    logits = model.max_context if preset is not None and preset.logits_all_positions else 1
    return attention, logits
