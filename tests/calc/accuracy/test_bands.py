"""Bands from held-out residuals: quantiles, grouping and fallback, and coverage, on hand-built residual sets."""

import math

import numpy as np
import pytest

from calc.accuracy.bands import (
    Residual,
    build,
    coverage,
    held_out_check,
    per_group,
    quantile,
    residual,
    source_weights,
    weighted_quantile,
)
from calc.accuracy.rows import Row
from calc.spec.bands import Regime

DECODE = Regime("decode", "pass", "trtllm", "fp8", "hopper", "dense")


def _res(x, source="A", regime=DECODE, rate=False, rid=None):
    return Residual(rid or f"{source}{x}", source, regime, x, rate)


def test_ten_residuals_type6_quantiles_by_hand():
    # r_k = k / 10, k = 1..10. Type 6 puts the k-th smallest at k / (n + 1): the 10% point is at
    # position 11 * 0.1 = 1.1 (r_1 + 0.1 (r_2 - r_1) = 0.11), the 90% point at 11 * 0.9 = 9.9
    # (r_9 + 0.9 (r_10 - r_9) = 0.99).
    x = [k / 10 for k in range(10, 0, -1)]  # unsorted on purpose
    assert quantile(x, 0.1) == pytest.approx(0.1 + 0.1 * 0.1)
    assert quantile(x, 0.9) == pytest.approx(0.9 + 0.9 * 0.1)
    table = build([_res(v, rid=str(i)) for i, v in enumerate(x)], min_rows=10)
    band = table.groups["decode/pass/dense/trtllm/fp8/hopper"]
    assert (band.rows, band.log_lo, band.log_hi) == (10, pytest.approx(0.11), pytest.approx(0.99))
    # a time prediction of 2 s: measured = predicted / e^r, so between 2 e^-0.99 and 2 e^-0.11
    lo, hi = band.interval(2.0, rate=False)
    assert (float(lo), float(hi)) == (pytest.approx(2 * math.exp(-0.99)), pytest.approx(2 * math.exp(-0.11)))
    # a rate: r = log(measured / predicted), so between 100 e^0.11 and 100 e^0.99
    lo, hi = band.interval(100.0, rate=True)
    assert (float(lo), float(hi)) == (pytest.approx(100 * math.exp(0.11)), pytest.approx(100 * math.exp(0.99)))
    assert band.half_width(rate=True) == pytest.approx((math.exp(0.99) - math.exp(0.11)) / 2)


def test_type6_band_covers_80_percent_of_new_draws_on_average():
    # For uniform residuals the 10%/90% type-6 points of n = 20 are expected at 2.1 / 21 and 18.9 / 21:
    # expected coverage (18.9 - 2.1) / 21 = 0.8 exactly. numpy's default (type 7) sits at 1 + 19 p:
    # (18.1 - 2.9) / 21 = 0.7238 (the undercover the docs warn of).
    rng = np.random.default_rng(0)
    draws = rng.uniform(size=(4000, 20))
    lo = np.quantile(draws, 0.1, axis=1, method="weibull")
    hi = np.quantile(draws, 0.9, axis=1, method="weibull")
    assert float(np.mean(hi - lo)) == pytest.approx(0.8, abs=0.006)
    lo7, hi7 = np.quantile(draws, 0.1, axis=1), np.quantile(draws, 0.9, axis=1)
    assert float(np.mean(hi7 - lo7)) == pytest.approx((18.1 - 2.9) / 21, abs=0.006)


