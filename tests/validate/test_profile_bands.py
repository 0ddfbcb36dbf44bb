"""A calibrated profile carries the bands of its own held-out validation, and estimate uses them."""

import json
import math

import pytest
from typer.testing import CliRunner

from calc.cli.app import app
from calc.spec.catalog import load_hardware
from validate.bands import profile_bands, residuals, write_with_bands
from validate.measurements import Row
from validate.timing import Point


def _rows():
    # three held-out models, 10 decode points each at fp32: predicted 1 ms, measured 1 ms x e^(-k/100),
    # k = 0..9 + 10 i for model i, so the residuals log(p / m) = k / 100 run 0.00 .. 0.29
    out = []
    for i, model in enumerate(("llama-3.2-1b", "qwen2.5-0.5b", "llama-3.1-8b")):  # three dense held-out models
        for j in range(10):
            k = j + 10 * i
            out.append(Row(model=model, layers=1, device="cpu", threads=2, point=Point("fp32", "decode", 1, 64 + j),
                           split="held-out", status="ok", measured_s=1e-3 * math.exp(-k / 100),
                           predicted_calibrated_s=1e-3, predicted_default_s=1e-3))
    out.append(Row(model="llama-3.2-1b", layers=1, device="cpu", threads=2, point=Point("fp32", "decode", 4, 64),
                   split="held-out", status="oom"))  # not timed: no residual
    return out


def test_bands_from_held_out_points_by_hand():
    hw = load_hardware("cpu-generic-2core")
    res = residuals(_rows(), hw)
    assert len(res) == 30 and [r.log_ratio for r in res[:3]] == pytest.approx([0.0, 0.01, 0.02])
    table, cov = profile_bands(_rows(), hw)
    # 30 points in one regime: decode/pass/dense/<engine>/fp32/other holds all 30 (>= 20); type 6 quantiles
    # at 31 x 0.1 = 3.1 -> 0.02 + 0.1 x 0.01 and 31 x 0.9 = 27.9 -> 0.26 + 0.9 x 0.01
    engine = hw.preset.name if hw.preset is not None else "default"
    band = table.groups[f"decode/pass/dense/{engine}/fp32/other"]
    assert (band.rows, band.sources) == (30, 3)
    assert (band.log_lo, band.log_hi) == (pytest.approx(0.021), pytest.approx(0.269))
    # leave one model out: each model's 10 points against the other two models' 20 (type 6 at 21 x 0.1 = 2.1 and
    # 21 x 0.9 = 18.9): model 0 (0.00..0.09) against 0.10..0.29 -> band [0.111, 0.279]: 0 inside; model 1
    # (0.10..0.19) against 0.00..0.09 and 0.20..0.29 -> [0.011, 0.279]: all 10 inside; model 2 (0.20..0.29)
    # against 0.00..0.19 -> [0.011, 0.179]: 0. (No widening in these folds: inside one, the two models left
    # give 10 points each, fewer than the 20 a band needs.)
    assert cov["banded"] == 30 and cov["coverage"] == pytest.approx(10 / 30)


def test_estimate_with_the_profile_uses_its_own_bands(tmp_path):
    hw = load_hardware("cpu-generic-2core")
    table, _ = profile_bands(_rows(), hw)
    path = write_with_bands(hw, table, tmp_path / "calibrated.yaml", "test profile")
    r = CliRunner().invoke(app, ["estimate", "--model", "tiny-decoder", "--hardware", str(path), "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert "held-out validation" in d["band"]["source"]
    assert d["band"]["by_prediction"]["tpot_s"]["group"].startswith("decode/pass/dense")
    # TTFT: no prefill points, so the broadest group, all 30 decode points
    assert d["band"]["by_prediction"]["ttft_s"] == {"group": "all", "rows": 30}
    # The band [0.021, 0.269] (centre 0.145, half 0.124) is widened by the factor that covers 80% of points held
    # out by model: against the folds above a point r needs |r - centre| / half, model 0's (0.195 - r) / 0.084 and
    # model 2's (r - 0.095) / 0.084 (each of 1.25, 1.369, ..., 2.321 twice), model 1's under 0.34. Type 6 at
    # 31 x 0.8 = 24.8 lies between the 24th and 25th smallest, 0.165 / 0.084 and 0.175 / 0.084: 0.173 / 0.084.
    factor = 0.173 / 0.084
    lo, hi = 0.145 - 0.124 * factor, 0.145 + 0.124 * factor
    assert d["tpot_band_s"] == pytest.approx([d["tpot_s"] * math.exp(-hi), d["tpot_s"] * math.exp(-lo)])


def test_rows_of_reduced_models_take_their_architecture_from_the_specs_built():
    # a validation row names the model it built, at its layers (qwen3-30b-a3b@2L): not a catalog name
    from validate.measurements import resolve_spec

    spec = resolve_spec("qwen3-30b-a3b", 2)
    rows = [Row(model=spec.name, layers=2, device="cpu", threads=2, point=Point("fp32", "decode", 1, 64 + j),
                split="held-out", status="ok", measured_s=1e-3, predicted_calibrated_s=1e-3, predicted_default_s=1e-3)
            for j in range(3)]
    res = residuals(rows, load_hardware("cpu-generic-2core"), [spec])
    assert spec.name == "qwen3-30b-a3b@2L" and {r.regime.arch for r in res} == {"moe"}


def test_two_models_leave_the_coverage_unchecked_and_say_so(tmp_path):
    # two models of 10 points: 20 in all make a band, but without either model only 10 are left (< 20), so
    # no point can be checked against bands built without its model (the H200 graphs run: 2 models x 16)
    from validate.runner import Run, _bands

    hw = load_hardware("cpu-generic-2core")
    rows = [r for r in _rows() if r.model != "llama-3.1-8b"]
    table, cov = profile_bands(rows, hw)
    assert table is not None and cov["banded"] == 0
    write_with_bands(hw, table, tmp_path / "calibrated.yaml", "test profile")
    state, lines = Run(None, [], hw, hw, "cpu", 2, rows=rows), []
    _bands(state, tmp_path, lines.append)
    assert lines == [f"prediction bands written into calibrated.yaml ({len(table.groups)} groups); their coverage "
                     "is unchecked: without any one model, fewer than the 20 points a band needs are left"]
