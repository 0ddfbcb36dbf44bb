"""Per-layer operators of one forward pass: FLOPs and bytes per stream.

A pass appends ``n`` new tokens to each of ``B`` sequences that already hold
``p`` cached positions: prefill is (n = T, p = 0), a decode step is (n = 1, p = S).
Every quantity broadcasts over numpy arrays of B, n and p, so one call serves
one scenario or a million.

Conventions (DESIGN.md): a multiply-add is 2 FLOPs; linear FLOPs are the weight
matmuls; attention FLOPs are QK^T and PV over the (query, key) pairs a query
may see; norms, activations, RoPE, softmax, residual and bias adds are "other".
An OpCost holds the values of ONE layer (or one occurrence) and ``layers``, how
many times it runs per pass; totals multiply the two.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from calc.core.units import DTYPE_BYTES
from calc.cost.calls import KernelCall, attention_calls, expert_calls
from calc.cost.dtypes import Dtypes
from calc.cost.experts import busiest_experts
from calc.cost.opcost import OpCost, Pass, attention_pairs
from calc.cost.parallel import SINGLE, Parallel, all_to_all, kv_heads_per_gpu, ring_allreduce
from calc.spec.model import ModelSpec

_ZERO = np.float64(0.0)

# Elementwise FLOPs per element, stated once (small, but present):
RMSNORM_FLOPS = 4  # square, accumulate, scale by rsqrt, multiply by weight
LAYERNORM_FLOPS = 7  # mean, subtract, square, accumulate, scale, weight, bias
ROPE_FLOPS = 3  # x*cos + rotate(x)*sin
SOFTMAX_FLOPS = 5  # max, subtract, exp, sum, divide (per score)
SILU_MUL_FLOPS = 5  # silu(g) = g * sigmoid(g) (4), times u (1)
GELU_FLOPS = 8  # tanh approximation
RESIDUAL_FLOPS = 1


def _linear(name, layers, tokens, k_in, n_out, dt: Dtypes, bias=False, weight_params=None, kernels=1.0):
    """x[tokens, k_in] @ W[k_in, n_out]: 2*tokens*k_in*n_out FLOPs; W read once."""
    a = DTYPE_BYTES[dt.act]
    params = k_in * n_out if weight_params is None else weight_params
    return OpCost(
        name, "linear", layers,
        linear_flops=2.0 * tokens * k_in * n_out,
        other_flops=tokens * n_out if bias else _ZERO,
        weight_bytes=np.float64(params * dt.weight_bytes_per_param() + (n_out * a if bias else 0)),
        act_read_bytes=tokens * k_in * a,
        act_write_bytes=tokens * n_out * a,
        rows=np.asarray(tokens, dtype=float), in_features=float(k_in), out_features=float(n_out),
        kernels=kernels,
        calls=(KernelCall("matmul", (("M", tokens), ("K", k_in), ("N", n_out)), kernels),),
        dtypes=dt,
    )


def _elementwise(name, layers, elements_in, elements_out, flops_per_elem, dt: Dtypes, weight_elems=0.0,
                 kernels=1.0):
    a = DTYPE_BYTES[dt.act]
    return OpCost(
        name, "other", layers,
        other_flops=flops_per_elem * np.asarray(elements_out, dtype=float),
        weight_bytes=np.float64(weight_elems * a),
        act_read_bytes=np.asarray(elements_in, dtype=float) * a,
        act_write_bytes=np.asarray(elements_out, dtype=float) * a,
        kernels=kernels, peak="vector",
    )


def _norm(name, layers, tokens, width, model: ModelSpec, dt: Dtypes):
    """RMSNorm/LayerNorm over [tokens, width]: ~4 (7) FLOPs per element, read x, write y."""
    per = RMSNORM_FLOPS if model.norm == "rmsnorm" else LAYERNORM_FLOPS
    wts = width * (2 if model.norm == "layernorm" else 1)
    return _elementwise(name, layers, tokens * width, tokens * width, per, dt, weight_elems=wts)


def _attention_core(name, layers, ps: Pass, window, heads, score_dim, value_dim, kv_elems_per_pos,
                    q_elems, out_elems, dt: Dtypes, kernel: str, sinks: bool = False) -> list[OpCost]:
    """softmax(Q K^T) V over the visible pairs.

    FLOPs: 2*Hq*score_dim (QK^T) + 2*Hq*value_dim (PV) per (query, key) pair;
    softmax ~5 FLOPs per score ("other"); with ``sinks`` each query's softmax over a head
    has one more term (its learned logit: 5 FLOPs per query and head, the Hq logits read
    at the activation dtype; no QK^T or PV work, nothing cached). KV: read min(p+n, W) positions per
    sequence, write the n new ones. Fused (FlashAttention) keeps scores on chip;
    unfused writes scores and probabilities and reads them back: 4 passes of
    B*Hq*pairs elements at the activation dtype.

    A ragged step runs two kernels (Pass.part): the decode kernel over its decode tokens and
    verifications (``name``, one query row per sequence), the prefill kernel over its prompt
    chunks (``name`` + ".chunks"); each is absent (``present`` 0) when the step has none of its
    groups. The chunks' ``rows`` is the pair-weighted harmonic mean of their lengths,
    sum pairs / sum(pairs / n): a kernel curve's per-chunk ramp 1 / f(n) = 1 + half / n then
    sums exactly over chunks of different lengths.
    """
    if not ps.ragged:
        rows = ps.new if ps.phase == "prefill" else 1.0
        return [_attention_op(name, layers, ps, window, heads, score_dim, value_dim, kv_elems_per_pos, q_elems,
                              out_elems, dt, kernel, rows, np.float64(1.0), sinks)]
    out = []
    for suffix, part in (("", ps.part(False)), (".chunks", ps.part(True))):
        present = np.minimum(part.total(part.batch), 1.0)
        rows = 1.0
        if suffix:
            pairs = part.pairs(window)
            per_row = part.total(part.batch * attention_pairs(part.new, part.past, window) / part.new)
            rows = np.where(per_row > 0, pairs / np.where(per_row > 0, per_row, 1.0), 1.0)
        out.append(_attention_op(name + suffix, layers, part, window, heads, score_dim, value_dim, kv_elems_per_pos,
                                 q_elems, out_elems, dt, kernel, rows, present, sinks))
    return out


def _parts(ps: Pass) -> tuple[Pass, ...]:
    """The passes _attention_core's operators cover, in its order."""
    return (ps.part(False), ps.part(True)) if ps.ragged else (ps,)


