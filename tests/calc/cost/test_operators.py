"""Operator counts against hand derivations (the arithmetic is written out here)."""

import numpy as np
import pytest

from calc import load_model
from calc.cost.dtypes import Dtypes
from calc.cost.experts import experts_touched
from calc.cost.opcost import Pass, attention_pairs, positions_attended, total
from calc.cost.operators import pass_ops
from calc.spec.model import ModelSpec


def _pass(model, B, n, p, phase, attention="fused", **dtypes):
    dt = Dtypes.resolve(model, **dtypes)
    return pass_ops(model, Pass(np.float64(B), np.float64(n), np.float64(p), phase), dt, attention)


def _op(ops, name):
    [op] = [o for o in ops if o.name == name]
    return op


@pytest.fixture(scope="module")
def llama8b():
    return load_model("llama-3.1-8b")


def test_llama8b_decode_linear_flops_are_twice_the_multiplied_weights(llama8b):
    # Llama-3.1-8B: H=4096, Hq=32, Hkv=8, D=128, F=14336, V=128256, L=32.
    H, Hq, Hkv, D, F, V, L = 4096, 32, 8, 128, 14336, 128256, 32
    q, k, v, o = H * Hq * D, H * Hkv * D, H * Hkv * D, Hq * D * H
    gate, up, down = H * F, H * F, F * H
    lm_head = H * V
    expected = 2 * (L * (q + k + v + o + gate + up + down) + lm_head)
    assert expected == 2 * (32 * (16777216 + 4194304 + 4194304 + 16777216 + 3 * 58720256) + 525336576)
    ops = _pass(llama8b, 1, 1, 1024, "decode")
    assert total(ops, "linear_flops") == expected


def test_prefill_lm_head_counts_the_last_position_only(llama8b):
    B, T = 3, 1024
    ops = _pass(llama8b, B, T, 0, "prefill")
    assert _op(ops, "lm_head").linear_flops == 2 * B * 1 * 4096 * 128256


def test_prefill_attention_flops_are_causal(llama8b):
    # 4 * Hq * D per (query, key) pair; query i sees i keys: T(T+1)/2 pairs.
    ops = _pass(llama8b, 1, 1024, 0, "prefill")
    assert total(ops, "attention_flops") == 4 * 32 * 32 * 128 * (1024 * 1025 / 2)


def test_decode_attention_sees_context_plus_one(llama8b):
    S = 777
    ops = _pass(llama8b, 2, 1, S, "decode")
    assert total(ops, "attention_flops") == 2 * 32 * 4 * 32 * 128 * (S + 1)


@pytest.mark.parametrize("n,p,W", [(10, 0, 4), (1, 100, 16), (7, 3, 5), (20, 0, None), (5, 9, 1000), (1, 3, 4)])
def test_attention_pairs_match_brute_force(n, p, W):
    brute = sum(min(p + i, W) if W else p + i for i in range(1, n + 1))
    assert attention_pairs(n, p, W) == brute
    assert positions_attended(n, p, W) == (min(p + n, W) if W else p + n)


def test_kv_stream_bytes_decode(llama8b):
    # read S+1 positions? No: the cache holds S, the new token's K/V is written (n=1) and
    # attention reads min(p+n, W) = S+1 positions: 2 * Hkv * D * 2 B each, per layer, per sequence.
    B, S = 4, 1000
    ops = _pass(llama8b, B, 1, S, "decode")
    per_pos = 2 * 8 * 128 * 2
    assert total(ops, "kv_read_bytes") == 32 * B * (S + 1) * per_pos
    assert total(ops, "kv_write_bytes") == 32 * B * 1 * per_pos


def test_unfused_attention_moves_the_score_matrix(llama8b):
    B, T = 1, 512
    fused = _op(_pass(llama8b, B, T, 0, "prefill"), "attention")
    unfused = _op(_pass(llama8b, B, T, 0, "prefill", "unfused"), "attention")
    scores = 32 * T * (T + 1) / 2  # Hq * causal pairs
    # scores written, read by softmax, probabilities written, read by PV, at 2 bytes
    assert unfused.bytes - fused.bytes == 4 * scores * 2
    assert unfused.flops == fused.flops


def test_embedding_reads_only_the_gathered_rows(llama8b):
    emb = _op(_pass(llama8b, 2, 100, 0, "prefill"), "embedding")
    assert emb.flops == 0
    assert emb.weight_bytes == 2 * 100 * 4096 * 2


def test_experts_touched_uniform_routing():
    assert experts_touched(8, 2, 1) == pytest.approx(2.0)
    assert experts_touched(256, 8, 1e6) == pytest.approx(256.0)
    # two tokens choosing 2 of 8: 8 * (1 - (6/8)^2) = 3.5
    assert experts_touched(8, 2, 2) == pytest.approx(3.5)


