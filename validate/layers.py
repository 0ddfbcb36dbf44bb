"""The reference decoder's layers (validate/reference.py assembles them): norms, RoPE, attention
(MHA/GQA/MQA through ``scaled_dot_product_attention``, explicit with gpt-oss's sinks, DeepSeek MLA,
and a continuous-batching engine's mixed step of decode rows beside a prompt chunk), the dense MLP
and the MoE (a loop of plain matmuls over the tokens routed to each expert, so FlopCounterMode
counts exactly the k routed experts per token). The attention core is its own module (``.core``)
so a FLOP counter can tell attention FLOPs from linear ones."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.bias import causal_lower_right

from calc.spec.model import ModelSpec

from .passes import KVCache

ROPE_BASE = 10000.0


class Norm(nn.Module):
    def __init__(self, kind: str, width: int, eps: float = 1e-6):
        super().__init__()
        self.kind, self.eps = kind, eps
        self.weight = nn.Parameter(torch.ones(width))
        self.bias = nn.Parameter(torch.zeros(width)) if kind == "layernorm" else None

    def forward(self, x):
        if self.kind == "rmsnorm":
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)


def make_norm(kind: str, width: int) -> nn.Module:
    return nn.Identity() if kind == "none" else Norm(kind, width)


def rope_tables(max_len: int, dim: int, dtype, device):
    """cos, sin [max_len, dim/2] for rotate-half RoPE."""
    inv = 1.0 / ROPE_BASE ** (torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim)
    ang = torch.outer(torch.arange(max_len, device=device, dtype=torch.float32), inv)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def apply_rope(x, cos, sin):
    """x[..., n, d] rotated by the per-position cos/sin [n, d/2]: 3 FLOPs per element."""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


@dataclass
class MixedCache:
    """What a mixed step's attention needs: the decode rows' cache (``batch`` rows at context
    ``context``), the chunk's own batch-1 cache (``chunk`` tokens after ``cached``), RoPE tables."""

    rows: KVCache
    prompt: KVCache
    batch: int
    context: int
    chunk: int
    cached: int
    cos: torch.Tensor
    sin: torch.Tensor


class AttentionCore(nn.Module):
    """softmax(q k^T * scale [+ mask]) v; the only place attention FLOPs happen. With ``sinks``
    (gpt-oss: one learned logit per query head) each query's softmax also holds its head's sink,
    which takes a share of the probability and adds no value: the scores are then explicit
    matmuls, the same 4 B Hq n m D FLOPs that SDPA counts."""

    def forward(self, q, k, v, mask=None, causal=False, scale=None, sinks=None):
        if sinks is None:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None,
                                                  scale=scale, enable_gqa=k.shape[1] != q.shape[1])
        group = q.shape[1] // k.shape[1]
        if group > 1:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        s = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
        n, m = s.shape[-2:]
        if mask is None and causal:
            mask = torch.ones(n, m, dtype=torch.bool, device=q.device).tril(m - n)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        s = torch.cat([s, sinks.to(s.dtype).view(1, -1, 1, 1).expand(*s.shape[:-1], 1)], dim=-1)
        return s.float().softmax(dim=-1)[..., :-1].to(v.dtype) @ v


def window_mask(n: int, window: int, device) -> torch.Tensor:
    """bool[n, n]: query i sees keys j with i - W < j <= i (min(i+1, W) keys, DESIGN.md's min(i, W), 1-based)."""
    i = torch.arange(n, device=device)
    d = i[:, None] - i[None, :]
    return (d >= 0) & (d < window)


