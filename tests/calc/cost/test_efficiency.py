"""The efficiency model's shape, engine presets, and the published-accuracy harness."""

import csv
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from calc import SpecError, load_hardware, load_model
from calc.accuracy.harness import PUBLISHED, half_of, load_rows, predict, stats
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


def test_rows_load_and_split_deterministically():
    rows, skipped = load_rows()
    assert len(rows) + len(skipped) >= 100
    assert {r.metric for r in rows} >= {"decode_tokens_per_s", "prefill_tokens_per_s", "ttft_s", "output_tokens_per_s"}
    assert len({r.hardware for r in rows}) >= 5 and len({r.engine for r in rows}) >= 2
    assert all(r.half == half_of(r.id) for r in rows)
    assert 0.35 < sum(r.half == "fit" for r in rows) / len(rows) < 0.65


def test_a_batch1_decode_row_by_hand():
    # llama.cpp, Llama-3-8B F16 on an RTX 4090, tg512: 512 tokens from an empty context
    [row] = [r for r in load_rows()[0] if r.id == "xd-rtx-4090-8b-f16-tg512"]
    est = estimate(load_model("llama-3-8b"), load_hardware("rtx-4090"), 1, 1, 512, Setup.of(weight_dtype="fp16", kv_dtype="fp16", ideal=True))
    assert predict(row, None) == pytest.approx(1 / float(est.tpot_s))
    # the ideal roofline reads every weight but the embedding table (one row of it) per token:
    # (8,030,261,248 - 128,256 x 4,096) x 2 B = 15.01 GB at 1.008 TB/s, ~67 tokens/s at most
    weights = (8_030_261_248 - 128_256 * 4_096) * 2
    assert 0.97 * 1.008e12 / weights < predict(row, None) < 1.008e12 / weights


def test_held_out_accuracy_with_the_committed_presets_and_report_is_current():
    rows, _ = load_rows()
    presets = engines()
    held = [r for r in rows if r.half == "held-out"]
    default = {r.id: predict(r, presets[r.preset]) for r in held}
    ideal = {r.id: predict(r, None) for r in held}
    d = stats([default[r.id] / r.value - 1 for r in held])
    i = stats([ideal[r.id] / r.value - 1 for r in held])
    print(f"held-out median |error|: presets {d['median']:.1%} (p90 {d['p90']:.1%}), ideal {i['median']:.1%}")
    assert d["median"] <= 0.25 < i["median"]
    # reports/accuracy/predictions.csv was written with these presets
    committed = {r["id"]: float(r["default"]) for r in csv.DictReader(open(PUBLISHED.parent / "predictions.csv"))}
    for rid, value in default.items():
        assert math.isclose(committed[rid], value, rel_tol=1e-6), rid


def test_hf_preset_computes_logits_for_every_prompt_position(setup):
    m, hw, _, _ = setup
    T = 300
    hf = estimate(m, hw.with_engine("hf"), 2, T, 8)
    vllm = estimate(m, hw.with_engine("vllm"), 2, T, 8)
    head = lambda est: [t.op for t in est.prefill.ops if t.op.name == "lm_head"][0]  # noqa: E731
    assert head(hf).linear_flops == 2 * 2 * T * 4096 * 128256  # B x T rows of logits
    assert head(vllm).linear_flops == 2 * 2 * 1 * 4096 * 128256  # the last position only