def _attention_op(name, layers, ps: Pass, window, heads, score_dim, value_dim, kv_elems_per_pos, q_elems, out_elems,
                  dt: Dtypes, kernel: str, rows, present, sinks: bool = False) -> OpCost:
    a = DTYPE_BYTES[dt.act]
    kvb = DTYPE_BYTES[dt.kv]
    scores = heads * ps.pairs(window)
    act_r = ps.tokens * q_elems * a
    act_w = ps.tokens * out_elems * a
    kernels = 2.0  # cache write + attention kernel
    if kernel == "unfused":
        act_r = act_r + 2 * scores * a
        act_w = act_w + 2 * scores * a
        kernels = 4.0  # cache write, QK^T, softmax, PV
    return OpCost(
        name, "attention", layers,
        attention_flops=2.0 * scores * (score_dim + value_dim),
        other_flops=SOFTMAX_FLOPS * (scores + (heads * ps.tokens if sinks else 0.0)),
        weight_bytes=np.float64(heads * a if sinks else 0.0) * present,
        kv_read_bytes=ps.attended(window) * kv_elems_per_pos * kvb,
        kv_write_bytes=ps.tokens * kv_elems_per_pos * kvb,
        act_read_bytes=act_r,
        act_write_bytes=act_w,
        rows=np.asarray(rows, dtype=float),  # queries per sequence (prefill kernel); 1: the decode kernel
        sequences=ps.total(ps.batch),
        kernels=kernels, peak="attention", present=present,
    )


