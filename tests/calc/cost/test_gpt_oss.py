"""gpt-oss-20b and gpt-oss-120b: parameters, MXFP4-expert weight bytes, sliding-window KV and
attention sinks, derived by hand from their config.json and checked against the model card.

config.json (openai/gpt-oss-20b, -120b): H 2880, Hq 64, Hkv 8, D 64, F 2880 per expert, V 201088,
k 4, W 128 on even layers (layer_types sliding first), q/k/v/o biases, router bias, expert biases,
untied embeddings; L 24, E 32 (20b) and L 36, E 128 (120b). quantization_config: mxfp4 for
everything but self_attn, router, embed_tokens and lm_head. Model card (arXiv 2508.10925,
Table 1): 20.91B total / 3.61B active, checkpoint 12.8 GiB; 116.83B / 5.13B, 60.8 GiB; its
active counts leave the embedding table out (the unembedding is in).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from calc.cli.app import app
from calc.core.units import GiB, weight_bytes_per_param
from calc.cost.dtypes import Dtypes
from calc.cost.opcost import Pass
from calc.cost.operators import SOFTMAX_FLOPS, pass_ops
from calc.cost.parallel import Parallel, sharded_weight_bytes
from calc.spec.catalog import load_model, model_catalog

V, H, Hq, Hkv, D, F, k, W = 201088, 2880, 64, 8, 64, 2880, 4, 128
ATTN_MATRICES = H * (Hq + 2 * Hkv) * D + Hq * D * H  # q, k, v, o: 26,542,080
ATTN_REST = (Hq + 2 * Hkv) * D + H + Hq  # q/k/v and o biases, one sink per query head: 8,064
EXPERT_MATRICES = 3 * H * F  # gate_up [H, 2F] + down [F, H]: 24,883,200
EXPERT_BIASES = 2 * F + H  # 8,640
MXFP4 = 0.5 + 1 / 32  # an E2M1 nibble, plus one E8M0 byte per 32 values


def counts(L: int, E: int) -> dict[str, int]:
    """Every weight once, by hand."""
    return {
        "embedding": V * H, "lm_head": V * H,  # untied
        "attention": L * (ATTN_MATRICES + ATTN_REST),
        "norms": (2 * L + 1) * H,  # input + post_attention per layer, and the final norm
        "router": L * (H * E + E),
        "experts": L * E * (EXPERT_MATRICES + EXPERT_BIASES),
    }


MODELS = [
    # name, L, E, exact total, exact active, card total, card active (embedding left out), card GiB
    ("gpt-oss-20b", 24, 32, 20_914_757_184, 4_187_440_704, 20.91e9, 3.61e9, 12.8),
    ("gpt-oss-120b", 36, 128, 116_829_156_672, 5_711_982_912, 116.83e9, 5.13e9, 60.8),
]


@pytest.mark.parametrize(("name", "L", "E", "total", "active", "card_total", "card_active", "card_gib"), MODELS)
def test_params_by_hand_match_the_card(name, L, E, total, active, card_total, card_active, card_gib):
    n = counts(L, E)
    assert sum(n.values()) == total
    unused = L * (E - k) * (EXPERT_MATRICES + EXPERT_BIASES)  # experts a token does not route to
    assert total - unused == active
    m = load_model(name)
    assert m.params_total == total and m.params_active == active
    b = m.param_breakdown()
    assert b["routed_experts"] == n["experts"] and b["router"] == n["router"] and b["attention"] == n["attention"]
    # the card rounds to 0.01B and counts active weights without the embedding table
    assert abs(total - card_total) < 0.005e9
    assert abs(active - V * H - card_active) < 0.005e9


@pytest.mark.parametrize(("name", "L", "E", "total", "active", "card_total", "card_active", "card_gib"), MODELS)
def test_checkpoint_bytes_mxfp4_experts_bf16_rest(name, L, E, total, active, card_total, card_active, card_gib):
    # Only the experts' matrices are MXFP4; their biases, attention, router, norms, sinks,
    # embedding and lm_head stay bf16 (2 bytes).
    mx = L * E * EXPERT_MATRICES
    expected = mx * MXFP4 + (total - mx) * 2
    m = load_model(name)
    assert m.default_weight_dtype == "mxfp4" and m.quantized == "experts"
    assert weight_bytes_per_param("mxfp4") == 0.53125
    assert m.weight_bytes() == expected  # 20b: 13,761,264,768 B; 120b: 65,248,815,744 B
    assert round(expected / GiB, 1) == card_gib  # 12.82 GiB and 60.77 GiB
    # the same split per GPU, as the memory and KV-budget paths count it
    dt = Dtypes.resolve(m)
    assert sharded_weight_bytes(m, dt.weight_bytes_per_param(), 2.0, Parallel()) == pytest.approx(expected, rel=1e-12)
    # bf16 everywhere: 2 bytes a weight
    assert m.weight_bytes("bf16") == 2 * total


def test_quantized_linear_would_count_attention_at_mxfp4_too():
    m = load_model("gpt-oss-20b")
    every = m.model_copy(update={"quantized": "linear"})
    L, E = 24, 32
    matrices = L * (ATTN_MATRICES + H * E + E * EXPERT_MATRICES)  # attention, router, experts
    assert every.weight_bytes() == matrices * MXFP4 + (m.params_total - matrices) * 2
    assert every.weight_bytes() < m.weight_bytes()


def test_kv_bytes_sliding_layers_cap_at_the_window():
    # 20b at 131,072 positions: 12 full layers hold every position, 12 sliding ones 128;
    # each position of a layer is K and V of 8 heads of 64 at 2 bytes = 2,048 B.
    per = 2 * Hkv * D * 2
    m = load_model("gpt-oss-20b")
    assert list(m.sliding_layers[:4]) == [True, False, True, False]
    assert m.kv_cache_bytes(131072) == 12 * 131072 * per + 12 * W * per  # 3,224,371,200 B
    assert m.kv_cache_bytes(100) == 24 * 100 * per  # under the window every layer holds all
    assert m.kv_bytes_per_token() == 24 * per  # the uncapped per-token figure `show` reports


def test_decode_step_120b_by_hand():
    # One sequence, one new token over 512 cached positions: every weight stream by hand.
    m = load_model("gpt-oss-120b")
    L, S = 36, 512
    ops = pass_ops(m, Pass(np.float64(1), np.float64(1), np.float64(S), "decode"), Dtypes.resolve(m))
    total = lambda field: sum(float(np.sum(getattr(o, field))) * o.layers for o in ops)  # noqa: E731
    experts = L * k * (EXPERT_MATRICES * MXFP4 + EXPERT_BIASES * 2)  # 4 experts a layer touched
    attention = L * (ATTN_MATRICES + ATTN_REST) * 2  # bf16 matrices, biases, sinks
    router = L * (H * 128 + 128) * 2
    lm_head, embedding_row = V * H * 2, H * 2
    norms = (2 * L + 1) * H * 2
    assert total("weight_bytes") == pytest.approx(experts + attention + router + lm_head + embedding_row + norms,
                                                  rel=1e-12)  # 5,002,907,904 B
    # KV read: 18 full layers over S + 1 positions, 18 sliding ones over W; 2,048 B a position
    assert total("kv_read_bytes") == 18 * (S + 1) * 2048 + 18 * W * 2048
    # attention FLOPs: 4 Hq D per (query, key) pair; the sinks add no pairs
    assert total("attention_flops") == 4 * Hq * D * (18 * (S + 1) + 18 * W)


def test_sinks_add_one_softmax_term_per_query_and_head():
    m = load_model("gpt-oss-20b")
    plain = m.model_copy(update={"attention": m.attention.model_copy(update={"sinks": False})})
    assert m.params_total - plain.params_total == 24 * Hq
    B, T = 2, 300
    ps = Pass(np.float64(B), np.float64(T), np.float64(0), "prefill")
    dt = Dtypes.resolve(m)

    def attn_other(model):
        return sum(float(o.other_flops) * o.layers for o in pass_ops(model, ps, dt) if o.kind == "attention")

    # B*T queries, Hq heads, 24 layers, one more score each at SOFTMAX_FLOPS
    assert attn_other(m) - attn_other(plain) == SOFTMAX_FLOPS * B * T * Hq * 24


def _estimate(*args):
    r = CliRunner().invoke(app, ["estimate", *args, "--format", "json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_estimate_20b_decode_runs_and_is_memory_bound():
    out = _estimate("--model", "gpt-oss-20b", "--hardware", "h100-sxm")
    assert out["weight_bytes"] == load_model("gpt-oss-20b").weight_bytes()
    dec = out["decode"]
    assert dec["bound"] == "memory" and dec["time_s"] > 0 and out["tpot_s"] > 0
    # a decode step reads the 4 touched experts of each layer, not all 32: far under the weights
    assert dec["bytes"] < out["weight_bytes"] / 2


def test_estimate_120b_fits_one_80gb_h100():
    out = _estimate("--model", "gpt-oss-120b", "--hardware", "h100-sxm", "--tp", "1")
    mem = out["memory"]
    assert mem["weights_bytes"] == pytest.approx(65_248_815_744)  # 60.77 GiB
    assert mem["fits"] is True and mem["total_bytes"] < mem["capacity_bytes"]
    r = CliRunner().invoke(app, ["estimate", "--model", "gpt-oss-120b", "--hardware", "h100-sxm", "--tp", "1"])
    assert r.exit_code == 0 and "fits:" in r.output


def test_mxfp4_has_its_own_block_not_the_group_size():
    # MXFP4 is 32 values per E8M0 byte whatever --group-size says; fp4 (NVFP4 spelled as fp4)
    # keeps the fp16-per-group rule.
    assert weight_bytes_per_param("mxfp4", 128) == weight_bytes_per_param("mxfp4", 16) == 0.53125
    assert weight_bytes_per_param("fp4", 128) == 0.5 + 2 / 128
    r = CliRunner().invoke(app, ["estimate", "--model", "gpt-oss-20b", "--hardware", "h100-sxm",
                                 "--group-size", "64"])
    assert r.exit_code == 2 and "--group-size" in r.output


def test_catalog_lists_both():
    assert {"gpt-oss-20b", "gpt-oss-120b"} <= set(model_catalog())


def test_biases_stay_unquantized_in_a_dense_checkpoint():
    # qwen2.5-7b (config.json): L 28, H 3584, Hq 28, Hkv 4, D 128, F 18944, q/k/v biases.
    # int4 covers the matrices only (0.5 B + one fp16 scale per 128); biases, norms and the
    # untied embedding and lm_head stay bf16.
    m = load_model("qwen2.5-7b")
    L_, H_, Hq_, Hkv_, D_, F_ = 28, 3584, 28, 4, 128, 18944
    matrices = L_ * (H_ * (Hq_ + 2 * Hkv_) * D_ + Hq_ * D_ * H_ + 3 * H_ * F_)
    assert m.quantized_params() == matrices == 6_525_288_448
    assert m.weight_bytes("int4") == matrices * (0.5 + 2 / 128) + (m.params_total - matrices) * 2


def test_quantized_experts_needs_experts():
    from calc.spec.model import ModelSpec

    dense = load_model("qwen2.5-7b").model_dump()
    with pytest.raises(ValueError, match="quantized: experts needs a moe block"):
        ModelSpec(**{**dense, "quantized": "experts"})
