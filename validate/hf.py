"""Hugging Face transformers' own LlamaForCausalLM behind the reference decoder's interface.

An implementation the calculator never saw: `roofline validate --impl hf` times it
through the same harness, so its error against a profile calibrated on the
reference decoder says how well the calibration transfers. Optional: needs
``transformers`` (pip install 'roofline[hf]').

Differences that show (DESIGN.md "Traps"): logits for the last position only
(``logits_to_keep=1``, as engines do); a StaticCache attends over all of its
``max_cache_len`` slots behind a mask, so each grid point gets a cache of exactly
the positions it needs (T for a prefill, S + 1 for a decode step), while a whole
request uses one cache of T + G - 1 slots for every step; separate gate and up
projections and a RMSNorm built from elementwise ops (more kernels than ours).
"""

from __future__ import annotations

import torch

from calc.core.errors import SpecError
from calc.spec.model import ModelSpec

from .reference import TORCH_DTYPES


def llama_config(spec: ModelSpec):
    """A LlamaConfig with the spec's widths; SpecError for what Llama cannot express."""
    try:
        from transformers import LlamaConfig
    except ImportError:
        raise SpecError("--impl", None, "hf needs transformers: pip install 'roofline[hf]'") from None
    a, m = spec.attention, spec.mlp
    unsupported = [what for what, bad in (
        ("MLA attention", a.kind != "standard"), ("MoE", spec.moe is not None),
        ("a sliding window", a.sliding_window is not None), ("q/k norms", a.qk_norm),
        ("a fused qkv projection", a.fused_qkv), (f"{spec.norm} norms", spec.norm != "rmsnorm"),
        (f"{spec.position_embedding} positions", spec.position_embedding != "rope"),
        (f"a {m.kind} MLP", m.kind != "gated"), (f"{m.activation} activation", m.activation != "silu"),
        ("an o_proj bias without q/k/v biases", a.o_bias != a.qkv_bias),
        (f"{spec.norms_per_layer} norms per layer", spec.norms_per_layer != 2)) if bad]
    if unsupported:
        raise SpecError("--impl", None, f"hf runs Llama-style models only; {spec.name} has {', '.join(unsupported)}")
    return LlamaConfig(vocab_size=spec.vocab_size, hidden_size=spec.hidden_size, intermediate_size=m.intermediate_size,
                       num_hidden_layers=spec.num_layers, num_attention_heads=a.num_heads,
                       num_key_value_heads=a.num_kv_heads, head_dim=a.head_dim,
                       max_position_embeddings=spec.max_context, tie_word_embeddings=spec.tie_embeddings,
                       attention_bias=a.qkv_bias, mlp_bias=m.bias, attn_implementation="sdpa")


class _Cache:
    """The bits of validate.passes.KVCache the harness uses."""

    def __init__(self, owner: HFDecoder):
        self.owner = owner

    def prime(self) -> None:  # a fresh StaticCache is zeros already
        pass

    def reset(self) -> None:
        self.owner.hf_cache = None

    def shapes(self, layer: int = 0) -> tuple:
        c = self.owner.hf_cache
        return tuple(c.layers[layer].keys.shape) if c is not None else ()


class HFDecoder:
    """prefill / decode_step / setup over LlamaForCausalLM with a StaticCache (see the module doc)."""

    def __init__(self, spec: ModelSpec, max_len: int, dtype: str = "fp32", device: str = "cpu", seed: int = 0):
        from transformers import LlamaForCausalLM

        self.config = llama_config(spec)
        torch.manual_seed(seed)
        with torch.device(device):
            self.model = LlamaForCausalLM(self.config).to(TORCH_DTYPES[dtype]).eval().requires_grad_(False)
        self.max_len, self.device = max_len, device
        self.fixed: int | None = None
        self.hf_cache, self.cache_len = None, 0
        self.cache = _Cache(self)

    def parameters(self):
        return self.model.parameters()

    def setup(self, batch: int, dtype, device, max_len: int | None = None) -> _Cache:
        """A request (``max_len`` given) keeps one cache of that length; grid points size their own."""
        self.batch, self.fixed, self.hf_cache = batch, max_len, None
        return self.cache

    def _ensure(self, n: int) -> None:
        from transformers import StaticCache

        n = self.fixed or n
        if self.hf_cache is None or self.cache_len != n:
            self.hf_cache, self.cache_len = StaticCache(config=self.config, max_cache_len=n), n

    def _run(self, tokens, start: int):
        """A StaticLayer writes where its own counter points, not at position_ids: set the counter to
        ``start`` so a timed call can repeat at one position (one tiny fill per layer)."""
        for layer in self.hf_cache.layers:
            if getattr(layer, "is_initialized", False) and hasattr(layer, "cumulative_length"):
                layer.cumulative_length.fill_(start)
        B, n = tokens.shape
        pos = torch.arange(start, start + n, device=tokens.device)[None].expand(B, n)
        out = self.model(input_ids=tokens, position_ids=pos, cache=self.hf_cache, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1]

    def prefill(self, tokens):
        self._ensure(tokens.shape[1])
        return self._run(tokens, 0)

    def decode_step(self, token, pos: int):
        self._ensure(pos + 1)
        return self._run(token, pos)