def standard_attention_ops(model: ModelSpec, ps: Pass, dt: Dtypes, layers: int, window, kernel: str,
                           par: Parallel, suffix: str = "") -> list[OpCost]:
    """MHA/GQA/MQA: x[B*n,H] @ Wqkv[H,(Hq+2Hkv)*D], RoPE, attention, @ Wo[Hq*D,H].
    Per GPU under TP: Hq/TP query heads and max(Hkv/TP, 1) KV heads."""
    a = model.attention
    H, D = model.hidden_size, a.head_dim
    Hq, Hkv = a.num_heads // par.tp, kv_heads_per_gpu(model, par.tp)
    tok = ps.tokens
    ops = []
    if a.fused_qkv:
        ops.append(_linear("qkv_proj" + suffix, layers, tok, H, (Hq + 2 * Hkv) * D, dt, bias=a.qkv_bias))
    else:
        ops += [
            _linear("q_proj" + suffix, layers, tok, H, Hq * D, dt, bias=a.qkv_bias),
            _linear("k_proj" + suffix, layers, tok, H, Hkv * D, dt, bias=a.qkv_bias),
            _linear("v_proj" + suffix, layers, tok, H, Hkv * D, dt, bias=a.qkv_bias),
        ]
    if a.qk_norm:
        ops.append(_norm("qk_norm" + suffix, layers, tok * (Hq + Hkv), D, model, dt))
    if model.position_embedding == "rope":
        e = tok * (Hq + Hkv) * D
        ops.append(_elementwise("rope" + suffix, layers, e, e, ROPE_FLOPS, dt))
    core = _attention_core("attention" + suffix, layers, ps, window, Hq, D, D, 2 * Hkv * D, Hq * D + 2 * Hkv * D,
                           Hq * D, dt, kernel, a.sinks)
    ops += [replace(op, calls=attention_calls(part, window, Hq, Hkv, D, chunks=i == 1))
            for i, (op, part) in enumerate(zip(core, _parts(ps), strict=True))]
    ops.append(_linear("o_proj" + suffix, layers, tok, Hq * D, H, dt, bias=a.o_bias))
    return ops


def mla_attention_ops(model: ModelSpec, ps: Pass, dt: Dtypes, layers: int, window, kernel: str,
                      par: Parallel, suffix: str = "") -> list[OpCost]:
    """DeepSeek MLA. The cache holds the latent c_kv[rkv] and the rope key k_r[dr].

    prefill: expand the attended latents through W_UKV[rkv, Hq*(dn+dv)] and run
      ordinary attention (score dim dn+dr, value dim dv).
    decode (absorbed): q_nope[Hq,dn] @ W_UK[Hq,dn,rkv] and out[Hq,rkv] @ W_UV[Hq,rkv,dv]
      once per new token; attention over latents (score dim rkv+dr, value dim rkv).
    Under TP the heads split; the down projections and the latent cache are replicated.
    """
    a = model.attention
    H, Hq = model.hidden_size, a.num_heads // par.tp
    rq, rkv, dn, dr, dv = a.q_lora_rank, a.kv_lora_rank, a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim
    tok = ps.tokens
    ops = []
    if rq is None:
        ops.append(_linear("q_proj" + suffix, layers, tok, H, Hq * (dn + dr), dt))
    else:
        ops += [
            _linear("q_a_proj" + suffix, layers, tok, H, rq, dt),
            _norm("q_a_norm" + suffix, layers, tok, rq, model, dt),
            _linear("q_b_proj" + suffix, layers, tok, rq, Hq * (dn + dr), dt),
        ]
    ops += [
        _linear("kv_a_proj" + suffix, layers, tok, H, rkv + dr, dt),
        _norm("kv_a_norm" + suffix, layers, tok, rkv, model, dt),
    ]
    e = tok * (Hq + 1) * dr
    ops.append(_elementwise("rope" + suffix, layers, e, e, ROPE_FLOPS, dt))
    latent = rkv + dr
    if ps.phase == "prefill":
        expanded = ps.attended(window)
        ops.append(_linear("kv_b_proj" + suffix, layers, expanded, rkv, Hq * (dn + dv), dt))
        # expanded K/V are activations the kernel reads back (each kernel its own groups')
        ops += [replace(op, act_read_bytes=op.act_read_bytes + part.attended(window) * Hq * (dn + dv) * DTYPE_BYTES[dt.act])
                for op, part in zip(_attention_core("attention" + suffix, layers, ps, window, Hq, dn + dr, dv, latent,
                                                    Hq * (dn + dr), Hq * dv, dt, kernel), _parts(ps), strict=True)]
    else:
        ops.append(_linear("q_absorb" + suffix, layers, tok * Hq, dn, rkv, dt, weight_params=Hq * dn * rkv))
        ops += _attention_core("attention" + suffix, layers, ps, window, Hq, rkv + dr, rkv, latent,
                               Hq * (rkv + dr), Hq * rkv, dt, kernel)
        ops.append(_linear("out_absorb" + suffix, layers, tok * Hq, rkv, dv, dt, weight_params=Hq * rkv * dv))
    ops.append(_linear("o_proj" + suffix, layers, tok, Hq * dv, H, dt))
    return ops