def _tiny_moe(**moe):
    return ModelSpec(
        name="tiny-moe", num_layers=2, hidden_size=64, vocab_size=100, max_context=256,
        attention={"num_heads": 4, "num_kv_heads": 2},
        mlp={"kind": "gated", "intermediate_size": 96},
        moe={"num_experts": 8, "experts_per_token": 2, "expert_intermediate_size": 32, **moe},
    )


def test_moe_decode_reads_only_routed_experts_and_counts_k_per_token():
    m = _tiny_moe(num_shared_experts=1)
    B = 2
    ops = _pass(m, B, 1, 10, "decode")
    experts = _op(ops, "moe.experts")
    expert_params = 3 * 64 * 32
    assert experts.linear_flops == 2 * B * 2 * expert_params
    touched = 8 * (1 - (1 - 2 / 8) ** B)
    assert experts.weight_bytes == pytest.approx(touched * expert_params * 2)
    assert _op(ops, "moe.router").linear_flops == 2 * B * 64 * 8
    assert _op(ops, "moe.shared.gate_up_proj").linear_flops == 2 * B * 64 * 2 * 32


def test_linear_decode_flops_equal_twice_active_matmul_params_for_moe():
    m = _tiny_moe(num_shared_experts=1, first_dense_layers=1)
    ops = _pass(m, 1, 1, 5, "decode")
    b = m.param_breakdown()
    expected = 2 * (m.params_active - b["embedding"] - b["norms"])
    assert total(ops, "linear_flops") == expected


