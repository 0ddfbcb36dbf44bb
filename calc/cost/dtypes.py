"""The dtypes of a pass: weights, KV cache, compute (and the activations that follow)."""

from __future__ import annotations

from dataclasses import dataclass

from calc.core.errors import SpecError
from calc.core.units import (
    DEFAULT_GROUP_SIZE,
    DTYPE_BYTES,
    SCALED_WEIGHTS,
    WEIGHT_ONLY,
    canonical_dtype,
    weight_bytes_per_param,
)
from calc.spec.model import ModelSpec


def _engine_default(weight: str, gemm_dtype: str | None) -> str | None:
    """The compute dtype an engine with its own 16-bit GEMM dtype runs ``weight`` in (None: no rule):
    quantised weights dequantise to ``gemm_dtype``; fp16 and bf16 weights run as stored."""
    if gemm_dtype is None:
        return None
    if weight in SCALED_WEIGHTS:
        return gemm_dtype
    return weight if weight in ("fp16", "bf16") else None


@dataclass(frozen=True)
class Dtypes:
    """Weight, KV-cache and compute dtypes (canonical names); activations follow compute,
    except that 8-bit and 4-bit compute keeps activations between kernels in bf16."""

    weight: str
    kv: str
    compute: str
    group_size: int = DEFAULT_GROUP_SIZE

    @classmethod
    def resolve(cls, model: ModelSpec, weight=None, kv=None, compute=None, group_size=DEFAULT_GROUP_SIZE,
                gemm_dtype: str | None = None) -> Dtypes:
        """Defaults: the model's serving dtype (weights: the dtype its checkpoint ships them in); fp8 weights run fp8 GEMMs (W8A8), while
        weight-only int8/int4/fp4 dequantise to the model dtype. ``gemm_dtype`` (an engine's own,
        EngineSpec.gemm_dtype: llama.cpp's fp16): quantised weights dequantise to it instead, and
        16-bit weights run GEMMs in their own dtype, as such an engine's CUDA backend does. Errors name the option."""

        def pick(value, option):
            try:
                return canonical_dtype(value)
            except ValueError as exc:
                raise SpecError(option, None, str(exc)) from None

        w = pick(weight or model.default_weight_dtype, "--weight-dtype")
        k = pick(kv or model.serving_dtype, "--kv-dtype")
        c = pick(compute or ("fp8" if w == "fp8" else _engine_default(w, gemm_dtype) or model.serving_dtype),
                 "--compute-dtype")
        if c in WEIGHT_ONLY:
            raise SpecError("--compute-dtype", None, f"{c} is a storage format; matmuls run in bf16/fp16/fp8/int8")
        if group_size < 1:
            raise SpecError("--group-size", None, f"must be >= 1, got {group_size}")
        return cls(w, k, c, group_size)

    @property
    def act(self) -> str:
        return self.compute if self.compute in ("fp32", "bf16", "fp16") else "bf16"

    @property
    def weight_only(self) -> bool:
        """Weight-only quantised GEMMs: int8/int4/fp4/mxfp4 weights dequantised inside a wider matmul."""
        return self.weight in SCALED_WEIGHTS and self.compute in ("fp32", "tf32", "bf16", "fp16")

    @property
    def attention_compute(self) -> str:
        """Attention kernels run at 16-bit when the GEMMs are 8-bit (FlashAttention-2 default)."""
        return self.act

    def unquantized(self, model: ModelSpec) -> str:
        """Dtype of the weights quantisation leaves alone (embeddings, lm_head, norms): the
        model's, unless the weights are served wider (fp32), as ModelSpec.weight_bytes counts."""
        wide = DTYPE_BYTES[self.weight] >= DTYPE_BYTES[model.serving_dtype]
        return self.weight if wide else model.serving_dtype

    def unquantized_dtypes(self, model: ModelSpec) -> Dtypes:
        """The dtypes of the weights quantisation leaves alone: weights at ``unquantized``,
        16-bit compute (as lm_head runs beside fp8 GEMMs)."""
        return Dtypes(self.unquantized(model), self.kv, self.act, self.group_size)

    def of_weights(self, model: ModelSpec, experts: bool = False) -> Dtypes:
        """The dtypes a matmul's weights are read at: these where the checkpoint quantises it
        (ModelSpec.quantized: every decoder matmul, or, for ``experts``, the experts only),
        else unquantized_dtypes. The one rule every weight-bytes path follows."""
        return self if experts or model.quantized == "linear" else self.unquantized_dtypes(model)

    def weight_bytes_per_param(self) -> float:
        """Bytes per quantised weight with its scales (calc.core.units.weight_bytes_per_param)."""
        return weight_bytes_per_param(self.weight, self.group_size)
