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


def test_decode_gemm_at_m1_is_memory_bound_at_the_achieved_bandwidth(setup):
    m, hw, dt, eff = setup
    preset = load_engine("default")
    t = _op(decode_cost(m, hw, np.float64(1), np.float64(512), dt, eff), "q_proj")
    assert not t.compute_bound
    # bytes: W[4096,4096] at bf16 + x[1,4096] in + y[1,4096] out; plus the small-transfer ramp
    moved = 4096 * 4096 * 2 + 4096 * 2 + 4096 * 2 + preset.memory_half_mb * 1e6
    assert t.memory_s == pytest.approx(moved / (3.35e12 * hw.efficiency.memory))
    # and M = 1 leaves the tensor cores nearly idle: compute x 1 / (1 + m_half)
    flops = 2 * 4096 * 4096
    assert t.compute_s == pytest.approx(flops / (989.4e12 * hw.efficiency.compute) * (1 + preset.gemm_m_half))


def test_long_prefill_reaches_the_fitted_compute_efficiency(setup):
    m, hw, dt, eff = setup
    T = 8192
    t = _op(prefill_cost(m, hw, np.float64(1), np.float64(T), dt, eff)[0], "mlp.gate_up_proj")
    achieved = t.op.flops / t.time_s
    ceiling = 989.4e12 * hw.efficiency.compute
    assert t.compute_bound
    # within M / (M + m_half) of the large-GEMM efficiency, less one kernel's launch
    assert achieved <= ceiling
    assert achieved >= ceiling * T / (T + load_engine("default").gemm_m_half) * 0.99


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
    r = CliRunner().invoke(app, ["estimate", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", "--engine", "tgi"])
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
