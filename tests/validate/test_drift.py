"""The device's speed checked before and after the held-out passes, and the warning when it moved
by more than report.DRIFT."""

import pytest

pytest.importorskip("torch")

from validate.probes import Speed, speed_check  # noqa: E402
from validate.report import DRIFT, drift_lines  # noqa: E402
from validate.runner import Run  # noqa: E402


def test_speed_against_is_the_ratio_of_the_reference_times_to_these():
    ref = Speed(matmul_s=2e-3, read_s=8e-3)
    assert Speed(4e-3, 8e-3).against(ref) == pytest.approx((0.5, 1.0))  # matmuls half as fast
    assert Speed(2e-3, 4e-3).against(ref) == pytest.approx((1.0, 2.0))


def test_speed_check_times_both_kernels():
    s = speed_check("cpu")
    assert 0 < s.matmul_s < 1 and 0 < s.read_s < 1


def test_drift_lines_warn_only_beyond_the_threshold():
    run = Run.__new__(Run)
    run.speed = [("before the passes", Speed(1e-3, 1e-2))]
    assert drift_lines(run) == []  # one check: nothing to compare
    run.speed.append(("after the passes", Speed(1e-3 / 0.96, 1e-2 / (1 + DRIFT / 2))))
    (line,) = drift_lines(run)
    assert line.startswith("device speed after the passes: matmul x0.96, memory x1.05")
    run.speed[-1] = ("after the passes", Speed(1e-3 / 0.8, 1e-2 / 0.9))
    line, warn = drift_lines(run)
    assert warn.startswith("warning: the device's speed changed by 20% while the passes ran")
