"""The efficiency model's shape and the engine presets (the accuracy harness: tests/calc/accuracy/)."""


import numpy as np
import pytest
from typer.testing import CliRunner

from calc import SpecError, load_hardware, load_model
from calc.cli.app import app
from calc.cost.dtypes import Dtypes
from calc.cost.efficiency import Efficiency
from calc.cost.latency import decode_cost, estimate, prefill_cost
from calc.cost.setup import Setup
from calc.spec.engine import engines, load_engine


@pytest.fixture(scope="module")
def setup():
    m, hw = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    return m, hw, Dtypes.resolve(m), Efficiency.of(hw.with_engine("default"))


def _op(cost, name):
    [t] = [t for t in cost.ops if t.op.name == name]
    return t


def _without_curves(hw):
    """The profile as it was before measured kernel curves (the analytical model)."""
    return hw.model_copy(update={"efficiency": hw.efficiency.model_copy(update={"kernels": None})})


def test_decode_gemm_at_m1_is_memory_bound_at_the_achieved_bandwidth(setup):
    m, hw, dt, _ = setup
    hw = _without_curves(hw)
    eff = Efficiency.of(hw)
    preset = load_engine("default")
    t = _op(decode_cost(m, hw, np.float64(1), np.float64(512), dt, eff), "q_proj")
    assert not t.compute_bound
    # bytes: W[4096,4096] at bf16 + x[1,4096] in + y[1,4096] out; plus the small-transfer ramp
    moved = 4096 * 4096 * 2 + 4096 * 2 + 4096 * 2 + preset.memory_half_mb * 1e6
    assert t.memory_s == pytest.approx(moved / (3.35e12 * hw.efficiency.memory))
    # and M = 1 leaves the tensor cores nearly idle: compute x 1 / (1 + m_half)
    flops = 2 * 4096 * 4096
    assert t.compute_s == pytest.approx(flops / (989.4e12 * hw.efficiency.compute) * (1 + preset.gemm_m_half))


def test_decode_gemm_from_the_measured_curve(setup):
    m, hw, dt, eff = setup
    g = hw.efficiency.kernels.gemm["bf16"]
    t = _op(decode_cost(m, hw, np.float64(1), np.float64(512), dt, eff), "q_proj")
    # memory: (W[4096,4096] + x + y) at bf16 over the curve's bandwidth fraction
    assert t.memory_s == pytest.approx((4096 * 4096 * 2 + 2 * 4096 * 2) / (3.35e12 * g.memory))
    # compute: 2MNK / (peak * c * M/(M+m_half) * N/(N+n_half) * K/(K+k_half)) with M=1, N=K=4096
    f = 1 / (1 + g.m_half) * 4096 / (4096 + g.n_half) * 4096 / (4096 + g.k_half)
    assert t.compute_s == pytest.approx(2 * 4096 * 4096 / (989.4e12 * g.compute * f))
    # the curve's fixed time, once per kernel; the default preset adds no launch time over it
    assert t.overhead_s == pytest.approx(g.fixed_us * 1e-6)
    assert g.compute <= 1 and g.memory <= 1


def test_fused_engines_launch_fewer_kernels_than_eager(setup):
    m, hw, dt, _ = setup
    counts = {}
    for name in ("vllm", "trtllm", "hf"):
        eff = Efficiency.of(hw.with_engine(name))
        ops = decode_cost(m, hw, np.float64(1), np.float64(512), dt, eff).ops
        per_layer = [t for t in ops if t.op.layers in (32, 64) and t.op.kind != "comm"]
        counts[name] = sum(eff.kernels_of(t.op) * t.op.layers for t in per_layer) / 32
    # vllm: 2 norms + qkv + rope + (cache write + attention) + o + gate_up + act + down = 10
    assert counts["vllm"] == 10
    # trtllm also folds RoPE into the attention op's preprocessing kernel: 9
    assert counts["trtllm"] == 9
    # eager HF: 2 x 8 (RMSNorm) + 3 (q, k, v) + 10 (RoPE) + 7 (attention) + o + gate_up + 2 (act) + down
    # + 2 residual adds = 43
    assert counts["hf"] == 43