def test_fallback_to_the_broader_group_names_group_and_rows():
    vllm = Regime("decode", "pass", "vllm", "fp8", "hopper", "dense")
    res = [_res(k / 100, rid=f"t{k}") for k in range(20)] + [_res(0.5, regime=vllm, rid=f"v{k}") for k in range(5)]
    table = build(res, min_rows=20)
    assert "decode/pass/dense/vllm" not in table.groups  # 5 rows < 20
    found = table.lookup(vllm)
    assert found.group == "decode/pass/dense" and found.band.rows == 25  # the 20 trtllm rows and the 5 vllm ones
    assert table.lookup(DECODE).group == "decode/pass/dense/trtllm/fp8/hopper"
    assert table.lookup(DECODE).band.rows == 20
    ttft = Regime("ttft", "pass", "vllm", "fp8", "hopper", "dense")
    assert table.lookup(ttft).group == "all"  # no TTFT rows at all: the broadest group
    assert build(res[:5], min_rows=20).lookup(DECODE) is None  # not even "all" has 20 rows


def test_a_per_pass_band_falls_back_to_per_pass_rows_before_rows_under_load():
    # 20 per-pass decode rows of a MoE model at 0.00..0.19, and 30 decode rows of dense models
    # under high load at 1.0. A per-pass dense regime has no group of its own: it falls back to
    # decode/pass, the 20 per-pass rows (type 6: the 10% point at position 2.1, 0.01 + 0.1 x 0.01 =
    # 0.011; the 90% point at 18.9, 0.17 + 0.9 x 0.01 = 0.179), not to the dense rows under load
    # (decode/dense, in the order before: all 30 at 1.0).
    moe = Regime("decode", "pass", "vllm", "fp8", "hopper", "moe")
    high = Regime("decode", "high", "vllm", "fp8", "hopper", "dense")
    res = [_res(k / 100, regime=moe, rid=f"p{k}") for k in range(20)] + \
        [_res(1.0, regime=high, rid=f"h{k}") for k in range(30)]
    found = build(res, min_rows=20).lookup(DECODE)
    assert found.group == "decode/pass" and found.band.rows == 20
    assert (found.band.log_lo, found.band.log_hi) == (pytest.approx(0.011), pytest.approx(0.179))


def test_groups_run_from_specific_to_all():
    assert DECODE.groups() == ["decode/pass/dense/trtllm/fp8/hopper", "decode/pass/dense/trtllm/fp8",
                               "decode/pass/dense/trtllm", "decode/pass/dense", "decode/pass", "decode", "all"]


def test_coverage_is_measured_on_rows_held_out_of_the_band():
    # Source B: 20 residuals 0.01 .. 0.20 -> the band for A's rows is [0.021, 0.189]
    # (type 6: 2.1st and 18.9th of 20). A's rows at 0.0 and 0.2 fall outside, 0.05 and 0.1 inside: 2 of 4.
    # B's rows are checked against A's 4 residuals: fewer than 20, so no band (not counted as covered).
    b = [_res(k / 100, "B") for k in range(1, 21)]
    a = [_res(x, "A") for x in (0.0, 0.05, 0.1, 0.2)]
    checks = held_out_check(a + b, min_rows=20)
    by_source = {c.residual.id: c for c in checks}
    assert by_source["A0.05"].found.band.log_lo == pytest.approx(0.02 + 0.1 * 0.01)
    assert by_source["A0.05"].found.band.log_hi == pytest.approx(0.18 + 0.9 * 0.01)
    assert [by_source[f"A{x}"].inside for x in (0.0, 0.05, 0.1, 0.2)] == [False, True, True, False]
    c = coverage(checks)
    assert (c["n"], c["banded"], c["coverage"]) == (24, 4, 0.5)
    # half-width of a time band [e^-0.189, e^-0.021] around 1: (e^-0.021 - e^-0.189) / 2
    assert c["half_width"] == pytest.approx((math.exp(-0.021) - math.exp(-0.189)) / 2)
    per = per_group(checks, lambda x: x.residual.source)
    assert per["A"]["coverage"] == 0.5 and per["B"]["banded"] == 0


def test_a_band_never_rests_on_the_rows_it_checks():
    # A's residuals are far off B's: if A's own rows leaked into A's band, they would be inside it
    a = [_res(5.0 + k / 100, "A") for k in range(20)]
    b = [_res(k / 100, "B") for k in range(20)]
    checks = held_out_check(a + b, min_rows=20)
    assert not any(c.inside for c in checks)


