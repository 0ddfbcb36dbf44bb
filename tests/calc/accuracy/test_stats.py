"""Median, p90 and bias on hand-made numbers."""

import math

import pytest

from calc.accuracy.stats import bias, error, stats, time_ratio


def test_median_and_p90_of_absolute_errors():
    s = stats([0.1, -0.2, 0.3, -0.4, 0.5, float("nan")])
    assert s["n"] == 5
    assert s["median"] == pytest.approx(0.3)
    # p90 by linear interpolation: rank 0.9 x (5 - 1) = 3.6 -> 0.4 + 0.6 x (0.5 - 0.4)
    assert s["p90"] == pytest.approx(0.46)
    assert stats([])["n"] == 0 and math.isnan(stats([])["median"])


def test_error_and_bias_in_time():
    assert error(110.0, 100.0) == pytest.approx(0.10)
    # a rate predicted 50 tok/s where 40 was measured: predicted time is 40/50 of measured
    assert time_ratio(50.0, 40.0, "decode_tokens_per_s") == pytest.approx(0.8)
    assert time_ratio(0.05, 0.04, "ttft_s") == pytest.approx(1.25)
    assert bias([0.8, 1.0, 1.3, float("inf"), -1.0]) == pytest.approx(1.0)
    assert bias([0.9, 1.1]) == pytest.approx(1.0)
    assert math.isnan(bias([]))