def mlp_ops(model: ModelSpec, tok, dt: Dtypes, layers: int, width: int, prefix: str = "mlp") -> list[OpCost]:
    """Gated: x @ W_gate_up[H,2F] -> silu(g)*u -> @ W_down[F,H]; plain: up, act, down."""
    m, H = model.mlp, model.hidden_size
    if m.kind == "gated":
        return [
            _linear(f"{prefix}.gate_up_proj", layers, tok, H, 2 * width, dt, bias=m.bias),
            _elementwise(f"{prefix}.act_mul", layers, tok * 2 * width, tok * width, SILU_MUL_FLOPS, dt),
            _linear(f"{prefix}.down_proj", layers, tok, width, H, dt, bias=m.bias),
        ]
    return [
        _linear(f"{prefix}.up_proj", layers, tok, H, width, dt, bias=m.bias),
        _elementwise(f"{prefix}.act", layers, tok * width, tok * width, GELU_FLOPS, dt),
        _linear(f"{prefix}.down_proj", layers, tok, width, H, dt, bias=m.bias),
    ]


def moe_ops(model: ModelSpec, tok, dt: Dtypes, layers: int, par: Parallel) -> list[OpCost]:
    """Router x @ W_r[H,E]; k routed experts per token; shared experts on every token.

    Routed FLOPs: 2 * tokens * k * (params of one expert). Weight bytes: only the
    experts the batch routes to, E * (1 - (1 - k/E)^tokens) of them (uniform routing).
    Per GPU under EP = E' and TP: E/E' local experts, each TP/E' ways narrower; the step waits
    for the busiest GPU, which reads the expected MOST experts any GPU holds hits for
    (calc.cost.experts.busiest_experts, ``imbalance`` applied) and gets ``imbalance`` times its
    1/E' share of the routed tokens.
    """
    m, H = model.moe, model.hidden_size
    E, k = m.num_experts, m.experts_per_token
    Fe = m.expert_intermediate_size / par.expert_tp
    a = DTYPE_BYTES[dt.act]
    expert_params = model.mlp_params(m.expert_intermediate_size) / par.expert_tp  # with biases
    matmul_params = model.mlp_matrix_params(m.expert_intermediate_size) / par.expert_tp  # multiplied (biases added)
    # matrices at the weight dtype with its scales; biases stay unquantized (ModelSpec.quantized_params)
    expert_bytes = matmul_params * dt.weight_bytes_per_param() + (expert_params - matmul_params) * DTYPE_BYTES[
        dt.unquantized(model)]
    touched = busiest_experts(E, k, par.ep, tok, par.imbalance)
    routed_tok = tok * k * par.imbalance / par.ep
    routed = OpCost(
        "moe.experts", "linear", layers,
        linear_flops=2.0 * routed_tok * matmul_params,
        # activation, weighted sum of outputs, and any bias adds
        other_flops=routed_tok * (SILU_MUL_FLOPS * Fe + H + (expert_params - matmul_params)),
        weight_bytes=touched * expert_bytes,
        act_read_bytes=routed_tok * (H + 2 * Fe) * a,
        act_write_bytes=routed_tok * (3 * Fe + H) * a,
        rows=routed_tok / np.maximum(touched, 1e-9),  # tokens per expert GEMM
        in_features=float(H), out_features=float(Fe),
        kernels=3.0,
        calls=expert_calls(model, routed_tok / np.maximum(touched, 1e-9), H, Fe, touched, a, tok * k / par.ep),
    )
    ops = [
        _linear("moe.router", layers, tok, H, E, dt.of_weights(model), bias=m.router_bias),
        _elementwise("moe.topk", layers, tok * E, tok * k, 2, dt),
        routed,
    ]
    if m.num_shared_experts:
        ops += mlp_ops(model, tok, dt, layers, m.num_shared_experts * m.shared_intermediate / par.tp, "moe.shared")
        if m.shared_expert_gate:
            ops.append(_linear("moe.shared_gate", layers, tok, H, 1, dt.of_weights(model)))
    return ops


