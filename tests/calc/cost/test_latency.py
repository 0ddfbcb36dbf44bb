"""Request model: TTFT, TPOT over the G-1 steps, e2e, memory, input errors, monotonicity."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calc import SpecError, load_hardware, load_model
from calc.cost.dtypes import Dtypes
from calc.cost.efficiency import Efficiency
from calc.cost.latency import decode_cost, estimate, tpot_nodes
from calc.cost.setup import Setup
from calc.spec.model import ModelSpec


@pytest.fixture(scope="module")
def llama8b():
    return load_model("llama-3.1-8b")


@pytest.fixture(scope="module")
def h100():
    return load_hardware("h100-sxm")


def _brute_tpot(model, hw, B, T, G, ideal=False):
    dt, eff = Dtypes.resolve(model), Efficiency.of(hw, ideal)
    return np.mean([float(decode_cost(model, hw, B, S, dt, eff).time_s) for S in range(T, T + G - 1)])


@pytest.mark.parametrize("B,T,G", [(1, 1024, 200), (64, 100, 3000), (8, 10, 3), (512, 2000, 500), (1, 5, 2)])
def test_tpot_is_the_mean_over_every_decode_step(llama8b, h100, B, T, G):
    est = estimate(llama8b, h100, B, T, G)
    assert est.tpot_s == pytest.approx(_brute_tpot(llama8b, h100, B, T, G), rel=1e-3)


def test_tpot_through_a_sliding_window_knee(h100):
    # A window of 64 makes the step time flat after S + 1 = 64: a kink inside the range.
    m = ModelSpec(name="w", num_layers=2, hidden_size=256, vocab_size=1000, max_context=4096,
                  attention={"num_heads": 4, "num_kv_heads": 1, "sliding_window": 64},
                  mlp={"kind": "gated", "intermediate_size": 512})
    est = estimate(m, h100, 4096, 20, 300, Setup.of(ideal=True))
    assert est.tpot_s == pytest.approx(_brute_tpot(m, h100, 4096, 20, 300, ideal=True), rel=5e-3)


def test_tpot_nodes_sum_over_all_integers_for_linear_f():
    s, w = tpot_nodes(np.float64(100), np.float64(1000))
    assert w.sum() == pytest.approx(1000)
    assert (w * (3 * s + 7)).sum() == pytest.approx(sum(3 * x + 7 for x in range(100, 1100)))


def test_e2e_is_ttft_plus_g_minus_1_tpot(llama8b, h100):
    est = estimate(llama8b, h100, 4, 512, 64)
    assert est.e2e_s == pytest.approx(est.ttft_s + 63 * est.tpot_s)
    assert est.output_tokens_per_s == pytest.approx(4 * 64 / est.e2e_s)
    assert est.total_tokens_per_s == pytest.approx(4 * (512 + 64) / est.e2e_s)


def test_one_output_token_has_no_decode_step(llama8b, h100):
    est = estimate(llama8b, h100, 1, 512, 1)
    assert np.isnan(est.tpot_s)
    assert est.e2e_s == est.ttft_s
    assert float(est.decode.time_s) > 0  # still describes the step at context T


def test_kv_held_at_the_end_is_t_plus_g_minus_1(h100):
    # The seed: prompt [2, 128], 16 outputs -> KV [2, 2, 143, 64] per layer (K and V).
    tiny = load_model("tiny-decoder")
    est = estimate(tiny, h100, 2, 128, 16)
    assert est.memory.kv_cache_bytes == 2 * 2 * 2 * 143 * 64 * 2  # K,V x B x Hkv x pos x D x bf16


def test_memory_fit_and_shortfall(llama8b):
    small = load_hardware("h100-sxm").model_copy(update={"memory_gb": 10.0, "memory_reported_mib": None,
                                                     "memory_cuda_mib": None})
    est = estimate(llama8b, small, 1, 512, 128)
    assert not est.memory.fits
    assert est.memory.shortfall_bytes == pytest.approx(est.memory.total_bytes - 10e9)
    assert est.memory.weights_bytes == 8030261248 * 2


@pytest.mark.parametrize("kwargs,option", [
    (dict(batch=0), "--batch"),
    (dict(prompt_len=-5), "--prompt-len"),
    (dict(output_len=0), "--output-len"),
    (dict(prompt_len=131072, output_len=2), "max context"),
    (dict(setup=Setup.of(kv_dtype="fp7")), "--kv-dtype"),
    (dict(setup=Setup.of(attention="sparse")), "--attention"),
])
def test_bad_input_is_a_spec_error(llama8b, h100, kwargs, option):
    with pytest.raises(SpecError, match=option):
        estimate(llama8b, h100, **kwargs)


def test_decode_bound_and_intensity_on_h100(llama8b, h100):
    est = estimate(llama8b, h100, 1, 512, 2)
    assert estimate(llama8b, h100, 1, 4096, 2).prefill.bound == "compute"
    # decode at B=1 moves every weight once for 2 FLOPs per weight: ~1 FLOP/byte
    # (GQA attention adds 4*Hq*D FLOPs per 2*Hkv*D*2 KV bytes = 4 FLOP/B: slightly above 1 at 4k)
    assert est.decode.bound == "memory"
    assert 0.9 < est.decode.intensity < 1.1
    assert est.prefill.bound == "compute"


def test_decode_crossover_batch_matches_weight_bytes_over_flops_per_token(llama8b, h100):
    # Ideal roofline, short context: a decode step reads the weights once (W bytes) and
    # does F = 2 * (matmul params) FLOPs per sequence. compute = B F / peak, memory = W / bw
    # (+ small KV/activation terms), so they cross at B* = W * peak / (bw * F).
    b = llama8b.param_breakdown()
    matmul_params = b["attention"] + b["mlp"] + b["lm_head"]
    W = 2 * matmul_params  # bf16; embedding rows and norms are negligible
    F = 2 * matmul_params
    B_star = W * 989.4e12 / (3.35e12 * F)  # = 295.3: the ridge point at bf16
    B = np.arange(1, 1024, dtype=float)
    est = estimate(llama8b, h100, B, 16, 2, Setup.of(ideal=True))
    crossed = B[np.argmax(est.decode.compute_bound)]
    assert est.decode.compute_bound[-1]
    # Activation traffic (each operator reads its input and writes its output, B rows of
    # them) adds bytes that grow with B, so the phase crosses later than B*, not earlier.
    assert B_star <= crossed <= 1.5 * B_star
    # One operator, derived exactly: gate_up x[B,4096] @ W[4096,28672] at bf16 is
    # compute-bound when 2*B*k*n / peak >= 2*(k*n + B*(k + n)) / bw, i.e.
    # B >= ridge / (1 - ridge * (1/k + 1/n)).
    k, n = 4096, 2 * 14336
    ridge = 989.4e12 / 3.35e12
    op_star = ridge / (1 - ridge * (1 / k + 1 / n))
    [gate_up] = [t for t in est.decode.ops if t.op.name == "mlp.gate_up_proj"]
    assert B[np.argmax(gate_up.compute_bound)] == np.ceil(op_star)


@settings(max_examples=40, deadline=None)
@given(B=st.integers(1, 256), T=st.integers(1, 60000), dT=st.integers(1, 5000))
def test_more_prompt_never_lowers_ttft(llama8b, h100, B, T, dT):
    a, b = estimate(llama8b, h100, B, [T, T + dT], 1).ttft_s
    assert b >= a


@settings(max_examples=40, deadline=None)
@given(B=st.integers(1, 512), dB=st.integers(1, 512), T=st.integers(1, 30000), G=st.integers(2, 2000))
def test_more_batch_never_lowers_tpot(llama8b, h100, B, dB, T, G):
    a, b = estimate(llama8b, h100, [B, B + dB], T, G).tpot_s
    assert b >= a


@settings(max_examples=40, deadline=None)
@given(B=st.integers(1, 512), S=st.integers(1, 60000), dS=st.integers(1, 60000))
def test_more_context_never_lowers_decode_bytes(llama8b, h100, B, S, dS):
    dt, eff = Dtypes.resolve(llama8b), Efficiency.of(h100)
    a, b = decode_cost(llama8b, h100, np.float64(B), np.array([S, S + dS], float), dt, eff).bytes
    assert b >= a