def test_a_rate_rows_residual_is_in_time_orientation():
    row = Row(id="r", publisher="P", engine="vllm", preset="vllm", model="llama-3.1-8b", hardware="h100-sxm",
              weight_dtype="fp8", kv_dtype="fp8", compute_dtype="fp8", gpus=1, tp=1, pp=1, batch=None,
              concurrency=64, prompt_len=1, output_len=1, metric="output_tokens_per_s", value=100.0)
    r = residual(row, 125.0)  # predicted faster than measured: optimistic, r < 0
    assert r.log_ratio == pytest.approx(-math.log(1.25)) and r.rate
    assert r.regime == Regime("throughput", "high", "vllm", "fp8", "hopper", "dense")
    assert residual(row, math.nan) is None


def test_a_bad_bands_out_fails_before_the_fit(tmp_path):
    from typer.testing import CliRunner

    from calc.cli.app import app

    r = CliRunner().invoke(app, ["accuracy", "--bands-out", str(tmp_path / "no" / "b.yaml"), "--out", str(tmp_path)])
    assert r.exit_code == 2 and "--bands-out" in r.output and "does not exist" in r.output


def test_weighted_quantile_by_hand():
    # Equal weights are type 6: the k-th smallest at k / (n + 1).
    x = [0.3, 0.1, 0.2, 0.4]
    assert weighted_quantile(x, [1, 1, 1, 1], 0.4) == pytest.approx(quantile(x, 0.4))
    # Weights 3, 1 on 0.0, 1.0: W = 4, n = 2, positions C_k / (W + W / n) = 3 / 6 and 4 / 6.
    # q = 0.6 lies (0.6 - 0.5) / (1 / 6) = 0.6 of the way: 0.6; below 0.5 the smallest, above 4/6 the largest.
    assert weighted_quantile([1.0, 0.0], [1, 3], 0.6) == pytest.approx(0.6)
    assert weighted_quantile([1.0, 0.0], [1, 3], 0.1) == 0.0 and weighted_quantile([1.0, 0.0], [1, 3], 0.9) == 1.0


def test_each_source_weighs_one_in_a_band():
    # A: 30 rows at 0.0; B: 10 rows at 1.0. Row-weighted, 3 of 4 rows are 0 and the 90% point is 1.0;
    # source-weighted, each source weighs 1/2: positions C_k / (W + W / n) with W = 2, n = 40 run
    # 1/30 / 2.05 ... 1 / 2.05 = 0.488 for A's rows, so the 10% point is 0.0 and the 90% point 1.0.
    # At the 40% point both agree on 0.0; at 0.6, row-weighted is 0.0, source-weighted 1.0
    # (B's first row sits at (1 + 0.1) / 2.05 = 0.537 < 0.6).
    res = [_res(0.0, "A", rid=f"a{k}") for k in range(30)] + [_res(1.0, "B", rid=f"b{k}") for k in range(10)]
    w = source_weights(res)
    assert sum(w[:30]) == pytest.approx(1.0) and sum(w[30:]) == pytest.approx(1.0)
    x = [r.log_ratio for r in res]
    assert quantile(x, 0.6) == 0.0 and weighted_quantile(x, w, 0.6) == 1.0


def test_a_group_needs_its_sources():
    res = [_res(k / 100, "A", rid=f"a{k}") for k in range(20)] + [_res(k / 100, "B", rid=f"b{k}") for k in range(20)]
    assert "decode/pass/dense/trtllm/fp8/hopper" in build(res, min_rows=20, min_sources=2).groups
    assert build(res, min_rows=20, min_sources=3).groups == {}  # two publishers only