_KEPT: dict = {}  # small passes' operators: key -> (model, ops); the oldest dropped first
KEPT_MAX, KEPT_SIZE = 512, 64  # entries; the most scenarios a kept pass has


def _array_key(a) -> tuple:
    a = np.asarray(a)
    return a.shape, a.dtype.str, a.tobytes()


def pass_ops(model: ModelSpec, ps: Pass, dt: Dtypes, attention_kernel: str = "fused",
             par: Parallel = SINGLE) -> list[OpCost]:
    """Every operator of one forward pass on one GPU, grouped by layer kind (``layers`` =
    multiplicity), with the communication a split adds (calc.cost.parallel).

    The operators depend on nothing but the arguments (no hardware, no preset), and OpCost is
    frozen: those of a small pass (up to KEPT_SIZE scenarios) are kept and handed out again (a
    new list) when the same model object, pass, dtypes, kernel and split come back, as they do
    when a fit re-times a row under other preset values."""
    if attention_kernel not in ("fused", "unfused"):
        raise ValueError(f"attention kernel must be fused or unfused, not {attention_kernel!r}")
    arrays = (ps.batch, ps.new, ps.past, ps.logits)
    if max(np.size(a) for a in arrays) > KEPT_SIZE:
        return _pass_ops(model, ps, dt, attention_kernel, par)
    key = (id(model), *map(_array_key, arrays), ps.phase, ps.ragged, ps.decode_rows, dt, attention_kernel, par)
    hit = _KEPT.get(key)
    if hit is None or hit[0] is not model:
        hit = (model, tuple(_pass_ops(model, ps, dt, attention_kernel, par)))
        if len(_KEPT) >= KEPT_MAX:
            del _KEPT[next(iter(_KEPT))]
        _KEPT[key] = hit
    return list(hit[1])


