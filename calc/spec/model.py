"""Model specs: pydantic schemas and the values derived from them.

A spec is data; every derived number is a property or a pure method with the
equation in its docstring. Letters follow DESIGN.md: L layers, H hidden, Hq
query heads, Hkv KV heads, D head dim, F MLP intermediate, V vocab, E experts,
k experts per token, W sliding window.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from calc.core import limits as lim
from calc.core.units import (
    DEFAULT_GROUP_SIZE,
    DTYPE_BYTES,
    canonical_dtype,
    serving_dtype,
    weight_bytes_per_param,
)
from calc.spec.base import SpecModel


class _Spec(SpecModel):
    pass


def _dtype_field(value: str) -> str:
    return canonical_dtype(value)


# --------------------------------------------------------------------------- model


class AttentionSpec(_Spec):
    """Self-attention of one layer. ``kind: mla`` is DeepSeek's multi-head latent attention."""

    kind: Literal["standard", "mla"] = "standard"
    num_heads: int = Field(gt=0, le=lim.MAX_HEADS)
    num_kv_heads: int | None = Field(default=None, gt=0, le=lim.MAX_HEADS)
    head_dim: int | None = Field(default=None, gt=0, le=lim.MAX_DIM)
    qkv_bias: bool = False
    o_bias: bool = False
    fused_qkv: bool = False
    qk_norm: bool = False
    # Attention sinks (gpt-oss): one learned logit per query head joins each softmax as an extra
    # column; Hq params a layer, one more softmax term per query and head, nothing cached.
    sinks: bool = False
    # MLA (kind: mla); q_lora_rank may be absent (DeepSeek-V2-Lite projects q directly)
    q_lora_rank: int | None = Field(default=None, gt=0, le=lim.MAX_DIM)
    kv_lora_rank: int | None = Field(default=None, gt=0, le=lim.MAX_DIM)
    qk_nope_head_dim: int | None = Field(default=None, gt=0, le=lim.MAX_DIM)
    qk_rope_head_dim: int | None = Field(default=None, gt=0, le=lim.MAX_DIM)
    v_head_dim: int | None = Field(default=None, gt=0, le=lim.MAX_DIM)
    # Sliding window: W positions; the pattern repeats over layers, true = local layer.
    sliding_window: int | None = Field(default=None, gt=0, le=lim.MAX_CONTEXT)
    sliding_pattern: tuple[bool, ...] | None = Field(default=None, max_length=lim.MAX_LAYERS)

    @model_validator(mode="after")
    def _check(self) -> AttentionSpec:
        if self.kind == "mla":
            need = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
            missing = [n for n in need if getattr(self, n) is None]
            if missing:
                raise ValueError(f"kind mla needs {', '.join(missing)}")
        else:
            mla_set = [n for n in ("q_lora_rank", "kv_lora_rank") if getattr(self, n) is not None]
            if mla_set:
                raise ValueError(f"{', '.join(mla_set)} given but kind is not mla")
            if self.num_kv_heads is None:
                raise ValueError("num_kv_heads is required for standard attention")
            if self.num_heads % self.num_kv_heads:
                raise ValueError(
                    f"num_kv_heads ({self.num_kv_heads}) does not divide num_heads ({self.num_heads})"
                )
        if self.sliding_pattern is not None:
            if self.sliding_window is None:
                raise ValueError("sliding_pattern given without sliding_window")
            if not self.sliding_pattern:
                raise ValueError("sliding_pattern is empty")
        return self


class MLPSpec(_Spec):
    """Dense MLP: gated (SwiGLU/GeGLU, 3 matrices), plain (2 matrices) or none."""

    kind: Literal["gated", "plain", "none"] = "gated"
    intermediate_size: int | None = Field(default=None, gt=0, le=lim.MAX_DIM)
    bias: bool = False
    activation: str = "silu"

    @model_validator(mode="after")
    def _check(self) -> MLPSpec:
        if self.kind != "none" and self.intermediate_size is None:
            raise ValueError(f"kind {self.kind} needs intermediate_size")
        return self

    @property
    def matrices(self) -> int:
        return {"gated": 3, "plain": 2, "none": 0}[self.kind]


