"""A small torch decoder built from any ModelSpec, with random weights (nothing is downloaded).

gpt-fast's shape: modules for embedding, norms, attention (MHA/GQA/MQA through
``scaled_dot_product_attention``, explicit with gpt-oss's sinks, or DeepSeek MLA), dense or MoE MLP, and an
lm_head applied to the last position only; a preallocated static KV cache
(validate/passes.py) written in place; explicit positions; separate
``prefill(tokens)`` and ``decode_step(token, pos)``.

Its structure follows the calculator's operator list (calc/operators.py), so the
two can be compared: q/k/v (or fused qkv) projections, fused gate_up, MoE experts
as a loop of plain matmuls over the tokens routed to each (FlopCounterMode then
counts exactly the k routed experts per token; ``torch._grouped_mm`` would count 0).
The layers are in validate/layers.py; here the block, the decoder and its random fill.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from calc.spec.model import ModelSpec

from .arena import WeightArena, arena_bytes
from .layers import MLP, Attention, MixedCache, MLAttention, MoE, make_norm, rope_tables
from .passes import KVCache

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class Block(nn.Module):
    """Pre-norm residual block; norms_per_layer 4 adds post-norms (Gemma's sandwich)."""

    def __init__(self, spec: ModelSpec, layer: int):
        super().__init__()
        window = spec.attention.sliding_window if spec.sliding_layers[layer] else None
        self.attn = (MLAttention if spec.attention.kind == "mla" else Attention)(spec, window)
        n_norms = spec.norms_per_layer if spec.norm != "none" else 0
        has_mlp = spec.mlp.kind != "none"
        self.ff = MoE(spec) if spec.moe_layers[layer] else (MLP(spec, spec.mlp.intermediate_size) if has_mlp else None)
        norm = lambda i: make_norm(spec.norm, spec.hidden_size) if n_norms > i else nn.Identity()  # noqa: E731
        self.attn_norm, self.ff_norm, self.attn_post, self.ff_post = norm(0), norm(1), norm(2), norm(3)

    def forward(self, x, pos, end, cos, sin, cache, layer):
        x = x + self.attn_post(self.attn(self.attn_norm(x), pos, end, cos, sin, cache, layer))
        if self.ff is not None:
            x = x + self.ff_post(self.ff(self.ff_norm(x)))
        return x


class Decoder(nn.Module):
    """The whole decoder. ``prefill`` and ``decode_step`` return logits [B, V] of the last position."""

    def __init__(self, spec: ModelSpec, max_len: int):
        super().__init__()
        self.spec, self.max_len = spec, max_len
        H, V = spec.hidden_size, spec.vocab_size
        self.embed = nn.Embedding(V, H)
        self.pos_embed = nn.Embedding(max_len, H) if spec.position_embedding == "learned" else None
        self.layers = nn.ModuleList(Block(spec, i) for i in range(spec.num_layers))
        self.norm = make_norm(spec.norm, H)
        self.lm_head = None if spec.tie_embeddings else nn.Linear(H, V, bias=False)
        a = spec.attention
        self.rope_dim = (a.qk_rope_head_dim if a.kind == "mla" else a.head_dim) \
            if spec.position_embedding == "rope" else 0
        self.cache: KVCache | None = None

    def setup(self, batch: int, dtype, device, max_len: int | None = None) -> KVCache:
        """Allocate the static cache (``max_len`` slots, default the decoder's) and the RoPE tables
        for ``batch`` sequences. Decode reads only the S + 1 slots it attends, whatever the length."""
        if max_len is not None and max_len > self.max_len:
            raise ValueError(f"max_len {max_len} exceeds the decoder's {self.max_len}")
        self.cache = KVCache(self.spec, batch, self.max_len, dtype, device)
        if self.rope_dim:
            cos, sin = rope_tables(self.max_len, self.rope_dim, dtype, device)
        else:
            cos = sin = torch.zeros(self.max_len, 0, dtype=dtype, device=device)
        self.cos, self.sin = cos, sin
        self.positions = torch.arange(self.max_len, device=device)
        return self.cache

    def forward(self, tokens, start: int):
        end = start + tokens.shape[1]
        pos = self.positions[start:end]
        x = self.embed(tokens)
        if self.pos_embed is not None:
            x = x + self.pos_embed(pos)
        cos, sin = self.cos[start:end], self.sin[start:end]
        for i, layer in enumerate(self.layers):
            x = layer(x, pos, end, cos, sin, self.cache, i)
        x = self.norm(x[:, -1])  # logits for the last position only
        w = self.embed.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(x, w)

    def setup_chunk(self, positions: int) -> KVCache:
        """A batch-1 cache of ``positions`` slots for a mixed step's prompt chunk (setup() first)."""
        p = next(self.parameters())
        self.chunk_cache = KVCache(self.spec, 1, positions, p.dtype, p.device)
        self.chunk_cache.prime()
        return self.chunk_cache

    def mixed_step(self, rows, context: int, chunk, cached: int):
        """rows[B, 1] decode tokens at position S = ``context`` and chunk[1, T] at positions C .. C+T-1
        (C = ``cached``), as one pass over B + T tokens (setup(B) and setup_chunk(C + T) first).
        Returns logits [B + 1, V]: each row's, and the chunk's last position's."""
        B, T = rows.shape[0], chunk.shape[1]
        m = MixedCache(self.cache, self.chunk_cache, B, context, T, cached, self.cos, self.sin)
        x = self.embed(torch.cat([rows.view(1, B), chunk], 1))
        if self.pos_embed is not None:
            x = x + self.pos_embed(torch.cat([self.positions[context:context + 1].expand(B),
                                              self.positions[cached:cached + T]]))
        for i, layer in enumerate(self.layers):
            x = layer(x, None, None, None, None, m, i)
        x = self.norm(torch.cat([x[0, :B], x[0, -1:]]))  # logits of each row and the chunk's last position
        w = self.embed.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(x, w)

    def prefill(self, tokens):
        """tokens[B, T] at positions 0..T-1; writes T K/V positions per layer (W on sliding layers)."""
        return self(tokens, 0)

    def decode_step(self, token, pos: int):
        """token[B, 1] at position ``pos`` (= S, the context before the step); attends over S + 1."""
        return self(token, pos)


RANDOM_BLOCK = 1_000_003  # N(0, 1) draws shared by every weight (prime: rows of any width start apart)


def meta_decoder(spec: ModelSpec, max_len: int, dtype: str = "fp32") -> Decoder:
    """The decoder on the meta device at ``dtype``: its shapes, no memory."""
    with torch.device("meta"):
        return Decoder(spec, max_len).to(TORCH_DTYPES[dtype])


def weight_bytes(spec: ModelSpec, max_len: int, dtype: str) -> int:
    """Bytes a WeightArena needs for build_decoder's weights."""
    return arena_bytes(meta_decoder(spec, max_len, dtype))


def build_decoder(spec: ModelSpec, max_len: int, dtype: str = "fp32", device: str = "cpu",
                  seed: int = 0, arena: WeightArena | None = None) -> Decoder:
    """Random weights (std 1/sqrt(fan_in); token and position embeddings std 1, nn.Embedding's own
    default), allocated straight at ``dtype`` on ``device``, or placed in ``arena`` (its memory reused
    from the model built before). The values come from one block of RANDOM_BLOCK normal draws, each
    weight tiled from it starting at a random offset: a pass's time does not depend on fresh draws
    per weight, and drawing a billion normals per model was most of a quick validation's model builds
    on a CPU.

    The values do change which experts an MoE layer runs, and so its time. With embeddings at
    1/sqrt(H) (rows of norm 1) the residual stream was the attention's output, a causal average
    shared by every position (its mean was 0.47 of its size at qwen3-30b-a3b's first MoE layer,
    0.88 at the second), and the random router sent most tokens to the same experts: 72 and 44
    distinct experts for a 32-token prompt, where routing spread as trained routers spread it
    (calc.cost.experts: uniform) hits 112. With unit embeddings each token's own vector leads the
    stream: 99 and 93, and 128 of 128 at 128 tokens."""
    gen = torch.Generator().manual_seed(seed)
    model = meta_decoder(spec, max_len, dtype)
    if arena is None:
        model = model.to_empty(device=device)  # allocated once, at the dtype
    else:
        arena.place(model)
    draws = torch.randn(RANDOM_BLOCK, generator=gen)
    blocks = {}  # by fan-in: the draws scaled, twice over (any RANDOM_BLOCK-long run from the first half)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif p.ndim == 1:
                p.fill_(1.0)
            else:
                fan_in = 1 if name.endswith("embed.weight") else p.shape[-1]  # embed, pos_embed
                if fan_in not in blocks:
                    blocks[fan_in] = (draws * fan_in ** -0.5).repeat(2).to(device=p.device, dtype=p.dtype)
                fill_tiled(p.view(-1), blocks[fan_in], gen)
    return model.eval().requires_grad_(False)


def fill_tiled(flat: torch.Tensor, block: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """``flat`` (1-D) filled with runs of RANDOM_BLOCK values of ``block`` (2 x RANDOM_BLOCK draws),
    each run starting at a random offset: random values at the cost of a copy, not of fresh draws."""
    for at in range(0, flat.numel(), RANDOM_BLOCK):
        n = min(RANDOM_BLOCK, flat.numel() - at)
        start = int(torch.randint(RANDOM_BLOCK, (1,), generator=gen))
        flat[at:at + n].copy_(block[start:start + n])
    return flat


def reduced(spec: ModelSpec, layers: int | None) -> ModelSpec:
    """The same widths with ``layers`` layers (re-validated, so MoE's first_dense_layers still fits)."""
    if layers is None or layers == spec.num_layers:
        return spec
    data = spec.model_dump()
    data.update(num_layers=layers, name=f"{spec.name}@{layers}L")
    return ModelSpec(**data)