def test_each_group_takes_its_own_calibrated_factor_by_hand():
    # Two regimes of one scale key (decode/pass), three sources each: dense rows at offsets 0, 1, 2
    # and MoE rows at offsets 0, 3, 6 (plus 0.01 .. 0.20 within). Held out, a source's rows meet
    # the band of the other two sources' rows of their own regime; each regime's factor is the 80%
    # point of its own 60 needs, and the scale key's that of all 120.
    moe = Regime("decode", "pass", "trtllm", "fp8", "hopper", "moe")
    offsets = {DECODE: (0, 1, 2), moe: (0, 3, 6)}

    def needs(regime):
        out = []
        for s, off in enumerate(offsets[regime]):
            x = [o + k / 100 for t, o in enumerate(offsets[regime]) if t != s for k in range(1, 21)]
            lo, hi = weighted_quantile(x, [1] * 40, 0.1), weighted_quantile(x, [1] * 40, 0.9)
            out += [abs(off + k / 100 - (lo + hi) / 2) / ((hi - lo) / 2) for k in range(1, 21)]
        return out

    res = [_res(o + k / 100, f"S{s}", regime=g, rid=f"{g.arch}{s}-{k}")
           for g, offs in offsets.items() for s, o in enumerate(offs) for k in range(1, 21)]
    table = build(res, min_rows=20, min_sources=2, calibrate=True)
    dense, spread = "decode/pass/dense/trtllm/fp8/hopper", "decode/pass/moe/trtllm/fp8/hopper"
    assert table.widen_groups[dense] == pytest.approx(weighted_quantile(needs(DECODE), [1] * 60, 0.8))
    assert table.widen_groups[spread] == pytest.approx(weighted_quantile(needs(moe), [1] * 60, 0.8))
    assert table.widen["decode/pass"] == pytest.approx(weighted_quantile(needs(DECODE) + needs(moe), [1] * 120, 0.8))
    # the lookup widens each band by its group's factor, not the scale key's
    stored, found = table.groups[spread], table.lookup(moe).band
    f, half = table.widen_groups[spread], (stored.log_hi - stored.log_lo) / 2
    assert found.log_hi - found.log_lo == pytest.approx(2 * f * half)
    assert table.widen_groups[spread] != pytest.approx(table.widen["decode/pass"])


def test_widening_is_calibrated_on_held_out_sources_by_hand():
    # Three sources of 20 rows each, offsets 0, 1, 2 plus 0.01 .. 0.20 within. Held out, source 0's
    # rows meet the band of sources 1 and 2 (the type-6 10% / 90% points of their 40 rows, equal
    # weights as both have 20): a row r needs |r - centre| / half-width to fall inside, and the
    # factor is the 80% point of the 60 needs (equal weights again).
    res = [_res(s + k / 100, f"S{s}", rid=f"{s}-{k}") for s in range(3) for k in range(1, 21)]
    table = build(res, min_rows=20, min_sources=2, calibrate=True)
    needs = []
    for s in range(3):
        others = [r for r in res if r.source != f"S{s}"]
        x = [r.log_ratio for r in others]
        lo, hi = weighted_quantile(x, [1] * 40, 0.1), weighted_quantile(x, [1] * 40, 0.9)
        needs += [abs(s + k / 100 - (lo + hi) / 2) / ((hi - lo) / 2) for k in range(1, 21)]
    expected = weighted_quantile(needs, [1] * 60, 0.8)
    assert table.widen["decode/pass"] == pytest.approx(expected) and table.widen["all"] == pytest.approx(expected)
    # The lookup widens about the centre; the stored band stays as built.
    stored, found = table.groups["decode/pass/dense/trtllm/fp8/hopper"], table.lookup(DECODE).band
    mid, half = (stored.log_lo + stored.log_hi) / 2, (stored.log_hi - stored.log_lo) / 2
    assert (found.log_lo, found.log_hi) == (pytest.approx(mid - expected * half), pytest.approx(mid + expected * half))
    # Held out, every source meets bands widened from the other two alone: source 0's widening comes from 1 and 2.
    checks = held_out_check(res, min_rows=20, min_sources=2, calibrate=True)
    assert len(checks) == 60 and all(c.found is not None for c in checks)
