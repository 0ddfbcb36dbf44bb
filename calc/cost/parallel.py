"""Splitting a model over GPUs: tensor (TP), pipeline (PP) and expert (EP) parallelism.

TP = N shards every matmul N ways: query heads, KV heads (replicated when
Hkv < N: each GPU then holds one), MLP width, vocab. Two all-reduces per layer
(after o_proj and after the MLP down projection) of B*n*H activations, plus one
after the vocab-parallel embedding. A ring all-reduce over N GPUs sends
2 (N-1)/N of the message from each GPU and takes 2 (N-1) latency hops.

PP = P splits the layers into P stages. One request still passes every layer
in order, plus P - 1 stage-to-stage activation transfers; with P micro-batches
in flight the pipeline emits a batch every slowest-stage time.

Collectives by algorithm (``collective_time``): where the profile has fitted ``collectives``
(calc.spec.kernels.Collectives), an all-reduce costs the fastest of one-shot, two-shot
(custom all-reduce, as TensorRT-LLM and vLLM run within a node) and NCCL's ring, or the ring
alone for engines without a custom all-reduce; all-to-all and sends get their own fixed
times and bandwidth fractions. Without them: sent bytes / link bandwidth + hops x hop latency.

EP = E' spreads the experts of each MoE layer over E' of the TP GPUs (each expert
then split TP / E' ways). Tokens travel to their experts and back: two
all-to-alls per MoE layer, each GPU sending (E'-1)/E' of its routed activations.
``imbalance`` (>= 1) is the busiest GPU's routed load over the mean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from calc.core.errors import SpecError
from calc.core.units import MICRO
from calc.spec.hardware import HardwareSpec
from calc.spec.kernels import Collectives
from calc.spec.model import ModelSpec


@dataclass(frozen=True)
class Parallel:
    tp: int = 1
    pp: int = 1
    ep: int = 1
    imbalance: float = 1.0

    @property
    def gpus(self) -> int:
        """GPUs per replica: TP x PP (EP reuses the TP GPUs)."""
        return self.tp * self.pp

    @property
    def expert_tp(self) -> int:
        """Ways each expert's width is split: TP / EP."""
        return self.tp // self.ep


SINGLE = Parallel()  # one GPU, no split (frozen: safe as a default argument)


