"""Speculative decoding: a draft proposes k tokens, the target verifies them in one pass.

With acceptance rate alpha per drafted token (each accepted independently, the first
rejection ends the run) a step yields the accepted prefix plus the target's own token:

    E[tokens per step] = sum_{i=0..k} alpha^i = (1 - alpha^(k+1)) / (1 - alpha)

(Leviathan et al. 2023, eq. 1). One step costs k draft decode steps (a draft model, or
draft heads: EAGLE/MTP-style, one head pass per drafted token, reusing the target's
embedding and lm_head) plus one target pass over k + 1 new positions after S cached
ones, with logits for all k + 1. TPOT = step time / E[tokens]; TTFT adds the draft's
prefill of the prompt. The draft's weights and KV are counted in memory.

Left out: the draft's catch-up pass over the accepted tokens (priced as a decode step),
rejected tokens' KV writes (overwritten next step), sampling/rejection kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from calc.core.errors import SpecError
from calc.core.units import DTYPE_BYTES
from calc.cost.dtypes import Dtypes
from calc.cost.efficiency import Efficiency
from calc.cost.latency import Estimate, decode_cost, prefill_cost, tpot_nodes
from calc.cost.memory import kv_share_per_gpu
from calc.cost.opcost import Pass
from calc.cost.operators import pass_ops
from calc.cost.parallel import Parallel, check, link, sharded_weight_bytes
from calc.cost.roofline import phase_cost
from calc.spec.model import ModelSpec
from calc.spec.yamlio import build


@dataclass(frozen=True)
class DraftHeads:
    """EAGLE/MTP-style draft heads: ``layers`` decoder layers of hidden ``width`` (None: the
    target's), sharing the target's embedding and lm_head."""

    layers: int
    width: int | None = None


# Host time per draft pass beyond its kernels' own launch costs (in its operator times): none.
# vLLM runs the k draft passes inside the target's engine step (vllm/v1/spec_decode/eagle.py,
# EagleProposer.propose: the first pass, then `for _ in range(self.num_speculative_tokens - 1)`
# updating positions on the GPU and replaying the draft's CUDA graph), so the engine's per-step
# overhead (scheduling, input preparation, output processing) is paid once per speculative step.
DRAFT_PASS_S = 0.0


@dataclass(frozen=True)
class SpecConfig:
    """Draft length k, acceptance rate alpha in [0, 1), a draft model or draft heads, and the
    host time each draft pass adds (``draft_pass_s``; the engine's step overhead is paid once)."""

    k: int
    acceptance: float
    draft: ModelSpec | None = None
    heads: DraftHeads | None = None
    draft_pass_s: float = DRAFT_PASS_S


def expected_tokens(acceptance, k):
    """Tokens emitted per verification step: (1 - alpha^(k+1)) / (1 - alpha)."""
    a = np.asarray(acceptance, float)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def check_spec(target: ModelSpec, cfg: SpecConfig) -> None:
    """Input errors name the option."""
    if not 0.0 <= cfg.acceptance < 1.0:
        raise SpecError("--spec-accept", None, f"acceptance rate must be in [0, 1), got {cfg.acceptance:g}")
    if not isinstance(cfg.k, (int, np.integer)) or cfg.k < 1:
        raise SpecError("--spec-k", None, f"draft length must be a whole number >= 1, got {cfg.k!r}")
    if (cfg.draft is None) == (cfg.heads is None):
        raise SpecError("--spec-draft", None, "give a draft model or draft heads (--spec-heads), one of them")
    if cfg.draft is not None and cfg.draft.vocab_size != target.vocab_size:
        raise SpecError("--spec-draft", "vocab_size", f"{cfg.draft.name} has {cfg.draft.vocab_size} tokens, "
                                                      f"{target.name} {target.vocab_size}: a draft must share the vocabulary")
    if cfg.heads is not None and cfg.heads.layers < 1:
        raise SpecError("--spec-heads", None, f"layers must be >= 1, got {cfg.heads.layers}")


def head_model(target: ModelSpec, heads: DraftHeads) -> ModelSpec:
    """The draft heads as a dense decoder: ``layers`` layers of the target's layer shape at
    hidden ``width`` (query/KV heads and MLP width scaled with it, head dim kept)."""
    H = target.hidden_size
    width = heads.width or H
    data = target.model_dump()
    att = dict(data["attention"], sliding_window=None, sliding_pattern=None)
    F = target.mlp.intermediate_size or (target.moe.expert_intermediate_size if target.moe else 4 * H)
    if width != H:
        if att["kind"] != "standard" or width % att["head_dim"]:
            raise SpecError("--spec-heads", None, f"width {width} must be a multiple of the head dim "
                                                  f"{att['head_dim']} (standard attention only)")
        hq = width // att["head_dim"]
        hkv = max(1, min(hq, round(att["num_kv_heads"] * width / H)))
        while hq % hkv:
            hkv -= 1
        att.update(num_heads=hq, num_kv_heads=hkv)
    mlp = dict(data["mlp"], kind=data["mlp"]["kind"] if data["mlp"]["kind"] != "none" else "gated",
               intermediate_size=max(1, round(F * width / H)))
    data.update(name=f"{target.name}-draft-heads", num_layers=heads.layers, hidden_size=width, attention=att,
                mlp=mlp, moe=None)
    # a width the target's shape scales past the stated ranges (its MLP at 4.2 M hidden) is one line
    return build(ModelSpec, data, f"draft heads {heads.layers}:{width}")


@dataclass(frozen=True)
class SpecEstimate:
    """Speculative decoding on top of a plain Estimate (same B, T, G, dtypes, split)."""

    config: SpecConfig
    draft_name: str
    draft_tp: int
    tokens_per_step: float
    draft_step_s: np.ndarray  # k draft passes at context T
    verify_step_s: np.ndarray  # the target's pass over k + 1 positions at context T
    step_mean_s: np.ndarray  # draft + verify, averaged over the request's contexts
    ttft_s: np.ndarray  # target prefill + draft prefill
    plain_tpot_s: np.ndarray
    draft_weight_bytes: float  # per GPU
    draft_kv_cache_bytes: np.ndarray  # per GPU, T + G - 1 + k positions per sequence
    memory_total_bytes: np.ndarray  # per GPU, plain total + draft weights + draft KV
    capacity_bytes: float
    batch: np.ndarray
    output_len: np.ndarray

    @property
    def tpot_s(self) -> np.ndarray:
        """Mean step time per emitted token; nan when G = 1."""
        with np.errstate(invalid="ignore"):
            return np.where(self.output_len > 1, self.step_mean_s / self.tokens_per_step, np.nan)

    @property
    def e2e_s(self) -> np.ndarray:
        return self.ttft_s + np.where(self.output_len > 1, (self.output_len - 1) * np.nan_to_num(self.tpot_s), 0.0)

    @property
    def output_tokens_per_s(self) -> np.ndarray:
        return self.batch * self.output_len / self.e2e_s

    @property
    def speedup(self) -> np.ndarray:
        """Plain TPOT over speculative TPOT (> 1: speculation helps)."""
        with np.errstate(invalid="ignore"):
            return self.plain_tpot_s / self.tpot_s

    @property
    def fits(self) -> np.ndarray:
        return self.memory_total_bytes <= self.capacity_bytes


def verify_cost(model, hw, batch, context, k: int, dt, eff, attention, par: Parallel):
    """The target's verification pass: k + 1 new positions per sequence after ``context``
    cached ones, logits for all k + 1 (run as decode: MLA keeps the absorbed form)."""
    ps = Pass(np.asarray(batch, float), np.float64(k + 1), np.asarray(context, float), "decode", logits=k + 1)
    return phase_cost(pass_ops(model, ps, dt, attention, par), hw, dt, eff, link(hw, par))


def draft_efficiency(eff: Efficiency, cfg: SpecConfig) -> Efficiency:
    """The draft's passes run inside the target's engine step: each pays ``cfg.draft_pass_s``,
    not the engine's per-step overhead (which the target's pass carries, once per step)."""
    return eff.with_step_overhead(cfg.draft_pass_s)


def _draft_parallel(draft: ModelSpec, par: Parallel) -> Parallel:
    """The draft runs at the target's TP where its heads divide, else on one GPU."""
    try:
        return check(draft, Parallel(par.tp))
    except SpecError:
        return Parallel()


@dataclass(frozen=True)
class Draft:
    """The draft as the formulas run it: a model (draft heads as a small dense decoder), its
    dtypes (the target's names), its split, and the weights it adds per GPU."""

    model: ModelSpec
    dtypes: Dtypes
    parallel: Parallel
    weight_bytes: float  # per GPU (draft heads: less the target's embedding and lm_head they share)

    def kv_bytes_per_token(self) -> float:
        """Draft KV per cached position, per GPU."""
        return float(self.model.kv_bytes_per_token(self.dtypes.kv) * kv_share_per_gpu(self.model, self.parallel))


def draft_of(target: ModelSpec, cfg: SpecConfig, dt: Dtypes, par: Parallel) -> Draft:
    """Resolve and check the draft of ``cfg`` beside a target run at ``dt`` and ``par``."""
    check_spec(target, cfg)
    draft = cfg.draft if cfg.draft is not None else head_model(target, cfg.heads)
    ddt = Dtypes.resolve(draft, dt.weight, dt.kv, dt.compute, dt.group_size)
    dpar = _draft_parallel(draft, par)
    if cfg.heads is not None:  # embedding and lm_head are the target's
        b = draft.param_breakdown()
        shared = (b["embedding"] + b["lm_head"]) * DTYPE_BYTES[ddt.unquantized(draft)]
        dweights = (draft.weight_bytes(ddt.weight, ddt.group_size) - shared) / dpar.tp
    else:
        dweights = sharded_weight_bytes(draft, ddt.weight_bytes_per_param(), DTYPE_BYTES[ddt.unquantized(draft)], dpar)
    return Draft(draft, ddt, dpar, float(dweights))


def speculative(est: Estimate, cfg: SpecConfig) -> SpecEstimate:
    """Speculative TPOT, TTFT, throughput and memory for the scenarios of ``est``."""
    target, hw, dt = est.model, est.hardware, est.dtypes
    dr = draft_of(target, cfg, dt, est.parallel)
    draft, ddt, dpar = dr.model, dr.dtypes, dr.parallel
    eff = Efficiency.of(hw, est.ideal)
    deff = draft_efficiency(eff, cfg)
    B, T, G, k = est.batch, est.prompt_len, est.output_len, cfg.k
    s, w = tpot_nodes(T, G - 1)
    draft_nodes = k * decode_cost(draft, hw, B, s, ddt, deff, est.attention, dpar).time_s
    verify_nodes = verify_cost(target, hw, B, s, k, dt, eff, est.attention, est.parallel).time_s
    steps = np.maximum(G - 1, 1)
    step_mean = (w * (draft_nodes + verify_nodes)).sum(axis=0) / steps
    draft_prefill, _ = prefill_cost(draft, hw, B, T, ddt, deff, est.attention, par=dpar)
    dweights = dr.weight_bytes
    dkv = draft.kv_cache_bytes(T + G - 1 + k, B, ddt.kv) * kv_share_per_gpu(draft, dpar)
    return SpecEstimate(
        config=cfg, draft_name=draft.name, draft_tp=dpar.tp,
        tokens_per_step=float(expected_tokens(cfg.acceptance, k)),
        draft_step_s=k * decode_cost(draft, hw, B, T, ddt, deff, est.attention, dpar).time_s,
        verify_step_s=verify_cost(target, hw, B, T, k, dt, eff, est.attention, est.parallel).time_s,
        step_mean_s=step_mean, ttft_s=est.ttft_s + draft_prefill.time_s, plain_tpot_s=est.tpot_s,
        draft_weight_bytes=float(dweights), draft_kv_cache_bytes=dkv,
        memory_total_bytes=est.memory.total_bytes + dweights + dkv, capacity_bytes=est.memory.capacity_bytes,
        batch=B, output_len=G,
    )