def _pass_ops(model: ModelSpec, ps: Pass, dt: Dtypes, attention_kernel: str, par: Parallel) -> list[OpCost]:
    L, H, V = model.num_layers, model.hidden_size, model.vocab_size
    tok = ps.tokens
    a = DTYPE_BYTES[dt.act]
    base = DTYPE_BYTES[dt.unquantized(model)]
    ops: list[OpCost] = [
        # Embedding lookup: 0 FLOPs; reads only the B*n rows it gathers.
        # Vocab-parallel under TP: each GPU gathers the rows in its vocab slice.
        OpCost("embedding", "other", 1, weight_bytes=tok * H * base / par.tp, act_write_bytes=tok * H * a,
               peak="vector"),
    ]
    if model.position_embedding == "learned":
        ops.append(_elementwise("position_embedding", 1, tok * H, tok * H, 1, dt))
    n_norms = model.norms_per_layer if model.norm != "none" else 0
    if n_norms:
        ops.append(_norm("norms", L * n_norms, tok, H, model, dt))
    # Attention, split by sliding vs global layers.
    # Weights outside the experts are read at the dtype the checkpoint keeps them in (Dtypes.of_weights).
    attn = mla_attention_ops if model.attention.kind == "mla" else standard_attention_ops
    adt = dt.of_weights(model)
    n_slide = int(model.sliding_layers.sum())
    if L - n_slide:
        ops += attn(model, ps, adt, L - n_slide, None, attention_kernel, par)
    if n_slide:
        ops += attn(model, ps, adt, n_slide, model.attention.sliding_window, attention_kernel, par,
                    suffix=".local" if n_slide < L else "")
    # MLP, split by dense vs MoE layers.
    n_moe = int(model.moe_layers.sum())
    if L - n_moe and model.mlp.kind != "none":
        ops += mlp_ops(model, tok, adt, L - n_moe, model.mlp.intermediate_size / par.tp)
    if n_moe:
        ops += moe_ops(model, tok, dt, n_moe, par)
    residuals = 2 if model.mlp.kind != "none" else 1
    ops.append(_elementwise("residual_add", L * residuals, 2 * tok * H, tok * H, RESIDUAL_FLOPS, dt))
    # Final norm, then logits for the last ``logits`` positions of each sequence.
    out_tok = ps.logit_rows
    if model.norm != "none":
        ops.append(_norm("final_norm", 1, out_tok, H, model, dt))
    ops.append(_linear("lm_head", 1, out_tok, H, V / par.tp, dt.unquantized_dtypes(model)))
    # Sampling: greedy argmax over the fp32 logits (the vocab slice, under TP).
    ops.append(OpCost("sample", "other", 1, other_flops=out_tok * V / par.tp,
                      act_read_bytes=out_tok * V / par.tp * 4.0, act_write_bytes=out_tok * 8.0, peak="vector"))
    return ops + comm_ops(model, ps, dt, par)


def comm_ops(model: ModelSpec, ps: Pass, dt: Dtypes, par: Parallel) -> list[OpCost]:
    """Collectives of one pass on one GPU (calc.cost.parallel): TP all-reduces of x[B*n, H] after
    attention and after the MLP in every layer and after the embedding; the gather of the
    vocab-sharded logits; EP all-to-alls (dispatch, combine) per MoE layer; PP transfers of
    x[B*n, H] between stages. TP collectives sit on the critical path (the next operator
    needs their result); PP sends overlap with other micro-batches' work."""
    L, H = model.num_layers, model.hidden_size
    a = DTYPE_BYTES[dt.act]
    message = ps.tokens * H * a
    ops: list[OpCost] = []
    if par.tp > 1:
        sent, hops = ring_allreduce(message, par.tp)
        n_moe = int(model.moe_layers.sum()) if par.ep > 1 else 0
        per_layer = 2 if model.mlp.kind != "none" else 1
        ops.append(OpCost("tp.allreduce", "comm", L * per_layer - n_moe + 1, comm_bytes=sent, comm_hops=hops,
                          collective="allreduce", message_bytes=message, group=par.tp, peak="link",
                          calls=(KernelCall("collective", (("bytes", message), ("world", par.tp)), op="all_reduce"),)))
        logits = ps.logit_rows * model.vocab_size / par.tp * 4.0
        ops.append(OpCost("tp.logits_gather", "comm", 1, comm_bytes=logits * (par.tp - 1),
                          comm_hops=float(par.tp - 1), collective="gather", message_bytes=logits, group=par.tp,
                          peak="link"))
    if par.ep > 1:
        routed = ps.tokens * model.moe.experts_per_token * H * a * par.imbalance / par.tp
        sent, hops = all_to_all(routed, par.ep)
        ops.append(OpCost("ep.all_to_all", "comm", 2 * int(model.moe_layers.sum()), comm_bytes=sent,
                          comm_hops=hops, collective="all_to_all", message_bytes=routed, group=par.ep, peak="link",
                          overlappable=True))
    if par.pp > 1:
        ops.append(OpCost("pp.send", "comm", par.pp - 1, comm_bytes=message, comm_hops=1.0, collective="send",
                          message_bytes=message, group=2, peak="link", overlappable=True))
    return ops