class MoESpec(_Spec):
    """Mixture of experts replacing the dense MLP on some layers.

    Layer i is an MoE layer iff i >= first_dense_layers and i % layer_frequency == 0
    (DeepSeek's rule; Mixtral and Qwen-MoE have first_dense_layers 0, frequency 1).
    Experts are gated (3 matrices) like the dense MLP kind of the model.
    """

    num_experts: int = Field(gt=0, le=lim.MAX_EXPERTS)
    experts_per_token: int = Field(gt=0, le=lim.MAX_EXPERTS)
    expert_intermediate_size: int = Field(gt=0, le=lim.MAX_DIM)
    num_shared_experts: int = Field(default=0, ge=0, le=lim.MAX_EXPERTS)
    shared_expert_intermediate_size: int | None = Field(default=None, gt=0, le=lim.MAX_DIM)
    shared_expert_gate: bool = False
    first_dense_layers: int = Field(default=0, ge=0, le=lim.MAX_LAYERS)
    layer_frequency: int = Field(default=1, gt=0, le=lim.MAX_LAYERS)
    router_bias: bool = False

    @model_validator(mode="after")
    def _check(self) -> MoESpec:
        if self.experts_per_token > self.num_experts:
            raise ValueError(
                f"experts_per_token ({self.experts_per_token}) exceeds num_experts ({self.num_experts})"
            )
        return self

    @property
    def shared_intermediate(self) -> int:
        return self.shared_expert_intermediate_size or self.expert_intermediate_size


