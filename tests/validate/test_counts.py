"""The reference decoder's FLOPs (FlopCounterMode) and KV bytes (tensor nbytes) against the calculator."""

import pytest

torch = pytest.importorskip("torch")

from calc.spec.catalog import load_model  # noqa: E402
from calc.spec.model import ModelSpec  # noqa: E402
from validate.counts import check_counts  # noqa: E402
from validate.reference import build_decoder, reduced  # noqa: E402
from validate.timing import seed_request  # noqa: E402


def spec(**kw) -> ModelSpec:
    data = dict(name="t", num_layers=2, hidden_size=64, vocab_size=100, max_context=256, dtype="fp32",
                attention=dict(num_heads=4, num_kv_heads=2, head_dim=16),
                mlp=dict(kind="gated", intermediate_size=96))
    data.update(kw)
    return ModelSpec(**data)


GQA = spec()
MOE = spec(num_layers=3, moe=dict(num_experts=8, experts_per_token=2, expert_intermediate_size=32,
                                  num_shared_experts=1, shared_expert_gate=True, first_dense_layers=1))
MLA = spec(attention=dict(kind="mla", num_heads=4, q_lora_rank=24, kv_lora_rank=32, qk_nope_head_dim=16,
                          qk_rope_head_dim=8, v_head_dim=16))
SLIDING = spec(num_layers=4, norms_per_layer=4,
               attention=dict(num_heads=4, num_kv_heads=1, head_dim=16, sliding_window=8,
                              sliding_pattern=(True, False)))
MHA_PLAIN = spec(norm="layernorm", position_embedding="learned", tie_embeddings=True,
                 attention=dict(num_heads=4, num_kv_heads=4, head_dim=16, qkv_bias=True, o_bias=True,
                                fused_qkv=True, qk_norm=True),
                 mlp=dict(kind="plain", intermediate_size=128, bias=True, activation="gelu_pytorch_tanh"))
# gpt-oss's layout: attention sinks, q/k/v/o biases, alternating windows, biased experts and router
SINKS = spec(num_layers=2, attention=dict(num_heads=4, num_kv_heads=2, head_dim=16, qkv_bias=True, o_bias=True,
                                          sinks=True, sliding_window=8, sliding_pattern=(True, False)),
             mlp=dict(kind="gated", intermediate_size=32, bias=True),
             moe=dict(num_experts=4, experts_per_token=2, expert_intermediate_size=32, router_bias=True))


@pytest.mark.parametrize("model", [GQA, MOE, MLA, SLIDING, MHA_PLAIN, SINKS],
                         ids=["gqa", "moe", "mla", "sliding", "mha", "sinks"])
def test_flops_and_kv_match_exactly(model):
    rep = check_counts(model, "fp32", batch=2, prompt_len=20, decode_steps=2)
    assert rep.ok, "\n".join(rep.lines())
    for c in rep.flops:  # exact, not merely within the 0.1% tolerance
        assert c.calc_linear == c.counter_linear
        assert c.calc_attention == pytest.approx(c.counter_attention_visible, rel=1e-12)
    for k in rep.kv:
        assert k.measured_bytes == k.calc_bytes


def test_dense_gqa_golden_numbers():
    B, T, H, Hq, Hkv, D, F, V, L = 2, 20, 64, 4, 2, 16, 96, 100, 2
    rep = check_counts(GQA, "fp32", batch=B, prompt_len=T, decode_steps=1)
    prefill, decode = rep.flops
    per_token = 2 * H * (Hq + 2 * Hkv) * D + 2 * Hq * D * H + 2 * H * 2 * F + 2 * F * H
    assert prefill.counter_linear == L * B * T * per_token + 2 * B * H * V  # lm_head: last position only
    assert decode.counter_linear == L * B * per_token + 2 * B * H * V
    # causal prefill: the math backend multiplies T x T, we count T(T+1)/2 pairs
    assert prefill.counter_attention_computed == L * 4 * B * Hq * D * T * T
    assert prefill.calc_attention == L * 4 * B * Hq * D * T * (T + 1) / 2
    assert decode.calc_attention == L * 4 * B * Hq * D * (T + 1)  # S + 1 keys
    assert rep.kv[0].measured_bytes == 2 * L * B * Hkv * D * T * 4
    assert rep.kv[1].measured_bytes == 2 * L * B * Hkv * D * (T + 1) * 4


def test_moe_counts_only_routed_experts():
    B, T, H, Fe, k = 2, 20, 64, 32, 2
    rep = check_counts(MOE, "fp32", batch=B, prompt_len=T, decode_steps=1)
    dense = check_counts(MOE.model_copy(update={"moe": None}), "fp32", batch=B, prompt_len=T, decode_steps=1)
    assert rep.ok
    # two MoE layers replace two dense MLPs: router H*E, k routed experts, one shared expert (+gate)
    moe_layer = 2 * H * 8 + k * 3 * 2 * H * Fe + 3 * 2 * H * Fe + 2 * H * 1
    dense_layer = 3 * 2 * H * 96
    assert rep.flops[0].counter_linear - dense.flops[0].counter_linear == 2 * B * T * (moe_layer - dense_layer)


def test_sliding_window_cache_holds_w_positions():
    rep = check_counts(SLIDING, "bf16", batch=2, prompt_len=20, decode_steps=2)
    assert rep.ok
    # 2 sliding layers hold 8, 2 global layers hold every position; MQA, bf16
    assert rep.kv[1].measured_bytes == 2 * 2 * 1 * 16 * 2 * (2 * 8 + 2 * 22)


def test_layers_option_keeps_widths():
    full = load_model("llama-3.1-8b")
    two = reduced(full, 2)
    assert two.num_layers == 2 and two.hidden_size == full.hidden_size
    assert two.params_total < full.params_total
    with pytest.raises(ValueError):
        reduced(MOE, 1)  # first_dense_layers must stay below num_layers: re-validated


def test_seed_experiment_shapes():
    seed = load_model("tiny-decoder")
    model = build_decoder(seed, 143, "fp32")
    model.setup(2, torch.float32, "cpu")
    got = seed_request(model, 2, 128, 16, seed.vocab_size, "cpu", warmup=1)
    assert got["generated_shape"] == [2, 16]
    assert got["kv_shape"] == [2, 2, 143, 64]
    assert got["steps"] == 15
