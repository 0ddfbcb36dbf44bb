"""Kernel curves and collective costs fitted to measured kernels (schemas only).

A hardware profile may carry, under ``efficiency.kernels``, small analytical curves fitted
to per-kernel measurements (reports/kernels/fit_public.py fits them to aiconfigurator's
public tables), and, at the top level, ``collectives``: the fixed times and bandwidth
fractions of all-reduce algorithms, all-to-all and point-to-point sends. calc.cost.roofline
applies them; a profile without them keeps the efficiency model it always had.

Every fraction is of the data-sheet dense peak or bandwidth and at most 1; every fit names
its source and its residuals (median and p90 |predicted / measured - 1| over ``points``).
Letters: M tokens (rows), N output features, K input features, T queries per sequence,
B sequences, S keys attended.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from calc.core.units import canonical_dtype
from calc.spec.model import _Spec


class Fitted(_Spec):
    """Residuals of a fit: |predicted / measured - 1| over the measured points."""

    median_error: float = Field(ge=0)
    p90_error: float = Field(ge=0)
    points: int = Field(ge=1)


class GemmCurve(Fitted):
    """x[M,K] @ W[K,N]: t = max(2MNK / (peak * compute * f(M) f(N) f(K)),
    bytes / (bandwidth * memory)) + fixed, with f(X) = X / (X + X_half)."""

    compute: float = Field(gt=0, le=1)
    m_half: float = Field(ge=0)
    n_half: float = Field(ge=0)
    k_half: float = Field(ge=0)
    memory: float = Field(gt=0, le=1)
    fixed_us: float = Field(ge=0)
    kernel_source: str = ""


class StreamCurve(Fitted):
    """A kernel streaming b bytes (elementwise, norms, copies): t = b / (bandwidth * memory) + fixed."""

    memory: float = Field(gt=0, le=1)
    fixed_us: float = Field(ge=0)


class PrefillAttentionCurve(Fitted):
    """Causal attention over T new queries per sequence: t = max(FLOPs / (peak16 * compute *
    T / (T + tokens_half)), bytes / (bandwidth * memory)) + fixed."""

    compute: float = Field(gt=0, le=1)
    tokens_half: float = Field(ge=0)
    memory: float = Field(gt=0, le=1)
    fixed_us: float = Field(ge=0)
    kernel_source: str = ""


class DecodeAttentionCurve(Fitted):
    """One query per sequence over S cached keys: t = KV bytes / (bandwidth * memory) + fixed
    + B * per_sequence (the compute roof is the prefill curve's)."""

    memory: float = Field(gt=0, le=1)
    fixed_us: float = Field(ge=0)
    per_sequence_us: float = Field(ge=0)
    kernel_source: str = ""


class KernelCurves(_Spec):
    """Fitted kernel curves of one GPU. ``gemm`` is by compute dtype (fp16 uses bf16's when it
    has none); dtypes without a curve keep the profile's efficiency model."""

    source: str = Field(min_length=1)
    gemm: dict[str, GemmCurve]
    stream: StreamCurve
    prefill_attention: PrefillAttentionCurve
    decode_attention: DecodeAttentionCurve

    @field_validator("gemm")
    @classmethod
    def _dtypes(cls, v: dict[str, GemmCurve]) -> dict[str, GemmCurve]:
        return {canonical_dtype(k): c for k, c in v.items()}

    def gemm_for(self, compute_dtype: str) -> GemmCurve | None:
        alias = {"fp16": "bf16", "bf16": "fp16"}.get(compute_dtype)
        return self.gemm.get(compute_dtype) or (self.gemm.get(alias) if alias else None)


class Collectives(_Spec):
    """Fitted costs of the collectives of a TP/EP/PP split over the scale-up link (message M
    bytes, n GPUs, BW the link's bandwidth per direction):

    one-shot all-reduce   one_shot + (n-1) M / (BW custom_fraction)       small messages
    two-shot all-reduce   two_shot + 2 (n-1)/n M / (BW custom_fraction)
    ring all-reduce       ring + 2 (n-1) ring_hop + 2 (n-1)/n M / (BW ring_fraction)   (NCCL)
    all-to-all            all_to_all + (n-1)/n M / (BW all_to_all_fraction)
    send                  send + M / (BW send_fraction)                                (PP)

    An engine with a custom all-reduce takes the fastest of the three all-reduces (as
    TensorRT-LLM's AUTO strategy and vLLM's custom all-reduce do); one without takes the ring."""

    source: str = Field(min_length=1)
    one_shot_us: float = Field(ge=0)
    two_shot_us: float = Field(ge=0)
    custom_fraction: float = Field(gt=0, le=1)
    ring_us: float = Field(ge=0)
    ring_hop_us: float = Field(ge=0)
    ring_fraction: float = Field(gt=0, le=1)
    all_to_all_us: float = Field(ge=0)
    all_to_all_fraction: float = Field(gt=0, le=1)
    send_us: float = Field(ge=0)
    send_fraction: float = Field(gt=0, le=1)
    residuals: dict[str, Fitted] = Field(default_factory=dict)