@pytest.fixture(scope="module")
def mla():
    return ModelSpec(
        name="tiny-mla", num_layers=1, hidden_size=64, vocab_size=50, max_context=512,
        attention={"kind": "mla", "num_heads": 4, "q_lora_rank": 24, "kv_lora_rank": 16,
                   "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8},
        mlp={"kind": "gated", "intermediate_size": 32},
    )


def test_mla_decode_uses_the_absorbed_form(mla):
    Hq, rkv, dn, dr, dv = 4, 16, 8, 4, 8
    S, B = 99, 3
    ops = _pass(mla, B, 1, S, "decode", kv="bf16")
    att = _op(ops, "attention")
    # per pair: 2*Hq*(rkv+dr) scores + 2*Hq*rkv values
    assert att.attention_flops == B * (S + 1) * (2 * Hq * (rkv + dr) + 2 * Hq * rkv)
    # the cache holds latents: (rkv + dr) elements per position
    assert att.kv_read_bytes == B * (S + 1) * (rkv + dr) * 2
    assert _op(ops, "q_absorb").linear_flops == 2 * B * Hq * dn * rkv
    assert _op(ops, "out_absorb").linear_flops == 2 * B * Hq * rkv * dv
    # absorbed decode multiplies every attention weight once: linear = 2 * matmul params
    b = mla.param_breakdown()
    assert total(ops, "linear_flops") == 2 * B * (b["attention"] - 24 - rkv + b["mlp"] + b["lm_head"])


def test_mla_prefill_expands_latents(mla):
    Hq, dn, dr, dv, T = 4, 8, 4, 8, 50
    ops = _pass(mla, 1, T, 0, "prefill")
    assert _op(ops, "attention").attention_flops == T * (T + 1) / 2 * (2 * Hq * (dn + dr) + 2 * Hq * dv)
    assert _op(ops, "kv_b_proj").linear_flops == 2 * T * 16 * Hq * (dn + dv)


def test_int4_weights_add_group_scales(llama8b):
    # 0.5 byte per weight + one 2-byte scale per 128 weights
    q = _op(_pass(llama8b, 1, 1, 10, "decode", weight="int4"), "q_proj")
    assert q.weight_bytes == 4096 * 4096 * (0.5 + 2 / 128)


def test_fp8_weights_run_fp8_matmuls(llama8b):
    dt = Dtypes.resolve(llama8b, weight="fp8")
    assert (dt.compute, dt.act, dt.attention_compute) == ("fp8", "bf16", "bf16")
    assert Dtypes.resolve(llama8b, weight="int4").compute == "bf16"


def test_vectorized_pass_broadcasts(llama8b):
    B = np.array([1.0, 8.0, 64.0])[:, None]
    S = np.array([128.0, 4096.0])[None, :]
    ops = pass_ops(llama8b, Pass(B, np.float64(1), S, "decode"), Dtypes.resolve(llama8b))
    got = total(ops, "attention_flops")
    assert got.shape == (3, 2)
    assert got[2, 1] == 64 * 32 * 4 * 32 * 128 * 4097


def test_ragged_pass_reads_weights_once_and_sums_attention(llama8b):
    dt = Dtypes.resolve(llama8b)
    # one step: a 100-token prefill chunk after 0 cached, and three decode tokens at 500, 600, 700
    new = np.array([100.0, 1, 1, 1])
    past = np.array([0.0, 500, 600, 700])
    mixed = pass_ops(llama8b, Pass(np.ones(4), new, past, "prefill", ragged=True), dt)
    flat = pass_ops(llama8b, Pass(np.float64(1), np.float64(103), np.float64(0), "prefill"), dt)
    q_mixed, q_flat = _op(mixed, "q_proj"), _op(flat, "q_proj")
    assert q_mixed.linear_flops == q_flat.linear_flops == 2 * 103 * 4096 * 4096
    assert q_mixed.weight_bytes == 4096 * 4096 * 2
    # the decode kernel takes the three decode tokens, the prefill kernel the chunk
    dec, chunk = _op(mixed, "attention"), _op(mixed, "attention.chunks")
    assert dec.attention_flops == 4 * 32 * 128 * (501 + 601 + 701)
    assert chunk.attention_flops == 4 * 32 * 128 * (100 * 101 / 2)
    assert dec.kv_read_bytes == (501 + 601 + 701) * 2 * 8 * 128 * 2
    assert chunk.kv_read_bytes == 100 * 2 * 8 * 128 * 2
    assert dec.rows == 1 and dec.sequences == 3
    # one chunk: its rows are its length (pairs / (pairs / 100))
    assert chunk.rows == pytest.approx(100) and chunk.sequences == 1 and chunk.present == 1
    # each of the 4 sequences gets logits for its last position
    assert _op(mixed, "lm_head").linear_flops == 2 * 4 * 4096 * 128256


def test_fp32_weights_read_embeddings_and_lm_head_at_fp32(llama8b):
    # Served at fp32 every weight is fp32, as ModelSpec.weight_bytes counts (one step at B=1
    # reads every matmul weight once, plus one embedding row).
    ops = _pass(llama8b, 1, 1, 10, "decode", weight="fp32", compute="fp32")
    assert _op(ops, "lm_head").weight_bytes == 4096 * 128256 * 4
    assert _op(ops, "embedding").weight_bytes == 4096 * 4


def test_moe_expert_biases_are_not_linear_flops():
    m = ModelSpec(
        name="biased-moe", num_layers=1, hidden_size=64, vocab_size=100, max_context=64,
        attention={"num_heads": 4, "num_kv_heads": 4}, mlp={"kind": "plain", "intermediate_size": 32, "bias": True},
        moe={"num_experts": 4, "experts_per_token": 2, "expert_intermediate_size": 16},
    )
    experts = _op(_pass(m, 1, 3, 0, "prefill"), "moe.experts")
    assert experts.linear_flops == 2 * 3 * 2 * (2 * 64 * 16)  # tokens x k x 2 matrices of H x Fe


def test_accumulate_broadcasts_terms_of_other_shapes():
    from calc.cost.opcost import accumulate

    col, row = np.arange(3.0).reshape(3, 1), np.arange(3.0).reshape(1, 3)
    got = accumulate([col, row, 1.0])
    # (3,1) + (1,3) is a (3,3) table: got[i, j] = i + j + 1
    assert got.shape == (3, 3) and got.tolist() == [[1, 2, 3], [2, 3, 4], [3, 4, 5]]


def test_small_passes_keep_their_operators_and_hand_out_a_new_list(llama8b):
    import calc.cost.operators as operators

    dt = Dtypes.resolve(llama8b)
    ps = Pass(np.float64(4.0), np.float64(1.0), np.float64(512.0), "decode")
    first = pass_ops(llama8b, ps, dt)
    first.append("not an operator")  # a caller's list is its own
    again = pass_ops(llama8b, Pass(np.float64(4.0), np.float64(1.0), np.float64(512.0), "decode"), dt)
    assert again == first[:-1] and again is not first
    assert all(a is b for a, b in zip(again, first[:-1], strict=True))  # the same frozen operators
    # another context is another pass; an equal spec that is another object is not taken for it
    assert pass_ops(llama8b, Pass(np.float64(4.0), np.float64(1.0), np.float64(513.0), "decode"), dt) != again
    other = llama8b.model_copy()
    assert all(a is not b for a, b in zip(pass_ops(other, ps, dt), again, strict=True))
    # a pass of more than KEPT_SIZE scenarios is not kept: built afresh each time, equal all the same
    big = Pass(np.ones(operators.KEPT_SIZE + 1), np.float64(1.0), np.arange(operators.KEPT_SIZE + 1.0), "decode")
    a, b = pass_ops(llama8b, big, dt), pass_ops(llama8b, big, dt)
    assert all(x is not y for x, y in zip(a, b, strict=True))
    assert all(np.array_equal(x.bytes, y.bytes) for x, y in zip(a, b, strict=True))
