"""Calibration: the fit recovers known efficiencies; profiles are written atomically and load back."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from calc.cli.app import app
from calc.cost.dtypes import Dtypes
from calc.cost.efficiency import Efficiency
from calc.cost.latency import estimate
from calc.cost.roofline import op_time
from calc.cost.setup import Setup
from calc.spec.catalog import load_hardware, load_model
from validate import calibrate as cal
from validate.timing import Point


def points(dtype="fp32"):
    return [Point(dtype, ph, b, s) for ph in ("prefill", "decode") for b in (1, 2, 4, 8)
            for s in (16, 64, 256, 512)]


def test_fit_recovers_known_efficiencies():
    spec, hw = load_model("tiny-decoder"), load_hardware("cpu-generic-2core")
    pts = points()
    t = cal.terms(spec, hw, pts)
    truth = cal.Fit(0.45, 0.3, 5e-6, 150e-6, attention=0.5)
    y = cal.predict(t, truth)
    fit = cal.fit_terms(t, y, ko_prior=5e-6)  # one model: k_o and s_o collinear, k_o from the prior
    assert not fit.kernel_overhead_fitted
    assert fit.compute == pytest.approx(0.45, rel=0.02)
    assert fit.memory == pytest.approx(0.3, rel=0.02)
    assert fit.attention == pytest.approx(0.5, rel=0.02)
    assert fit.step_overhead_s == pytest.approx(150e-6, rel=0.02)
    assert np.abs(cal.predict(t, fit) / y - 1).max() < 0.01


def test_split_is_deterministic_and_holds_out_a_third():
    pts = points() + points("bf16")
    a, b = cal.split(pts), cal.split(list(reversed(pts)))
    assert a == list(reversed(b))
    assert a.count("held-out") == 4 * 5  # 16 points per (dtype, phase): the 2nd, 5th, ..., 14th
    for d in ("fp32", "bf16"):
        for ph in ("prefill", "decode"):
            mine = [s for p, s in zip(pts, a, strict=True) if (p.dtype, p.phase) == (d, ph)]
            assert mine.count("held-out") == 5


def test_efficiency_extension_is_neutral_by_default():
    hw = load_hardware("h100-sxm")
    # no preset, and the analytical model (no measured kernel curves)
    hw = hw.model_copy(update={"efficiency": hw.efficiency.model_copy(update={"engine": None, "kernels": None})})
    spec = load_model("llama-3.1-8b")
    eff = Efficiency.of(hw)
    assert eff.by_dtype == () and eff.attention == 1.0
    dt = Dtypes.resolve(spec)
    e = hw.efficiency
    for op in cal.point_ops(spec, "bf16", "decode", 8, 1024)[0]:
        if op.kind == "comm":
            continue
        t = op_time(op, hw, dt, eff)
        peak = {"matmul": hw.peak_flops_per_s(dt.compute), "attention": hw.peak_flops_per_s(dt.attention_compute),
                "vector": hw.peak_flops_per_s("fp32")}[op.peak]
        assert t.compute_s == pytest.approx(op.flops / (peak * e.compute))
        assert t.memory_s == pytest.approx(op.bytes / (hw.memory_bandwidth_bytes_per_s * e.memory))


def _calibrated(tmp_path):
    base = load_hardware("cpu-generic-2core")
    fits = {"fp32": cal.Fit(0.5, 0.4, 3e-6, 120e-6, attention=0.6),
            "bf16": cal.Fit(2.0, 0.3, 3e-6, 300e-6, attention=0.4)}  # bf16 beats the fp32 fallback peak
    hw = cal.calibrated_profile(base, fits, {"device": "cpu", "torch": "x", "date": "2026-01-01"})
    path = cal.write_profile(hw, tmp_path / "cal.yaml", "test profile")
    return base, fits, path


def test_calibrated_profile_loads_and_reproduces_the_fit(tmp_path):
    base, fits, path = _calibrated(tmp_path)
    hw = load_hardware(path)
    assert hw.calibration["device"] == "cpu"
    assert hw.peak_tflops["bf16"] == pytest.approx(0.16 * 2.0)  # raised to the achieved rate, efficiency 1
    assert hw.efficiency.by_dtype["bf16"].compute == 1.0
    spec = load_model("tiny-decoder")
    from validate.measurements import predict_point

    for d, f in fits.items():
        for p in points(d)[::5]:
            ours = predict_point(spec, hw, p)[0]
            fit = cal.predict(cal.terms(spec, base, [p]), f)[0]
            assert ours == pytest.approx(fit, rel=1e-3)
    assert [p.name for p in tmp_path.iterdir()] == ["cal.yaml"]  # no temp file left


def test_estimate_uses_the_calibrated_profile(tmp_path):
    _, fits, path = _calibrated(tmp_path)
    r = CliRunner().invoke(app, ["estimate", "-m", "tiny-decoder", "--hardware", str(path), "--compute-dtype",
                                 "fp32", "--weight-dtype", "fp32", "--kv-dtype", "fp32", "-b", "2", "-t", "128",
                                 "-g", "16", "--format", "json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert got["calibrated"] is True
    est = estimate(load_model("tiny-decoder"), load_hardware(path), 2, 128, 16, Setup.of(weight_dtype="fp32", kv_dtype="fp32", compute_dtype="fp32"))
    assert got["ttft_s"] == pytest.approx(float(est.ttft_s))
    base = estimate(load_model("tiny-decoder"), load_hardware("cpu-generic-2core"), 2, 128, 16, Setup.of(weight_dtype="fp32", kv_dtype="fp32", compute_dtype="fp32"))
    assert got["ttft_s"] > float(base.ttft_s)  # lower efficiencies and a step overhead