def check(model: ModelSpec, par: Parallel) -> Parallel:
    """Validate a split against a model; errors name the option."""
    a = model.attention
    for opt, v in (("--tp", par.tp), ("--pp", par.pp), ("--ep", par.ep)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise SpecError(opt, None, f"must be a whole number >= 1, got {v!r}")
    if a.num_heads % par.tp:
        raise SpecError("tp", None, f"{par.tp} does not divide {model.name}'s {a.num_heads} query heads")
    if a.kind == "standard" and a.num_kv_heads % par.tp and par.tp % a.num_kv_heads:
        raise SpecError("tp", None, f"{par.tp} neither divides nor is a multiple of the "
                                      f"{a.num_kv_heads} KV heads")
    if par.pp > model.num_layers:
        raise SpecError("pp", None, f"{par.pp} stages exceed {model.name}'s {model.num_layers} layers")
    if par.ep > 1:
        if model.moe is None:
            raise SpecError("ep", None, f"expert parallelism needs an MoE model; {model.name} is dense")
        if par.tp % par.ep:
            raise SpecError("ep", None, f"{par.ep} must divide tp {par.tp} (experts spread over the TP GPUs)")
        if model.moe.num_experts % par.ep:
            raise SpecError("ep", None, f"{par.ep} does not divide the {model.moe.num_experts} experts")
    if par.imbalance < 1:
        raise SpecError("imbalance", None, f"must be >= 1 (busiest GPU over mean), got {par.imbalance}")
    return par


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> int:
    """Hkv / TP, or 1 when TP exceeds Hkv (each GPU then keeps a replica of one KV head)."""
    return max(model.attention.num_kv_heads // tp, 1)


@dataclass(frozen=True)
class Link:
    """The scale-up link a split communicates over: bytes/s per direction, seconds per hop,
    and the profile's fitted collective costs (None: bytes / bandwidth + hops x hop)."""

    bandwidth_bytes_per_s: float = math.inf
    hop_s: float = 0.0
    collectives: Collectives | None = None


NO_LINK = Link()


def link(hw: HardwareSpec, par: Parallel) -> Link:
    """The scale-up link of ``hw``; needed only when split."""
    if par.tp == 1 and par.pp == 1:
        return NO_LINK
    if hw.interconnect is not None:
        return Link(hw.interconnect.bandwidth_bytes_per_s, hw.interconnect.latency_s,
                    hw.collectives)
    if hw.pcie is not None:
        return Link(hw.pcie.bandwidth_bytes_per_s, hw.pcie.latency_s, hw.collectives)
    raise SpecError(hw.name, "interconnect", "missing: a multi-GPU split needs the link bandwidth")


def collective_time(kind: str, message_bytes, n: int, sent_bytes, hops: float, link: Link,
                    custom_allreduce: bool = True, algorithm: str | None = None) -> np.ndarray:
    """Seconds for one collective of ``kind`` (allreduce, all_to_all, send, gather) over n GPUs.

    Fitted (link.collectives, c; BW the link bandwidth, M the message):
      allreduce  min(c.one_shot + (n-1) M / (BW c.custom_fraction),
                     c.two_shot + 2 (n-1)/n M / (BW c.custom_fraction),   (custom; else ring only)
                     c.ring + 2 (n-1) c.ring_hop + 2 (n-1)/n M / (BW c.ring_fraction))
      all_to_all c.all_to_all + (n-1)/n M / (BW c.all_to_all_fraction)
      send       c.send + M / (BW c.send_fraction)
      gather     c.send + sent / (BW c.send_fraction)      (n-1 sends to one GPU)
    Otherwise: sent / BW + hops x hop latency. ``algorithm`` (one_shot, two_shot, ring) fixes
    the all-reduce's algorithm instead of taking the fastest."""
    bw, c = link.bandwidth_bytes_per_s, link.collectives
    sent = np.asarray(sent_bytes, float)
    if c is None or not kind:
        return sent / bw + hops * link.hop_s
    m = np.asarray(message_bytes, float)
    if kind == "allreduce":
        algos = allreduce_times(m, n, link, custom_allreduce)
        return algos[algorithm] if algorithm else np.minimum.reduce(list(algos.values()))
    if kind == "all_to_all":
        return c.all_to_all_us * MICRO + (n - 1) / n * m / (bw * c.all_to_all_fraction)
    if kind == "send":
        return c.send_us * MICRO + m / (bw * c.send_fraction)
    return c.send_us * MICRO + sent / (bw * c.send_fraction)


def allreduce_times(message_bytes, n: int, link: Link, custom_allreduce: bool = True) -> dict:
    """Seconds of each all-reduce algorithm the engine has, by name (link.collectives fitted)."""
    c, bw, m = link.collectives, link.bandwidth_bytes_per_s, np.asarray(message_bytes, float)
    out = {"ring": (c.ring_us + 2 * (n - 1) * c.ring_hop_us) * MICRO + 2 * (n - 1) / n * m / (bw * c.ring_fraction)}
    if custom_allreduce:
        out["one_shot"] = c.one_shot_us * MICRO + (n - 1) * m / (bw * c.custom_fraction)
        out["two_shot"] = c.two_shot_us * MICRO + 2 * (n - 1) / n * m / (bw * c.custom_fraction)
    return out


def fastest_allreduce(message_bytes, n: int, link: Link, custom_allreduce: bool = True) -> str:
    """The name of the fastest all-reduce for one message size."""
    algos = allreduce_times(float(message_bytes), n, link, custom_allreduce)
    return min(algos, key=lambda k: float(algos[k]))


def ring_allreduce(message_bytes, n: int) -> tuple[np.ndarray, float]:
    """(bytes each GPU sends, latency hops) of a ring all-reduce: 2 (n-1)/n * M, 2 (n-1)."""
    return 2.0 * (n - 1) / n * np.asarray(message_bytes, float), 2.0 * (n - 1)


def all_to_all(per_gpu_bytes, n: int) -> tuple[np.ndarray, float]:
    """(bytes each GPU sends, hops): (n-1)/n of its data leaves; n-1 peers."""
    return (n - 1) / n * np.asarray(per_gpu_bytes, float), float(n - 1)


def sharded_weight_bytes(model: ModelSpec, weight_bytes_per_param: float, base_bytes: float,
                         par: Parallel, attention_tp: int | None = None) -> float:
    """Weights held by the busiest GPU: its stage's layers (ceil(L / PP)) sharded by TP,
    plus the vocab-parallel embedding and lm_head (V*H / TP each, on the first and last
    stage; both on one GPU when PP = 1). Replicated pieces: norms, MoE routers, MLA's
    down projections, and K/V projections when TP > Hkv. The weights the checkpoint
    quantises (ModelSpec.quantized_params: matmul matrices, or the experts' alone) take
    ``weight_bytes_per_param``; biases, norms, sinks and the rest take ``base_bytes``.
    ``attention_tp``: the TP degree of the attention, embedding and lm_head where it is not the
    MLPs' (1 under data-parallel attention: every rank holds them whole)."""
    a, H, mlp_tp = model.attention, model.hidden_size, par.tp
    tp = par.tp if attention_tp is None else attention_tp  # the attention's and the vocab's
    if a.kind == "mla":
        rq, rkv, dn, dr, dv, Hq = (a.q_lora_rank, a.kv_lora_rank, a.qk_nope_head_dim, a.qk_rope_head_dim,
                                   a.v_head_dim, a.num_heads)
        q = H * Hq * (dn + dr) / tp if rq is None else H * rq + rq * Hq * (dn + dr) / tp
        attn = q + H * (rkv + dr) + rkv * Hq * (dn + dv) / tp + Hq * dv * H / tp
        attn_rest = (rq or 0) + rkv + (Hq / tp if a.sinks else 0)  # latent norms replicated
    else:
        kv = 2 * H * a.num_kv_heads * a.head_dim
        attn = (model.attention_matrix_params() - kv) / tp + kv * kv_heads_per_gpu(model, tp) / a.num_kv_heads
        attn_rest = (model.attention_params() - model.attention_matrix_params()) / tp
    moe_layers = model.moe_layers
    n_moe = int(moe_layers.sum())
    dense = model.mlp_matrix_params() / mlp_tp
    dense_rest = (model.mlp_params() - model.mlp_matrix_params()) / mlp_tp
    moe = moe_rest = router = 0.0
    if model.moe is not None:
        m = model.moe
        b = model.param_breakdown()
        experts = (m.num_experts * model.mlp_matrix_params(m.expert_intermediate_size)
                   + m.num_shared_experts * model.mlp_matrix_params(m.shared_intermediate))
        gate = H if m.shared_expert_gate else 0  # a matmul, counted in shared_experts
        experts_bias = (b["routed_experts"] + b["shared_experts"]) / n_moe - experts - gate
        router = H * m.num_experts + gate  # replicated matrices
        moe = experts / mlp_tp
        moe_rest = experts_bias / mlp_tp + b["router"] / n_moe - H * m.num_experts  # + the router's bias
    if model.quantized == "experts":  # attention, router and dense MLPs stay unquantized
        attn_rest, attn = attn_rest + attn, 0.0
        dense_rest, dense = dense_rest + dense, 0.0
        moe_rest += router
    else:
        moe += router
    quant = attn + np.where(moe_layers, moe, dense)
    rest = attn_rest + np.where(moe_layers, moe_rest, dense_rest)
    per_layer = quant * weight_bytes_per_param + rest * base_bytes
    norms = model.norms_per_layer * model.norm_params() if model.norm != "none" else 0
    stage_layers = math.ceil(model.num_layers / par.pp)
    # the heaviest stage: the most expensive run of stage_layers consecutive layers
    cums = np.concatenate([[0.0], np.cumsum(per_layer)])
    heaviest = max(cums[i + stage_layers] - cums[i] for i in range(0, model.num_layers - stage_layers + 1))
    vocab = model.vocab_size * H / tp
    ends = vocab * (1 if model.tie_embeddings or par.pp > 1 else 2)
    ends += model.param_breakdown()["position_embedding"] + (model.norm_params() if model.norm != "none" else 0)
    return float(heaviest + (stage_layers * norms + ends) * base_bytes)