class Attention(nn.Module):
    """MHA/GQA/MQA: q/k/v (or fused qkv) projections, optional q/k norm, RoPE, SDPA, o_proj."""

    def __init__(self, spec: ModelSpec, window: int | None):
        super().__init__()
        a = spec.attention
        H, self.Hq, self.Hkv, self.D = spec.hidden_size, a.num_heads, a.num_kv_heads, a.head_dim
        self.window, self.rope = window, spec.position_embedding == "rope"
        if a.fused_qkv:
            self.qkv = nn.Linear(H, (self.Hq + 2 * self.Hkv) * self.D, bias=a.qkv_bias)
        else:
            self.q_proj = nn.Linear(H, self.Hq * self.D, bias=a.qkv_bias)
            self.k_proj = nn.Linear(H, self.Hkv * self.D, bias=a.qkv_bias)
            self.v_proj = nn.Linear(H, self.Hkv * self.D, bias=a.qkv_bias)
        self.q_norm = make_norm(spec.norm, self.D) if a.qk_norm else nn.Identity()
        self.k_norm = make_norm(spec.norm, self.D) if a.qk_norm else nn.Identity()
        self.core = AttentionCore()
        self.sinks = nn.Parameter(torch.empty(self.Hq)) if a.sinks else None
        self.o_proj = nn.Linear(self.Hq * self.D, H, bias=a.o_bias)

    def _qkv(self, x):
        B, n, _ = x.shape
        if hasattr(self, "qkv"):
            q, k, v = self.qkv(x).split([self.Hq * self.D, self.Hkv * self.D, self.Hkv * self.D], dim=-1)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        return (self.q_norm(q.view(B, n, self.Hq, self.D)), self.k_norm(k.view(B, n, self.Hkv, self.D)),
                v.view(B, n, self.Hkv, self.D))

    def forward(self, x, pos, end: int, cos, sin, cache: KVCache, layer: int):
        if isinstance(cache, MixedCache):
            return self._mixed(x, cache, layer)
        B, n, _ = x.shape
        q, k, v = (t.transpose(1, 2) for t in self._qkv(x))
        if self.rope:
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        cache.write(layer, end - n, k, v)
        if n > 1:  # prefill: attend over the fresh keys, causal (and windowed)
            mask = window_mask(n, self.window, x.device) if self.window and self.window < n else None
            out = self.core(q, k, v, mask=mask, causal=True, sinks=self.sinks)
        else:  # decode: every held slot is visible (min(S + 1, W) of them)
            keys, values = cache.visible(layer, end)
            out = self.core(q, keys, values, sinks=self.sinks)
        return self.o_proj(out.transpose(1, 2).reshape(B, n, self.Hq * self.D))

    def _mixed(self, x, m: MixedCache, layer: int):
        """x[1, B + T]: B decode rows, then one chunk of T tokens after C cached ones. The projections
        run once over all B + T tokens (as an engine's flattened batch); attention runs per part: the
        rows over their S + 1 slots, the chunk over C + T keys, causal from the bottom right."""
        B, T, S, C = m.batch, m.chunk, m.context, m.cached
        q, k, v = self._qkv(x)
        rows = [t[0, :B].unsqueeze(1).transpose(1, 2) for t in (q, k, v)]  # [B, H, 1, D]
        chunk = [t[:, B:].transpose(1, 2) for t in (q, k, v)]  # [1, H, T, D]
        if self.rope:
            rows[:2] = [apply_rope(t, m.cos[S:S + 1], m.sin[S:S + 1]) for t in rows[:2]]
            chunk[:2] = [apply_rope(t, m.cos[C:C + T], m.sin[C:C + T]) for t in chunk[:2]]
        m.rows.write(layer, S, rows[1], rows[2])
        keys, values = m.rows.visible(layer, S + 1)
        out_rows = self.core(rows[0], keys, values, sinks=self.sinks)
        m.prompt.write(layer, C, chunk[1], chunk[2])
        keys, values = m.prompt.visible(layer, C + T)
        out_chunk = self.core(chunk[0], keys, values, mask=causal_lower_right(T, C + T), sinks=self.sinks)
        out = torch.cat([out_rows.transpose(1, 2).reshape(1, B, -1), out_chunk.transpose(1, 2).reshape(1, T, -1)], 1)
        return self.o_proj(out)