def _whole(value: object) -> int | None:
    """An int, or a float with an integral value (YAML 4096.0), as int; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


class ModelSpec(_Spec):
    """A decoder-only transformer, as the calculator sees it."""

    name: str = Field(min_length=1)
    description: str = ""
    architecture: str = ""
    sources: dict[str, str] = Field(default_factory=dict)
    num_layers: int = Field(gt=0, le=lim.MAX_LAYERS)
    hidden_size: int = Field(gt=0, le=lim.MAX_DIM)
    vocab_size: int = Field(gt=0, le=lim.MAX_VOCAB)
    max_context: int = Field(gt=0, le=lim.MAX_CONTEXT)
    tie_embeddings: bool = False
    dtype: str = "bf16"
    # The dtype the checkpoint ships its decoder matmul weights in when that differs from
    # ``dtype`` (DeepSeek-V3: fp8 per quantization_config); None: ``dtype``. The default weight dtype.
    weight_dtype: str | None = None
    # Which weights the weight dtype covers: every decoder matmul (linear) or the experts' alone
    # (experts: gpt-oss's MXFP4 checkpoint keeps attention and router at ``dtype``).
    quantized: Literal["linear", "experts"] = "linear"
    norm: Literal["rmsnorm", "layernorm", "none"] = "rmsnorm"
    norms_per_layer: int = Field(default=2, ge=0, le=16)
    position_embedding: Literal["rope", "learned", "none"] = "rope"
    attention: AttentionSpec
    mlp: MLPSpec
    moe: MoESpec | None = None

    _normalize_dtype = field_validator("dtype")(classmethod(lambda cls, v: _dtype_field(v)))
    _normalize_weight_dtype = field_validator("weight_dtype")(
        classmethod(lambda cls, v: None if v is None else _dtype_field(v)))

    @model_validator(mode="before")
    @classmethod
    def _derive_head_dim(cls, data: object) -> object:
        """head_dim defaults to hidden / heads only when the source omits it."""
        if not isinstance(data, dict):
            return data
        att = data.get("attention")
        hidden = data.get("hidden_size")
        if isinstance(att, dict) and att.get("head_dim") is None and att.get("kind", "standard") == "standard":
            heads = att.get("num_heads")
            hidden, heads = _whole(hidden), _whole(heads)
            if hidden is not None and heads is not None and heads > 0 and hidden > 0:
                if hidden % heads:
                    raise ValueError(
                        f"attention.num_heads ({heads}) does not divide hidden_size ({hidden}); give attention.head_dim"
                    )
                data = {**data, "attention": {**att, "head_dim": hidden // heads}}
        return data

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        if self.attention.kind == "standard" and self.attention.head_dim is None:
            raise ValueError("attention.head_dim is missing and cannot be derived from hidden_size / num_heads")
        if self.moe is not None and self.mlp.kind == "none":
            raise ValueError("moe needs an mlp kind (gated or plain) for its experts")
        if self.moe is not None and self.moe.first_dense_layers >= self.num_layers:
            raise ValueError("moe.first_dense_layers must be below num_layers")
        if self.quantized == "experts" and self.moe is None:
            raise ValueError("quantized: experts needs a moe block")
        return self

    # ----- layer layout

    @property
    def serving_dtype(self) -> str:
        """Default weight/KV/compute dtype: the checkpoint's, with fp32 served as bf16."""
        return serving_dtype(self.dtype)

    @property
    def default_weight_dtype(self) -> str:
        """The weight dtype when none is asked: the checkpoint's shipped one, else serving_dtype."""
        return self.weight_dtype or self.serving_dtype

    @property
    def sliding_layers(self) -> np.ndarray:
        """bool[L]: which layers use the sliding window (the pattern repeats over layers)."""
        a = self.attention
        if a.sliding_window is None:
            return np.zeros(self.num_layers, dtype=bool)
        pattern = a.sliding_pattern or (True,)
        return np.array([pattern[i % len(pattern)] for i in range(self.num_layers)], dtype=bool)

    @property
    def moe_layers(self) -> np.ndarray:
        """bool[L]: which layers have an MoE block instead of the dense MLP."""
        m = self.moe
        i = np.arange(self.num_layers)
        if m is None:
            return np.zeros(self.num_layers, dtype=bool)
        return (i >= m.first_dense_layers) & (i % m.layer_frequency == 0)

    # ----- parameters

    def attention_matrix_params(self) -> int:
        """One layer's attention matmul weights (no biases, norms or sinks).

        standard: H*(Hq+2Hkv)*D + Hq*D*H
        mla:      q: H*Hq*(dn+dr) or H*rq + rq*Hq*(dn+dr);  kv: H*(rkv+dr) + rkv*Hq*(dn+dv);  o: Hq*dv*H
        """
        a, H = self.attention, self.hidden_size
        Hq = a.num_heads
        if a.kind == "mla":
            rq, rkv = a.q_lora_rank, a.kv_lora_rank
            dn, dr, dv = a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim
            q = H * Hq * (dn + dr) if rq is None else H * rq + rq * Hq * (dn + dr)
            return q + H * (rkv + dr) + rkv * Hq * (dn + dv) + Hq * dv * H
        return H * (Hq + 2 * a.num_kv_heads) * a.head_dim + Hq * a.head_dim * H

    def attention_params(self) -> int:
        """One layer's attention weights: attention_matrix_params plus, standard, biases
        ((Hq+2Hkv)*D and H) and q/k norms (D each); mla, its latent norms (rq, rkv); and one
        sink logit per query head (Hq) where the model has sinks."""
        a = self.attention
        n = self.attention_matrix_params() + (a.num_heads if a.sinks else 0)
        if a.kind == "mla":
            return n + (a.q_lora_rank or 0) + a.kv_lora_rank
        Hq, Hkv, D = a.num_heads, a.num_kv_heads, a.head_dim
        n += (Hq + 2 * Hkv) * D if a.qkv_bias else 0
        n += self.hidden_size if a.o_bias else 0
        n += 2 * D if a.qk_norm else 0
        return n

    def mlp_matrix_params(self, intermediate: int | None = None) -> int:
        """Matmul weights of the dense MLP (or one expert) of width F: matrices * H * F."""
        F = intermediate if intermediate is not None else self.mlp.intermediate_size
        return 0 if self.mlp.kind == "none" else self.mlp.matrices * self.hidden_size * F

    def mlp_params(self, intermediate: int | None = None) -> int:
        """Dense MLP (or one expert) of width F: matrices * H * F (+ biases: (matrices-1)*F + H)."""
        m, H = self.mlp, self.hidden_size
        F = intermediate if intermediate is not None else m.intermediate_size
        n = self.mlp_matrix_params(F)
        if m.bias and m.kind != "none":
            n += (m.matrices - 1) * F + H
        return n

    def norm_params(self) -> int:
        """One norm: H weights (RMSNorm) or 2H (LayerNorm with bias)."""
        return {"rmsnorm": 1, "layernorm": 2, "none": 0}[self.norm] * self.hidden_size

    def param_breakdown(self) -> dict[str, int]:
        """Every weight counted once, by component (tied embeddings once)."""
        L, H, V = self.num_layers, self.hidden_size, self.vocab_size
        n_moe = int(self.moe_layers.sum())
        m = self.moe
        out = {
            "embedding": V * H,
            "position_embedding": self.max_context * H if self.position_embedding == "learned" else 0,
            "lm_head": 0 if self.tie_embeddings else V * H,
            "attention": L * self.attention_params(),
            "norms": (L * self.norms_per_layer + (1 if self.norm != "none" else 0)) * self.norm_params(),
            "mlp": (L - n_moe) * self.mlp_params(),
            "router": 0,
            "routed_experts": 0,
            "shared_experts": 0,
        }
        if m is not None:
            out["router"] = n_moe * (H * m.num_experts + (m.num_experts if m.router_bias else 0))
            out["routed_experts"] = n_moe * m.num_experts * self.mlp_params(m.expert_intermediate_size)
            shared = m.num_shared_experts * self.mlp_params(m.shared_intermediate)
            out["shared_experts"] = n_moe * (shared + (H if m.shared_expert_gate else 0))
        return out

    @property
    def params_total(self) -> int:
        """Sum of param_breakdown(): every weight once."""
        return sum(self.param_breakdown().values())

    @property
    def params_active(self) -> int:
        """Weights one token's forward pass uses: total - per MoE layer (E - k) * expert params."""
        m = self.moe
        if m is None:
            return self.params_total
        unused = (m.num_experts - m.experts_per_token) * self.mlp_params(m.expert_intermediate_size)
        return self.params_total - int(self.moe_layers.sum()) * unused

    def quantized_params(self) -> int:
        """Weights the weight dtype covers: the matrices of the decoder's matmuls (quantized
        linear: attention, dense MLP, router, experts) or of the experts alone (experts).
        Biases, norms, sinks, embeddings and lm_head stay at the model's dtype, as FP8, AWQ,
        GPTQ and gpt-oss's MXFP4 checkpoints ship them."""
        L, H, m = self.num_layers, self.hidden_size, self.moe
        n_moe = int(self.moe_layers.sum())
        experts = 0
        if m is not None:
            experts = n_moe * (m.num_experts * self.mlp_matrix_params(m.expert_intermediate_size)
                               + m.num_shared_experts * self.mlp_matrix_params(m.shared_intermediate))
        if self.quantized == "experts":
            return experts
        router = 0 if m is None else n_moe * H * (m.num_experts + (1 if m.shared_expert_gate else 0))
        return L * self.attention_matrix_params() + (L - n_moe) * self.mlp_matrix_params() + router + experts

    def weight_bytes(self, weight_dtype: str | None = None, group_size: int = DEFAULT_GROUP_SIZE) -> float:
        """Bytes of all weights for serving at ``weight_dtype``: quantized_params at the weight
        dtype with its scales (calc.core.units.weight_bytes_per_param: int8/int4/fp4 one fp16
        scale per ``group_size``, mxfp4 one byte per 32), the rest at the model's dtype."""
        wd = canonical_dtype(weight_dtype or self.default_weight_dtype)
        base = DTYPE_BYTES[self.serving_dtype]
        per_weight = weight_bytes_per_param(wd, group_size)
        if DTYPE_BYTES[wd] >= base:
            # An up-cast (e.g. fp32 weights) applies to everything.
            return self.params_total * per_weight
        q = self.quantized_params()
        return q * per_weight + (self.params_total - q) * base

    # ----- KV cache

    def kv_elements_per_token_per_layer(self) -> int:
        """Cached elements per token in one layer: 2*Hkv*D (standard) or rkv + dr (MLA latent)."""
        a = self.attention
        if a.kind == "mla":
            return a.kv_lora_rank + a.qk_rope_head_dim
        return 2 * a.num_kv_heads * a.head_dim

    def kv_bytes_per_token_per_layer(self, kv_dtype: str | None = None) -> float:
        """Bytes cached per token per layer: kv_elements_per_token_per_layer * bytes(kv dtype)."""
        kd = canonical_dtype(kv_dtype or self.serving_dtype)
        return self.kv_elements_per_token_per_layer() * DTYPE_BYTES[kd]

    def kv_bytes_per_token(self, kv_dtype: str | None = None) -> float:
        """All layers, at full context (no window cap): L * kv_bytes_per_token_per_layer."""
        return self.num_layers * self.kv_bytes_per_token_per_layer(kv_dtype)

    def kv_positions_held(self, positions):
        """Positions held per layer for a sequence of ``positions`` tokens, summed over layers:
        sum_l (min(positions, W) if layer l slides else positions). Broadcasts over arrays."""
        p = np.asarray(positions, dtype=float)
        n_slide = int(self.sliding_layers.sum())
        held = (self.num_layers - n_slide) * p
        if n_slide:
            held = held + n_slide * np.minimum(p, self.attention.sliding_window)
        return held

    def kv_cache_bytes(self, positions, batch=1, kv_dtype: str | None = None):
        """KV held by ``batch`` sequences of ``positions`` tokens:
        B * sum_l held_l(positions) * kv_bytes_per_token_per_layer."""
        return np.asarray(batch, dtype=float) * self.kv_positions_held(positions) * self.kv_bytes_per_token_per_layer(kv_dtype)
