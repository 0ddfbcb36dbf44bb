"""Hardware specs: pydantic schemas and the values derived from them.

A spec is data; every derived number is a property or a pure method with the
equation in its docstring. Letters follow DESIGN.md: L layers, H hidden, Hq
query heads, Hkv KV heads, D head dim, F MLP intermediate, V vocab, E experts,
k experts per token, W sliding window.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PrivateAttr, field_validator

from calc.core import limits as lim
from calc.core.errors import SpecError
from calc.core.units import GB, MICRO, TB, TERA, MiB, canonical_dtype
from calc.spec.bands import BandTable
from calc.spec.engine import EngineSpec, load_engine
from calc.spec.kernel_tables import KernelSet
from calc.spec.kernels import Collectives, KernelCurves
from calc.spec.model import _Spec

# --------------------------------------------------------------------------- hardware


class Interconnect(_Spec):
    """Scale-up link between devices in a node. Bandwidth is per device, per direction."""

    name: str
    bandwidth_gb_s_per_direction: float = Field(gt=0, le=lim.MAX_LINK_GB_S)
    latency_us: float = Field(default=5.0, ge=0, le=lim.MAX_OVERHEAD_US)

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.bandwidth_gb_s_per_direction * GB

    @property
    def latency_s(self) -> float:
        return self.latency_us * MICRO


class PCIe(_Spec):
    gen: int = Field(gt=0, le=64)
    lanes: int = Field(gt=0, le=1024)
    bandwidth_gb_s_per_direction: float = Field(gt=0, le=lim.MAX_LINK_GB_S)
    # per hop of a collective over PCIe: the fixed 10 us the link model has always used (an
    # assumption of the order of a PCIe peer-to-peer round trip plus NCCL's per-step cost)
    latency_us: float = Field(default=10.0, ge=0, le=lim.MAX_OVERHEAD_US)

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.bandwidth_gb_s_per_direction * GB

    @property
    def latency_s(self) -> float:
        return self.latency_us * MICRO


class Price(_Spec):
    usd_per_hour: float = Field(gt=0, le=lim.MAX_PRICE_USD_H)
    date: str
    source: str

    @field_validator("date", mode="before")
    @classmethod
    def _date_text(cls, v: object) -> object:
        """YAML reads 2026-09-25 as a date; keep it as ISO text."""
        return v.isoformat() if hasattr(v, "isoformat") else v


class DtypeEfficiency(_Spec):
    """Efficiencies for passes whose compute dtype is this one; an absent field inherits
    the profile's. (A calibration measures each dtype: on CPUs bf16 kernels and their
    fixed costs differ from fp32 ones; on GPUs fp8 GEMMs reach a different share of peak.)"""

    compute: float | None = Field(default=None, gt=0, le=1)
    memory: float | None = Field(default=None, gt=0, le=1)
    attention: float | None = Field(default=None, gt=0, le=1)
    kernel_overhead_us: float | None = Field(default=None, ge=0, le=lim.MAX_OVERHEAD_US)
    step_overhead_us: float | None = Field(default=None, ge=0, le=lim.MAX_OVERHEAD_US)
    gemm_m_half: float | None = Field(default=None, ge=0)


class ProfileEfficiency(_Spec):
    """Fractions of peak a real kernel reaches, and fixed overheads; ``source`` says whence.

    ``attention``: the share of the compute and memory efficiencies that attention
    kernels reach (1: the same as GEMMs and streams, the default); calibrations fit it
    because attention kernels (flash on CPU, FlashAttention on GPU) run below GEMM rates.
    ``by_dtype``: per-compute-dtype overrides (empty by default: one set for all dtypes).
    ``gemm_m_half``: the token count M at which a matmul reaches half of ``compute``
    (compute efficiency x M / (M + m_half)); ``memory_half_mb``: the transfer at which a
    kernel reaches half of ``memory`` (efficiency x bytes / (bytes + half)). Both 0: off.
    ``engine``: the serving-engine preset (calc/data/engines.yaml) whose kernel-level
    parameters apply on top of these, unless the command names another (--engine).
    ``kernels``: curves fitted to measured kernels (calc.spec.kernels); absent: the model above.
    """

    compute: float = Field(default=0.7, gt=0, le=1)
    memory: float = Field(default=0.85, gt=0, le=1)
    attention: float = Field(default=1.0, gt=0, le=1)
    kernel_overhead_us: float = Field(default=0.0, ge=0, le=lim.MAX_OVERHEAD_US)
    step_overhead_us: float = Field(default=0.0, ge=0, le=lim.MAX_OVERHEAD_US)
    gemm_m_half: float = Field(default=0.0, ge=0)
    memory_half_mb: float = Field(default=0.0, ge=0)
    engine: str | None = None
    by_dtype: dict[str, DtypeEfficiency] = Field(default_factory=dict)
    source: str = ""
    # Curves fitted to measured kernels (calc.spec.kernels); when present they replace the
    # fractions above for GEMMs, attention and streaming kernels at the dtypes they cover.
    kernels: KernelCurves | None = None

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                load_engine(v)
            except SpecError as exc:
                raise ValueError(exc.problem) from None
        return v

    @field_validator("by_dtype")
    @classmethod
    def _dtypes(cls, v: dict[str, DtypeEfficiency]) -> dict[str, DtypeEfficiency]:
        return {canonical_dtype(k): e for k, e in v.items()}


# What a matmul at a compute dtype runs as on a chip that lacks it: the next wider dtype it has.
_RUNS_AS = {
    "fp4": ("fp4", "fp8", "bf16", "fp16", "fp32"),
    "mxfp4": ("mxfp4", "fp4", "fp8", "bf16", "fp16", "fp32"),
    "int4": ("int4", "int8", "bf16", "fp16", "fp32"),
    "fp8": ("fp8", "bf16", "fp16", "fp32"),
    "int8": ("int8", "bf16", "fp16", "fp32"),
    "bf16": ("bf16", "fp16", "fp32"),
    "fp16": ("fp16", "bf16", "fp32"),
    "tf32": ("tf32", "fp32"),
    "fp32": ("fp32", "tf32"),
}


class HardwareSpec(_Spec):
    """One accelerator (or CPU socket). Peak FLOP/s are dense, per dtype."""

    name: str = Field(min_length=1)
    description: str = ""
    kind: Literal["gpu", "cpu", "tpu", "other"]
    vendor: str = ""
    sources: dict[str, str] = Field(default_factory=dict)
    memory_gb: float = Field(gt=0, le=lim.MAX_MEMORY_GB)
    # What the device reports as its total memory (nvidia-smi memory.total, in MiB = 2**20 bytes).
    # None: no public report found; the data sheet's memory_gb (1e9 bytes) stands in.
    memory_reported_mib: float | None = Field(default=None, gt=0, le=lim.MAX_MEMORY_GB * GB / MiB)
    # What CUDA/ROCm give a process as the total (cudaMemGetInfo, torch.cuda.mem_get_info, in MiB):
    # less than nvidia-smi's by what the driver keeps. Engines size the KV cache from it. None: no
    # public report found; memory_reported_mib stands in.
    memory_cuda_mib: float | None = Field(default=None, gt=0, le=lim.MAX_MEMORY_GB * GB / MiB)
    memory_bandwidth_tb_s: float = Field(gt=0, le=lim.MAX_BANDWIDTH_TB_S)
    peak_tflops: dict[str, float]
    # Dense FP16 tensor rate with FP16 accumulate, where it beats peak_tflops' fp16 (FP32
    # accumulate): GeForce cards run FP32 accumulate at half rate. Engines whose GEMMs
    # accumulate in fp16 (EngineSpec.fp16_accumulate) run at it. None: the same rate.
    fp16_accumulate_tflops: float | None = Field(default=None, gt=0, le=lim.MAX_PEAK_TFLOPS)
    # Peak INT32 rate of the CUDA cores in tera-ops/s (an integer multiply-add counted as 2, as
    # NVIDIA's whitepapers count it): the roof of kernels bound by integer work rather than by
    # their tensor cores (llama.cpp's MMQ unpacking quantised weights: EngineSpec weight_only
    # with peak int32). None: not stated; int32_rate_per_s then assumes half the FP32 peak.
    int32_tops: float | None = Field(default=None, gt=0, le=lim.MAX_PEAK_TFLOPS)
    l2_cache_mb: float | None = Field(default=None, gt=0, le=lim.MAX_CACHE_MB)
    interconnect: Interconnect | None = None
    pcie: PCIe | None = None
    tdp_w: float | None = Field(default=None, gt=0, le=lim.MAX_WATTS)
    price: Price | None = None
    efficiency: ProfileEfficiency = ProfileEfficiency()
    collectives: Collectives | None = None  # fitted all-reduce / all-to-all / send costs
    calibration: dict | None = None
    # prediction bands from this profile's own held-out validation (calc.spec.bands; roofline validate)
    bands: BandTable | None = None
    # CPU threads the profile describes (its kernels ran with this many); None: not stated
    threads: int | None = Field(default=None, ge=1)
    # measured kernel tables (calc/spec/kernel_tables.py), paths relative to this profile's folder
    kernel_tables: list[str] = Field(default_factory=list)
    # The tables themselves, read when the profile is loaded from its file (calc.spec.catalog)
    _kernel_set: KernelSet = PrivateAttr(default_factory=KernelSet)
    # The engine preset in effect, resolved from efficiency.engine when the spec is built
    # (or set by with_engine): cost code receives it as a value and reads no files.
    _preset: EngineSpec | None = PrivateAttr(default=None)

    def model_post_init(self, context: object, /) -> None:
        if self.efficiency.engine is not None:
            self._preset = load_engine(self.efficiency.engine)

    @property
    def preset(self) -> EngineSpec | None:
        """The serving-engine preset whose kernel-level parameters apply on top of the profile's:
        the one ``efficiency.engine`` names (a copy that changed the name re-resolves it)."""
        name = self.efficiency.engine
        if name is None:
            return None
        if self._preset is None or self._preset.name != name:
            self._preset = load_engine(name)
        return self._preset

    def with_engine(self, engine: str | EngineSpec | None) -> HardwareSpec:
        """This profile under another engine preset: a name from calc/data/engines.yaml (checked)
        or a preset value (a fitted one); None leaves the profile as it is."""
        if engine is None:
            return self
        preset = load_engine(engine) if isinstance(engine, str) else engine
        out = self.model_copy(update={"efficiency": self.efficiency.model_copy(update={"engine": preset.name})})
        out._preset = preset
        return out

    @property
    def kernel_set(self) -> KernelSet:
        """The measured kernel tables this profile carries (empty: the analytical model alone)."""
        return self._kernel_set

    def with_kernels(self, tables: KernelSet) -> HardwareSpec:
        """This profile carrying ``tables`` (read by the spec layer; the cost layer gets them as a value)."""
        out = self.model_copy()
        out._preset = self._preset
        out._kernel_set = tables
        return out

    @field_validator("peak_tflops")
    @classmethod
    def _peaks(cls, v: dict[str, float]) -> dict[str, float]:
        out = {}
        for key, val in v.items():
            name = canonical_dtype(key)
            if not isinstance(val, (int, float)) or isinstance(val, bool) or not 0 < val <= lim.MAX_PEAK_TFLOPS:
                raise ValueError(f"peak for {key} must be a positive number up to {lim.MAX_PEAK_TFLOPS:g} TFLOP/s")
            out[name] = float(val)
        if not out:
            raise ValueError("needs at least one dtype")
        return out

    @property
    def memory_bytes(self) -> float:
        """Device memory in bytes: as the device reports it (memory_reported_mib x 2**20), else the
        data sheet's memory_gb x 1e9 (an "80 GB" H100 reports 81,559 MiB = 85.52e9 bytes)."""
        if self.memory_reported_mib is not None:
            return self.memory_reported_mib * MiB
        return self.memory_gb * GB

    @property
    def cuda_memory_bytes(self) -> float:
        """The total a process is given (memory_cuda_mib x 2**20), what engines size the KV cache
        from; else memory_bytes."""
        return self.memory_cuda_mib * MiB if self.memory_cuda_mib is not None else self.memory_bytes

    @property
    def reported_memory_gb(self) -> float:
        """memory_bytes in GB (1e9 bytes): the size engines read, and their scheduler rules by GPU
        memory are written against (calc.spec.scheduler.resolve_serving's memory_gb)."""
        return self.memory_bytes / GB

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        return self.memory_bandwidth_tb_s * TB

    @property
    def int32_rate_per_s(self) -> float:
        """INT32 ops/s of the CUDA cores: int32_tops, or, where a profile states none, half its FP32
        peak (an assumption: the ratio on NVIDIA's Turing to Hopper SMs, 64 INT32 lanes beside 128
        FP32, all but the A100's GA100; Blackwell, AMD and CPUs publish no INT32 figure)."""
        if self.int32_tops is not None:
            return self.int32_tops * TERA
        return self.peak_flops_per_s("fp32") / 2

    @property
    def fp16_accumulate_rate_per_s(self) -> float:
        """FLOP/s of fp16 GEMMs that accumulate in fp16: fp16_accumulate_tflops where it beats the
        fp16 peak (GeForce cards), else the fp16 peak (the same rate as FP32 accumulate)."""
        return max((self.fp16_accumulate_tflops or 0.0) * TERA, self.peak_flops_per_s("fp16"))

    @property
    def kernel_overhead_s(self) -> float:
        return self.efficiency.kernel_overhead_us * MICRO

    @property
    def step_overhead_s(self) -> float:
        return self.efficiency.step_overhead_us * MICRO

    def runs_as(self, compute_dtype: str) -> str:
        """The dtype whose peak a matmul at ``compute_dtype`` runs at: the dtype itself, or, when
        the chip lacks it, the next wider one it has (fp8 -> bf16/fp16 -> tf32 -> fp32), as a
        kernel would run it (an A100 has no fp8: fp8 weights run bf16 matmuls)."""
        for key in _RUNS_AS[canonical_dtype(compute_dtype)]:
            if key in self.peak_tflops:
                return key
        return max(self.peak_tflops, key=self.peak_tflops.get)

    def peak_flops_per_s(self, compute_dtype: str) -> float:
        """Dense peak for a compute dtype, at the dtype it runs as (runs_as)."""
        return self.peak_tflops[self.runs_as(compute_dtype)] * TERA

    def ridge_point(self, compute_dtype: str) -> float:
        """FLOP/byte where compute and memory roofs meet: peak / bandwidth."""
        return self.peak_flops_per_s(compute_dtype) / self.memory_bandwidth_bytes_per_s