class MLAttention(nn.Module):
    """DeepSeek MLA. Cache: latent c_kv[rkv] and rope key k_r[dr] side by side, one tensor.

    Prefill expands the new latents through kv_b_proj and runs ordinary attention;
    decode absorbs W_UK into the query and W_UV into the output (never re-expanding the cache).
    """

    def __init__(self, spec: ModelSpec, window: int | None):
        super().__init__()
        if window is not None:
            raise ValueError("the reference decoder does not implement sliding-window MLA")
        a = spec.attention
        H, self.Hq = spec.hidden_size, a.num_heads
        self.rq, self.rkv = a.q_lora_rank, a.kv_lora_rank
        self.dn, self.dr, self.dv = a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim
        qd = self.Hq * (self.dn + self.dr)
        if self.rq is None:
            self.q_proj = nn.Linear(H, qd, bias=False)
        else:
            self.q_a_proj = nn.Linear(H, self.rq, bias=False)
            self.q_a_norm = make_norm(spec.norm, self.rq)
            self.q_b_proj = nn.Linear(self.rq, qd, bias=False)
        self.kv_a_proj = nn.Linear(H, self.rkv + self.dr, bias=False)
        self.kv_a_norm = make_norm(spec.norm, self.rkv)
        self.kv_b_proj = nn.Linear(self.rkv, self.Hq * (self.dn + self.dv), bias=False)
        self.core = AttentionCore()
        self.o_proj = nn.Linear(self.Hq * self.dv, H, bias=False)
        self.scale = (self.dn + self.dr) ** -0.5

    def forward(self, x, pos, end: int, cos, sin, cache: KVCache, layer: int):
        B, n, _ = x.shape
        Hq, dn, dr, dv, rkv = self.Hq, self.dn, self.dr, self.dv, self.rkv
        q = self.q_proj(x) if self.rq is None else self.q_b_proj(self.q_a_norm(self.q_a_proj(x)))
        q = q.view(B, n, Hq, dn + dr).transpose(1, 2)
        q_nope, q_pe = q[..., :dn], apply_rope(q[..., dn:], cos, sin)
        kv_a = self.kv_a_proj(x)
        c = self.kv_a_norm(kv_a[..., :rkv])
        k_pe = apply_rope(kv_a[..., rkv:], cos, sin)  # [B, n, dr], shared by all heads
        cache.write(layer, end - n, torch.cat((c, k_pe), dim=-1))
        if n > 1:  # prefill, expanded form
            kv = self.kv_b_proj(c).view(B, n, Hq, dn + dv).transpose(1, 2)
            k = torch.cat((kv[..., :dn], k_pe[:, None].expand(B, Hq, n, dr)), dim=-1)
            out = self.core(torch.cat((q_nope, q_pe), dim=-1), k, kv[..., dn:], causal=True, scale=self.scale)
        else:  # decode, absorbed form
            w = self.kv_b_proj.weight.view(Hq, dn + dv, rkv)
            q_lat = torch.einsum("bhnd,hdr->bhnr", q_nope, w[:, :dn])
            latents = cache.visible(layer, end)[:, None]  # [B, 1, S+1, rkv+dr], a view
            o_lat = self.core(torch.cat((q_lat, q_pe), dim=-1), latents, latents[..., :rkv], scale=self.scale)
            out = torch.einsum("bhnr,hvr->bhnv", o_lat, w[:, dn:])
        return self.o_proj(out.transpose(1, 2).reshape(B, n, Hq * dv))


def activation(name: str):
    name = name.lower()
    if name in ("silu", "swish", "swiglu"):
        return F.silu
    if name in ("relu",):
        return F.relu
    if name.startswith("gelu"):
        return lambda x: F.gelu(x, approximate="tanh" if "tanh" in name or "new" in name or "fast" in name
                                else "none")
    raise ValueError(f"activation {name!r} is not implemented by the reference decoder")


class MLP(nn.Module):
    """Gated: gate_up[H,2F] -> act(g)*u -> down[F,H]; plain: up -> act -> down."""

    def __init__(self, spec: ModelSpec, width: int):
        super().__init__()
        m, H = spec.mlp, spec.hidden_size
        self.gated, self.act = m.kind == "gated", activation(m.activation)
        self.up = nn.Linear(H, (2 if self.gated else 1) * width, bias=m.bias)
        self.down = nn.Linear(width, H, bias=m.bias)

    def forward(self, x):
        h = self.up(x)
        if self.gated:
            g, u = h.chunk(2, dim=-1)
            return self.down(self.act(g) * u)
        return self.down(self.act(h))


class MoE(nn.Module):
    """Router x @ W_r[H,E], softmax top-k, a loop over experts on the tokens routed to each;
    shared experts (one MLP of width n_shared * F_shared) on every token."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        m, H = spec.moe, spec.hidden_size
        self.k = m.experts_per_token
        self.router = nn.Linear(H, m.num_experts, bias=m.router_bias)
        self.experts = nn.ModuleList(MLP(spec, m.expert_intermediate_size) for _ in range(m.num_experts))
        self.shared = MLP(spec, m.num_shared_experts * m.shared_intermediate) if m.num_shared_experts else None
        self.shared_gate = nn.Linear(H, 1, bias=False) if m.num_shared_experts and m.shared_expert_gate else None

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        weights, chosen = torch.topk(self.router(x).float().softmax(dim=-1), self.k, dim=-1)
        weights = weights.to(x.dtype)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            rows, slot = torch.where(chosen == e)
            if rows.numel():
                out.index_add_(0, rows, expert(x[rows]) * weights[rows, slot, None])
        if self.shared is not None:
            s = self.shared(x)
            out = out + (s * torch.sigmoid(self.shared_gate(x)) if self.shared_gate is not None else s)
        return out.view(shape)
