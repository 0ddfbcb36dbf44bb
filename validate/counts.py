"""Count checks: the calculator's FLOPs and KV bytes against torch's own accounting.

Truth comes from outside our formulas:

- FLOPs: ``torch.utils.flop_counter.FlopCounterMode`` over a prefill and one decode
  step of the reference decoder, with SDPA forced onto its math backend (the CPU
  flash kernel counts 0, DESIGN.md "Traps"). Attention FLOPs are those counted
  inside the ``.core`` modules, linear FLOPs the rest (the counter sees only
  matmuls, so norms, RoPE and softmax are not in either).
- Causal prefill: the math backend multiplies the full T x T rectangle and masks
  afterwards, so the counter reports 4*Hq*D*T^2 per sequence while our convention
  counts the T(T+1)/2 visible pairs (or the window's). We report both, and check
  ours against the counter's number times the fraction of the mask that is visible
  (the mask the pass used, counted). Decode attends S + 1 keys (or W): no mask,
  exact match.
- KV bytes: the nbytes of the cache slots actually written (read from the tensors)
  against ``ModelSpec.kv_cache_bytes``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from calc.cost.dtypes import Dtypes
from calc.cost.opcost import Pass, total
from calc.cost.operators import pass_ops
from calc.spec.model import ModelSpec

from .layers import window_mask
from .reference import build_decoder

TOLERANCE = 1e-3  # relative, for FLOPs (they should match exactly)


@dataclass(frozen=True)
class FlopCheck:
    phase: str
    batch: int
    new: int
    past: int
    counter_linear: float
    calc_linear: float
    counter_attention_computed: float  # what the math backend multiplied (full rectangle in prefill)
    counter_attention_visible: float  # the same times the visible fraction of the mask used
    calc_attention: float

    @property
    def linear_rel_err(self) -> float:
        return _rel(self.calc_linear, self.counter_linear)

    @property
    def attention_rel_err(self) -> float:
        return _rel(self.calc_attention, self.counter_attention_visible)

    @property
    def ok(self) -> bool:
        return self.linear_rel_err <= TOLERANCE and self.attention_rel_err <= TOLERANCE


@dataclass(frozen=True)
class KVCheck:
    batch: int
    positions: int
    measured_bytes: int
    calc_bytes: float
    layer0_shape: tuple

    @property
    def ok(self) -> bool:
        return self.measured_bytes == self.calc_bytes


@dataclass(frozen=True)
class CountReport:
    model: str
    dtype: str
    flops: tuple[FlopCheck, ...]
    kv: tuple[KVCheck, ...]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.flops) and all(c.ok for c in self.kv)

    def to_dict(self) -> dict:
        return {
            "model": self.model, "dtype": self.dtype, "ok": self.ok, "tolerance": TOLERANCE,
            "method": "FlopCounterMode, SDPA math backend; attention = FLOPs inside the .core modules",
            "flops": [{**asdict(c), "linear_rel_err": c.linear_rel_err, "attention_rel_err": c.attention_rel_err,
                       "ok": c.ok} for c in self.flops],
            "kv": [{**asdict(c), "ok": c.ok} for c in self.kv],
        }

    def lines(self) -> list[str]:
        out = []
        for c in self.flops:
            tag = "ok" if c.ok else "MISMATCH"
            ctx = f"T={c.new}" if c.phase == "prefill" else f"S={c.past}"
            out.append(f"{c.phase:7s} B={c.batch} {ctx}: linear counter {c.counter_linear:.6g} vs calc "
                       f"{c.calc_linear:.6g} ({100 * c.linear_rel_err:.4f}%); attention counter computed "
                       f"{c.counter_attention_computed:.6g}, visible {c.counter_attention_visible:.6g} vs calc "
                       f"{c.calc_attention:.6g} ({100 * c.attention_rel_err:.4f}%) {tag}")
        for k in self.kv:
            tag = "ok" if k.ok else "MISMATCH"
            out.append(f"KV B={k.batch} positions={k.positions}: cache nbytes {k.measured_bytes} vs calc "
                       f"{k.calc_bytes:.0f}; layer 0 K {list(k.layer0_shape)} {tag}")
        return out


def _rel(ours: float, truth: float) -> float:
    if truth == 0:
        return 0.0 if ours == 0 else float("inf")
    return abs(ours - truth) / abs(truth)


def _count(fn) -> tuple[float, list[float], object]:
    """Run ``fn`` under FlopCounterMode: (total FLOPs, per-layer attention FLOPs, result)."""
    with FlopCounterMode(display=False) as fc, sdpa_kernel(SDPBackend.MATH):
        result = fn()
    counts = fc.get_flop_counts()
    per_layer = {}
    for key, ops in counts.items():
        if key.endswith(".core"):
            layer = int(key.split(".layers.")[1].split(".")[0])
            per_layer[layer] = per_layer.get(layer, 0) + sum(ops.values())
    layers = [float(per_layer.get(i, 0)) for i in range(max(per_layer, default=-1) + 1)]
    return float(fc.get_total_flops()), layers, result


def _visible_fraction(spec: ModelSpec, layer: int, n: int) -> float:
    """Visible share of the prefill score matrix the pass used (causal, or the window's band)."""
    W = spec.attention.sliding_window
    if spec.sliding_layers[layer] and W < n:
        mask = window_mask(n, W, "cpu")
    else:
        mask = torch.ones(n, n, dtype=torch.bool).tril()
    return float(mask.sum()) / (n * n)


def _calc(spec: ModelSpec, B: int, n: int, p: int, phase: str, dt: Dtypes) -> tuple[float, float]:
    ops = pass_ops(spec, Pass(np.float64(B), np.float64(n), np.float64(p), phase), dt)
    return float(total(ops, "linear_flops")), float(total(ops, "attention_flops"))


def check_counts(spec: ModelSpec, dtype: str = "fp32", device: str = "cpu", batch: int = 2,
                 prompt_len: int = 32, decode_steps: int = 3, decoder=None) -> CountReport:
    """FlopCounterMode over a prefill at ``prompt_len`` and the decode steps after it (S = T, T+1, ...),
    and the cache's bytes after prefill and after the last step, against the calculator."""
    max_len = prompt_len + decode_steps
    if max_len > spec.max_context:
        raise ValueError(f"{prompt_len} + {decode_steps} positions exceed {spec.name}'s max context")
    model = decoder if decoder is not None else build_decoder(spec, max_len, dtype, device)
    cache = model.setup(batch, next(model.parameters()).dtype, device)
    dt = Dtypes(dtype, dtype, dtype)
    gen = torch.Generator(device="cpu").manual_seed(0)
    tokens = torch.randint(0, spec.vocab_size, (batch, prompt_len), generator=gen).to(device)
    flops, kv = [], []
    with torch.inference_mode():
        total_f, attn_layers, logits = _count(lambda: model.prefill(tokens))
        computed = sum(attn_layers)
        visible = sum(a * _visible_fraction(spec, i, prompt_len) for i, a in enumerate(attn_layers))
        lin, att = _calc(spec, batch, prompt_len, 0, "prefill", dt)
        flops.append(FlopCheck("prefill", batch, prompt_len, 0, total_f - computed, lin, computed, visible, att))
        kv.append(KVCheck(batch, prompt_len, cache.held_bytes(), float(spec.kv_cache_bytes(prompt_len, batch, dtype)),
                          cache.shapes(0)))
        for step in range(decode_steps):
            S = prompt_len + step
            token = logits.float().argmax(-1, keepdim=True)
            total_f, attn_layers, logits = _count(lambda: model.decode_step(token, S))  # noqa: B023
            computed = sum(attn_layers)
            lin, att = _calc(spec, batch, 1, S, "decode", dt)
            flops.append(FlopCheck("decode", batch, 1, S, total_f - computed, lin, computed, computed, att))
        positions = prompt_len + decode_steps
        kv.append(KVCheck(batch, positions, cache.held_bytes(),
                          float(spec.kv_cache_bytes(positions, batch, dtype)), cache.shapes(0)))
    return CountReport(spec.name, dtype, tuple(flops), tuple(kv))
