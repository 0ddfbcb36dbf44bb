"""Device memory of a request: weights, KV held at the end, peak activations, fit."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from calc.core.units import DTYPE_BYTES
from calc.cost.dtypes import Dtypes
from calc.cost.opcost import OpCost
from calc.cost.parallel import SINGLE, Parallel, kv_heads_per_gpu, sharded_weight_bytes
from calc.spec.hardware import HardwareSpec
from calc.spec.model import ModelSpec


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes on one device. ``fits`` compares total with capacity; ``shortfall_bytes`` says by how much it misses."""

    weights_bytes: np.ndarray
    kv_cache_bytes: np.ndarray
    activation_bytes: np.ndarray
    capacity_bytes: float

    @property
    def total_bytes(self) -> np.ndarray:
        return self.weights_bytes + self.kv_cache_bytes + self.activation_bytes

    @property
    def fits(self) -> np.ndarray:
        return self.total_bytes <= self.capacity_bytes

    @property
    def shortfall_bytes(self) -> np.ndarray:
        """total - capacity where it does not fit, else 0."""
        return np.maximum(self.total_bytes - self.capacity_bytes, 0.0)


# Serving engines cap the tokens of one forward pass (vLLM's max_num_batched_tokens and
# TensorRT-LLM's max_num_tokens both default to 8192) and run longer prefills in chunks.
MAX_PASS_TOKENS = 8192


def activation_peak_bytes(model: ModelSpec, batch, tokens_per_seq, ops: list[OpCost], dt: Dtypes,
                          chunk: float | None = MAX_PASS_TOKENS, moe_chunk: float | None = None) -> np.ndarray:
    """Peak live activations of one pass: the residual stream x[B*n, H] plus the largest
    operator's inputs and outputs (layers run one after another, so their activations
    are not held together), for at most ``chunk`` tokens: a longer prefill runs in chunks,
    and activations scale with the chunk's tokens (None: the whole pass at once, as an
    engine's profiling pass at its token budget runs). ``moe_chunk``: the routed experts take
    at most that many tokens at a time (an engine's fused-MoE chunking), so theirs scale with it."""
    tokens = np.asarray(batch, float) * np.asarray(tokens_per_seq, float)
    scale = 1.0 if chunk is None else np.minimum(1.0, chunk / tokens)  # the pass's chunk of its tokens
    residual = tokens * model.hidden_size * DTYPE_BYTES[dt.act]
    largest = np.float64(0.0)
    for op in ops:
        live = op.act_read_bytes + op.act_write_bytes
        if moe_chunk is not None and op.name == "moe.experts":  # a share of the pass's (chunk's) tokens
            live = live * np.minimum(1.0, moe_chunk / (tokens * scale))
        largest = np.maximum(largest, live)
    return (residual + largest) * scale


def kv_share_per_gpu(model: ModelSpec, par: Parallel) -> float:
    """Fraction of the whole model's KV cache the busiest GPU holds: its stage's
    ceil(L/PP) of L layers, times max(Hkv/TP, 1)/Hkv of the heads (MLA's latent cache
    is replicated on every TP rank, so 1)."""
    a = model.attention
    heads = 1.0 if a.kind == "mla" else kv_heads_per_gpu(model, par.tp) / a.num_kv_heads
    return heads * math.ceil(model.num_layers / par.pp) / model.num_layers


def request_memory(model: ModelSpec, hw: HardwareSpec, batch, prompt_len, output_len, dt: Dtypes,
                   prefill_ops: list[OpCost], par: Parallel = SINGLE) -> MemoryEstimate:
    """Per GPU: weights at the weight dtype (sharded), KV for T + G - 1 positions per
    sequence (sliding layers capped at W; sharded), activations at the prefill peak, against the
    memory CUDA gives a process (HardwareSpec.cuda_memory_bytes, what the KV budget sizes from too)."""
    positions = np.asarray(prompt_len, float) + np.asarray(output_len, float) - 1
    weights = sharded_weight_bytes(model, dt.weight_bytes_per_param(), DTYPE_BYTES[dt.unquantized(model)], par)
    return MemoryEstimate(
        weights_bytes=np.float64(weights),
        kv_cache_bytes=model.kv_cache_bytes(positions, batch, dt.kv) * kv_share_per_gpu(model, par),
        activation_bytes=activation_peak_bytes(model, batch, prompt_len, prefill_ops, dt),
        capacity_bytes=hw.cuda_memory_bytes,
    )