def test_long_prefill_reaches_the_fitted_compute_efficiency(setup):
    m, hw, dt, eff = setup
    T = 8192
    t = _op(prefill_cost(m, hw, np.float64(1), np.float64(T), dt, eff)[0], "mlp.gate_up_proj")
    achieved = t.op.flops / t.time_s
    g = hw.efficiency.kernels.gemm["bf16"]
    ceiling = 989.4e12 * g.compute
    assert t.compute_bound
    # within the M, N, K ramps of the large-GEMM efficiency, less one kernel's fixed time
    f = T / (T + g.m_half) * 28672 / (28672 + g.n_half) * 4096 / (4096 + g.k_half)
    assert achieved <= ceiling
    assert achieved >= ceiling * f * 0.99


def test_ideal_engine_is_the_pure_roofline(setup):
    m, hw, _, _ = setup
    a = estimate(m, hw.with_engine("ideal"), 4, 1000, 50)
    b = estimate(m, hw, 4, 1000, 50, Setup.of(ideal=True))
    assert float(a.ttft_s) == pytest.approx(float(b.ttft_s)) and float(a.tpot_s) == pytest.approx(float(b.tpot_s))
    assert float(estimate(m, hw, 4, 1000, 50).tpot_s) > float(b.tpot_s)


def test_presets_load_state_sources_and_differ(setup):
    m, hw, _, _ = setup
    presets = engines()
    assert {"ideal", "default", "vllm", "sglang", "trtllm", "llama.cpp", "hf"} <= set(presets)
    for p in presets.values():
        assert p.description and (p.ideal or p.sources)
    assert load_engine("hf").attention_kernel == "unfused"
    hf = estimate(m, hw.with_engine("hf"), 1, 512, 64)
    trt = estimate(m, hw.with_engine("trtllm"), 1, 512, 64)
    assert hf.attention == "unfused" and float(hf.tpot_s) > float(trt.tpot_s)


