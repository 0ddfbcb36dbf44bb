"""Serving-engine presets: what an engine changes in the numbers, as data.

Each preset in calc/data/engines.yaml states the kernel-level parameters the engine
brings (attention kernel and its efficiency, small-GEMM and small-transfer
behaviour, per-kernel launch cost with or without CUDA graphs, per-step framework
cost) and where each value comes from. A preset applies on top of a hardware
profile's large-GEMM and streaming efficiencies, which stay the chip's own.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from calc.core.errors import SpecError, suggest
from calc.core.units import GROUP_SCALED, MICRO, canonical_dtype
from calc.spec.base import SpecModel
from calc.spec.scheduler import EngineArg, MemoryRule, Serving, VersionRule
from calc.spec.yamlio import build, read_yaml

ENGINES_FILE = Path(str(resources.files("calc").joinpath("data", "engines.yaml")))


class WeightOnlyKernel(SpecModel):
    """An engine's weight-only GEMM (16-bit activations; int8/int4/fp4 weights dequantised inside
    the kernel), relative to the chip's own 16-bit GEMM: its compute and memory fractions times
    these, plus ``fixed_us`` per GEMM (the dequantisation's setup: scales, unpacking); on profiles
    with measured curves ``m_half`` replaces the 16-bit curve's M half (these kernels tile M
    finer). Fitted to measured kernels (reports/kernels/fit_public.py); ``kernel`` names the family.

    ``peak: int32``: a kernel bound by its integer work (unpacking the quantised weights), not by
    its tensor cores (llama.cpp's MMQ): its compute rate is ``compute`` GEMM FLOPs per INT32 op of
    the profile (HardwareSpec.int32_rate_per_s: its int32_tops, else half its FP32 peak), on the
    efficiency model (the 16-bit curves do not time it)."""

    kernel: str = Field(min_length=1)
    peak: Literal["matmul", "int32"] = "matmul"
    compute: float = Field(gt=0, le=64)
    m_half: float = Field(ge=0)
    memory: float = Field(gt=0, le=1)
    fixed_us: float = Field(ge=0)
    # Bytes moved per weight beyond reading the quantised weights, by kernel families that
    # dequantise into a 16-bit copy and run a 16-bit GEMM on it: 4 (write 2 B, read 2 B back).
    dequant_bytes: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _fraction(self):
        if self.peak == "matmul" and self.compute > 1:
            raise ValueError(f"compute {self.compute:g} > 1: a fraction of the 16-bit GEMM's rate (peak matmul)")
        return self


class MoeKernel(SpecModel):
    """A fused-MoE kernel family an engine ran for its routed experts (an older build's, chosen by
    ``Serving.moe_kernel``, e.g. through the preset's by_version rules), relative to the chip's own
    grouped GEMM at ``compute_dtype``: compute and memory fractions times these, its own M half
    (tokens per expert) in place of the curve's (on the efficiency model, the preset's gemm_m_half),
    plus ``fixed_us`` per kernel launched. Fitted to the kernel's published timings
    (reports/kernels/fit_moe_triton.py); other compute dtypes keep the chip's grouped GEMM."""

    kernel: str = Field(min_length=1)
    compute_dtype: str = Field(min_length=1)
    compute: float = Field(gt=0, le=1)
    memory: float = Field(gt=0, le=1)
    m_half: float = Field(ge=0)
    fixed_us: float = Field(ge=0)

    @field_validator("compute_dtype")
    @classmethod
    def _dtype(cls, v: str) -> str:
        return canonical_dtype(v)


class EngineSpec(SpecModel):
    """One engine's preset. Scales multiply the profile's efficiencies; the rest replace them."""

    name: str
    description: str
    sources: dict[str, str] = Field(default_factory=dict)
    ideal: bool = False
    cuda_graphs: bool = True
    attention_kernel: Literal["fused", "unfused"] = "fused"
    # Logits for every prompt position in prefill (Hugging Face without logits_to_keep),
    # not only the last one as serving engines compute them.
    logits_all_positions: bool = False
    attention: float = Field(default=1.0, gt=0, le=1)
    gemm_m_half: float = Field(default=0.0, ge=0)
    memory_half_mb: float = Field(default=0.0, ge=0)
    kernel_overhead_us: float = Field(default=0.0, ge=0)
    step_overhead_us: float = Field(default=0.0, ge=0)
    # Per request, outside the model: receiving, tokenising, scheduling and answering it.
    # DESIGN keeps such time out of TTFT; it is reported beside it, and added when the
    # accuracy harness compares with measurements that include it (client-side TTFT, e2e).
    request_overhead_us: float = Field(default=0.0, ge=0)
    compute_scale: float = Field(default=1.0, gt=0, le=1)
    memory_scale: float = Field(default=1.0, gt=0, le=1)
    # The engine's kernel set: kernels launched per occurrence of an operator, by operator name
    # as calc.cost.operators names them (0: fused into a neighbour, e.g. the residual add into
    # a fused add+RMSNorm); operators not listed keep their own count.
    kernels: dict[str, float] = Field(default_factory=dict)
    # Other kernel sets by name, each keyed as kernels, for runs whose scheduler names one
    # (Serving.kernel_set, set by a by_version rule): the engine's builds before its fusions.
    kernel_sets: dict[str, dict[str, float]] = Field(default_factory=dict)
    # Per kernel launched, beyond the kernel's measured time, on profiles with measured kernel
    # curves: CUDA-graph replay (the curves' fixed times already hold it) or eager launch and
    # dispatch. None: kernel_overhead_us applies there too.
    launch_us: float | None = Field(default=None, ge=0)
    custom_allreduce: bool = True  # one-/two-shot custom all-reduce within a node (else NCCL's ring)
    # Whether the profile's measured kernel curves (vendor GEMM libraries, FlashAttention) time
    # this engine's kernels; false for engines with their own matmul kernels (llama.cpp).
    kernel_curves: bool = True
    # Matmuls of at most this many rows (tokens) run as the engine's matrix-vector kernels
    # (llama.cpp's MMVQ): they stream the weights as stored, with no tensor-core tile to fill
    # (no small-M penalty) and no weight-only GEMM (weight_only applies above). 0: none.
    gemv_max_rows: int = Field(default=0, ge=0)
    # Those matrix-vector kernels on int8/int4 weights are bound by their integer work (unpacking
    # the quantised blocks and their dot products on the CUDA cores), not only by streaming the
    # weights: they run at this many GEMV FLOPs (2 per weight and row) per INT32 op of the profile
    # (HardwareSpec.int32_rate_per_s), or at the memory roof where that is slower. 0: memory only.
    gemv_int32_flops: float = Field(default=0.0, ge=0, le=64)
    # fp16 GEMMs accumulate in fp16 (cuBLAS CUBLAS_COMPUTE_16F): they run at the profile's
    # fp16_accumulate_tflops where it states one (GeForce cards: twice the FP32-accumulate rate).
    fp16_accumulate: bool = False
    # The dtype of the engine's 16-bit GEMMs whatever the checkpoint ships (llama.cpp's CUDA backend
    # converts to fp16 for cuBLAS): the default compute dtype of passes under this preset where no
    # --compute-dtype is given and the weights are not fp8. None: the model's serving dtype.
    gemm_dtype: Literal["fp16", "bf16"] | None = None
    # The engine's scheduler (calc.spec.scheduler): its values, rules by GPU memory, and the
    # engine's own argument names for them (``name: field`` or ``name: {field, values, scale}``).
    scheduler: Serving = Serving()
    by_memory: list[MemoryRule] = Field(default_factory=list)
    by_version: list[VersionRule] = Field(default_factory=list)
    engine_args: dict[str, EngineArg] = Field(default_factory=dict)
    # The engine whose launch command runs this preset's scheduler (calc.serving.planner.launch); None:
    # a preset of no serving engine (ideal, hf, llama.cpp).
    launch: Literal["vllm", "sglang", "trtllm", "lmdeploy", "tgi"] | None = None
    # Weight-only GEMMs by weight dtype (int8, int4, fp4); a dtype not listed dequantises for free
    # (the weights' bytes shrink and nothing else changes: no measured kernel for this engine).
    weight_only: dict[str, WeightOnlyKernel] = Field(default_factory=dict)
    # Other weight-only GEMM families by name, each keyed as weight_only, for runs whose scheduler
    # names one (Serving.weight_only_kernel, set by a by_version rule): the engine's older kernels.
    weight_only_kernels: dict[str, dict[str, WeightOnlyKernel]] = Field(default_factory=dict)
    # Fused-MoE kernel families by name, for the routed experts of runs whose scheduler names one
    # (Serving.moe_kernel, set by a by_version rule or a workload): the engine's older kernels.
    moe_kernels: dict[str, MoeKernel] = Field(default_factory=dict)

    @field_validator("engine_args", mode="before")
    @classmethod
    def _args(cls, v):
        return {k: {"field": a} if isinstance(a, str) else a for k, a in (v or {}).items()}

    @model_validator(mode="after")
    def _gemv(self):
        if self.gemv_int32_flops and not self.gemv_max_rows:
            raise ValueError("gemv_int32_flops prices matrix-vector kernels: set gemv_max_rows, the most tokens they take")
        return self

    @model_validator(mode="after")
    def _scheduler_fields(self):
        fields = set(Serving.model_fields)
        bad = [f"engine_args.{k}: {a.field}" for k, a in self.engine_args.items() if a.field not in fields]
        bad += [f"by_memory: {k}" for r in self.by_memory for k in r.set if k not in fields]
        bad += [f"by_version: {k}" for r in self.by_version for k in r.set if k not in fields]
        if bad:
            raise ValueError(f"not scheduler fields: {', '.join(bad)} (fields: {', '.join(sorted(fields))})")
        for r in [*self.by_memory, *self.by_version]:
            Serving.model_validate(r.set)
        for field, known in (("moe_kernel", self.moe_kernels), ("weight_only_kernel", self.weight_only_kernels),
                             ("kernel_set", self.kernel_sets)):
            named = [getattr(self.scheduler, field), *(r.set.get(field) for r in [*self.by_memory, *self.by_version])]
            unknown = sorted({k for k in named if k is not None and k not in known})
            if unknown:
                raise ValueError(f"{field} {', '.join(unknown)} is not one of {field}s "
                                 f"({', '.join(sorted(known)) or 'none'})")
        return self

    @field_validator("weight_only")
    @classmethod
    def _wo_dtypes(cls, v: dict[str, WeightOnlyKernel]) -> dict[str, WeightOnlyKernel]:
        out = {canonical_dtype(k): w for k, w in v.items()}
        bad = [k for k in out if k not in GROUP_SCALED]
        if bad:
            raise ValueError(f"weight_only is keyed by int8, int4 or fp4, got {', '.join(bad)}")
        return out

    @field_validator("weight_only_kernels")
    @classmethod
    def _wo_families(cls, v: dict[str, dict[str, WeightOnlyKernel]]) -> dict[str, dict[str, WeightOnlyKernel]]:
        return {name: cls._wo_dtypes(table) for name, table in v.items()}

    @field_validator("kernels")
    @classmethod
    def _counts(cls, v: dict[str, float]) -> dict[str, float]:
        bad = [k for k, n in v.items() if not n >= 0]
        if bad:
            raise ValueError(f"kernel counts must be >= 0: {', '.join(bad)}")
        return v

    @field_validator("kernel_sets")
    @classmethod
    def _sets(cls, v: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        return {name: cls._counts(counts) for name, counts in v.items()}

    @property
    def request_overhead_s(self) -> float:
        """The per-request serving time in seconds, the one conversion of ``request_overhead_us``
        (the ideal roofline has none): what a client-side TTFT or e2e adds to the model's."""
        return 0.0 if self.ideal else self.request_overhead_us * MICRO


def gemm_dtype_of(preset: EngineSpec | None) -> str | None:
    """The 16-bit GEMM dtype a pass under ``preset`` defaults to (EngineSpec.gemm_dtype; None: no
    preset, the ideal one, or one without a dtype of its own): the one place the rule is read."""
    return None if preset is None or preset.ideal else preset.gemm_dtype


def _bodies(path: Path) -> dict:
    """A preset file's presets, unvalidated: name -> mapping."""
    data = read_yaml(path)
    if not isinstance(data, dict) or not data:
        raise SpecError(path, None, "no preset in the file (expected NAME: {description: ..., ...})")
    return data


def _preset(path: Path, name: str, body) -> EngineSpec:
    if not isinstance(body, dict):
        raise SpecError(path, str(name), "expected a mapping of preset fields (description: ..., ...)")
    return build(EngineSpec, {"name": name, **body}, f"{path}: {name}")


def read_presets(path: Path) -> dict[str, EngineSpec]:
    """The presets of a file in engines.yaml's format (the catalog, or what `compare --fit` writes)."""
    return {name: _preset(path, name, body) for name, body in _bodies(path).items()}


def engine_arg_names() -> dict[str, set[str]]:
    """Each preset's own argument names (to say whose an unknown key is)."""
    return {name: set(e.engine_args) for name, e in engines().items()}


@lru_cache(maxsize=4)
def _catalog_bodies(path: Path) -> dict:
    return _bodies(path)


@lru_cache(maxsize=64)
def _catalog_preset(path: Path, name: str) -> EngineSpec:
    """One catalog preset, validated once: a command validates the presets it uses, not all."""
    return _preset(path, name, _catalog_bodies(path)[name])


def engines(path: Path = ENGINES_FILE) -> dict[str, EngineSpec]:
    """All presets, by name."""
    return {name: _catalog_preset(path, name) for name in _catalog_bodies(path)}


def engine_names(path: Path = ENGINES_FILE) -> tuple[str, ...]:
    """The catalog's preset names, none validated."""
    return tuple(_catalog_bodies(path))


PRESET_SUFFIXES = (".yaml", ".yml")


def is_preset_file(ref: str) -> bool:
    """Whether an --engine value names a preset file (PATH or PATH:NAME) rather than a catalog preset."""
    return ref.endswith(PRESET_SUFFIXES) or ref.rpartition(":")[0].endswith(PRESET_SUFFIXES)


def load_engine(ref: str, where: str = "--engine") -> EngineSpec:
    """A preset wherever an engine is named: a catalog name (calc/data/engines.yaml), or a file in
    that format, such as `compare --fit` writes: PATH (its one preset) or PATH:NAME. An unknown
    name is a one-line error with suggestions."""
    if is_preset_file(ref):
        path, _, name = (ref, "", "") if ref.endswith(PRESET_SUFFIXES) else ref.rpartition(":")
        presets = read_presets(Path(path))
        if not name and len(presets) > 1:
            raise SpecError(where, None, f"{path} holds {len(presets)} presets ({', '.join(presets)}): "
                                         f"name one as {path}:NAME")
        if name and name not in presets:
            raise SpecError(where, None, f"no preset {name!r} in {path} (it has {', '.join(presets)})"
                                         f"{suggest(name, presets, cutoff=0.4)}")
        return presets[name] if name else next(iter(presets.values()))
    names = engine_names()
    if ref not in names:
        hint = suggest(ref, names, cutoff=0.4)
        raise SpecError(where, None, f"unknown engine {ref!r} (known: {', '.join(names)}; or a preset "
                                     f"file, as `compare --fit` writes){hint}")
    return _catalog_preset(ENGINES_FILE, ref)


def load_preset(ref: str) -> EngineSpec:
    """A preset by name or from a preset file: load_engine's rule (the name compare and the scheduler use)."""
    return load_engine(ref)


def family(preset: EngineSpec) -> str:
    """The engine a preset models: its name, less the "-fit" a refit (calc.accuracy.refit) adds."""
    return preset.name.removesuffix("-fit")