def test_unknown_engine():
    with pytest.raises(SpecError, match="did you mean vllm"):
        load_engine("vlm")
    r = CliRunner().invoke(app, ["estimate", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", "--engine", "deepspeed-mii"])
    assert r.exit_code == 2 and "unknown engine" in r.output
    r = CliRunner().invoke(app, ["engines"])
    assert r.exit_code == 0 and "llama.cpp" in r.output


def test_hf_preset_computes_logits_for_every_prompt_position(setup):
    m, hw, _, _ = setup
    T = 300
    hf = estimate(m, hw.with_engine("hf"), 2, T, 8)
    vllm = estimate(m, hw.with_engine("vllm"), 2, T, 8)
    head = lambda est: [t.op for t in est.prefill.ops if t.op.name == "lm_head"][0]  # noqa: E731
    assert head(hf).linear_flops == 2 * 2 * T * 4096 * 128256  # B x T rows of logits
    assert head(vllm).linear_flops == 2 * 2 * 1 * 4096 * 128256  # the last position only


def test_decode_attention_from_the_measured_curve(setup):
    m, hw, dt, eff = setup
    d = hw.efficiency.kernels.decode_attention
    B, S = 8, 4096
    t = _op(decode_cost(m, hw, np.float64(B), np.float64(S), dt, eff), "attention")
    # Llama-3.1-8B: 8 KV heads x 128 x (K, V) x bf16 per position; the step reads S + 1 positions
    kv_read = B * (S + 1) * 8 * 128 * 2 * 2
    kv_write = B * 8 * 128 * 2 * 2
    act = B * (32 * 128 + 2 * 8 * 128) * 2 + B * 32 * 128 * 2  # q, k, v in; out
    assert t.memory_s == pytest.approx((kv_read + kv_write + act) / (3.35e12 * d.memory))
    # fixed: the kernel's own plus a per-sequence share; the default preset adds no launch time
    assert t.overhead_s == pytest.approx((d.fixed_us + B * d.per_sequence_us) * 1e-6)
    assert not t.compute_bound


def test_prefill_attention_ramps_with_prompt_length(setup):
    m, hw, dt, eff = setup
    p = hw.efficiency.kernels.prefill_attention
    T = 2048
    t = _op(prefill_cost(m, hw, np.float64(1), np.float64(T), dt, eff)[0], "attention")
    pairs = T * (T + 1) / 2
    flops = 4 * 32 * 128 * pairs + 5 * 32 * pairs  # QK^T and PV; softmax counted as "other"
    assert t.compute_s == pytest.approx(flops / (989.4e12 * p.compute * T / (T + p.tokens_half)))
    assert t.compute_bound


def test_engines_with_their_own_kernels_keep_the_efficiency_model(setup):
    m, hw, dt, _ = setup
    eff = Efficiency.of(hw.with_engine("llama.cpp"))
    assert eff.curves is None  # llama.cpp's GGUF kernels are not the measured cuBLAS/FlashAttention ones
    preset = load_engine("llama.cpp")
    t = _op(decode_cost(m, hw, np.float64(1), np.float64(512), dt, eff), "o_proj")
    # the preset's kernel set: 2 kernels for o_proj (q8_1 quantise + mat-vec, as llama.cpp counts a
    # quantised matmul), each with the small-transfer half and a launch
    assert preset.kernels["o_proj"] == 2
    moved = 4096 * 4096 * 2 + 2 * 4096 * 2 + 2 * preset.memory_half_mb * 1e6
    assert t.memory_s == pytest.approx(moved / (3.35e12 * hw.efficiency.memory * preset.memory_scale))
    assert t.overhead_s == pytest.approx(2 * preset.kernel_overhead_us * 1e-6)


def test_eager_launches_add_the_measured_launch_cost_per_kernel(setup):
    m, hw, dt, _ = setup
    eff = Efficiency.of(hw.with_engine("hf"))
    g = hw.efficiency.kernels.gemm["bf16"]
    s = hw.efficiency.kernels.stream
    ops = decode_cost(m, hw, np.float64(1), np.float64(512), dt, eff).ops
    # a GEMM: its measured fixed time plus one eager launch (8.8 us, aiconfigurator's eager - graph)
    assert _op_from(ops, "o_proj").overhead_s == pytest.approx((g.fixed_us + 8.8) * 1e-6)
    # an eager RMSNorm is 8 kernels: 8 x (stream fixed time + launch)
    assert _op_from(ops, "norms").overhead_s == pytest.approx(8 * (s.fixed_us + 8.8) * 1e-6)


def _op_from(ops, name):
    [t] = [t for t in ops if t.op.name == name]
    return t


def test_request_overhead_is_converted_once_and_read_alike():
    """One conversion of request_overhead_us (EngineSpec.request_overhead_s): the cost layer's
    efficiencies and the accuracy harness's serving time read the same seconds."""
    from calc.accuracy.predict import serving_time
    from calc.cost.efficiency import Efficiency
    from calc.spec.engine import engines

    vllm = engines()["vllm"].model_copy(update={"request_overhead_us": 6800.0})  # the fitted value moves
    ideal = engines()["ideal"]
    assert vllm.request_overhead_s == pytest.approx(0.0068, rel=1e-12)  # 6,800 us = 0.0068 s by hand
    assert ideal.request_overhead_s == 0.0  # the ideal roofline has no serving stack
    assert Efficiency().under(vllm).request_overhead_s == vllm.request_overhead_s
    assert Efficiency().under(ideal).request_overhead_s == 0.0

    class Row:
        metric = "ttft_s"
        served = True  # timed by a client through the server

    assert serving_time(Row, vllm) == vllm.request_overhead_s and serving_time(Row, ideal) == 0.0
    Row.served = False
    assert serving_time(Row, vllm) == 0.0  # an in-process benchmark passes no server
    Row.metric, Row.served = "decode_tokens_per_s", True
    assert serving_time(Row, vllm) == 0.0  # a rate measured inside the engine adds none


def test_a_profiles_per_dtype_efficiency_survives_the_engine_preset():
    """A profile's by_dtype (MI300X's fp8 GEMMs reach 0.443 of peak, its bf16 ones 0.51) stays
    under the preset the profile names: scaled by the preset's compute scale like the profile's
    own fraction, not dropped for it."""
    hw = load_hardware("mi300x")
    preset = load_engine("vllm")
    eff = Efficiency.of(hw.with_engine("vllm"))
    assert eff.for_dtype("fp8").compute == pytest.approx(0.443 * preset.compute_scale)
    assert eff.for_dtype("bf16").compute == pytest.approx(0.51 * preset.compute_scale)
    # the preset's overheads apply to the fp8 passes as to every other
    assert eff.for_dtype("fp8").kernel_overhead_s == eff.kernel_overhead_s
