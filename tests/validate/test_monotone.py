"""Kernel-table neighbour checks: a cell slower than a larger neighbour is found (by hand) and
measured again, keeping its fastest time; the provenance note says so."""

import time

import pytest

from validate.monotone import breaks, worst_break


def test_breaks_by_hand():
    axes = {"M": [1, 2, 4], "K": [8, 16]}
    # row-major [M][K]: the cell M=2, K=8 (flat 2) takes 7.7 against 4 at M=4 and 3 at K=16
    secs = [1, 2, 7.7, 3, 4, 5]
    assert breaks(axes, secs) == {2: pytest.approx(7.7 / 3)}
    assert worst_break(axes, secs) == pytest.approx(7.7 / 3)
    assert breaks(axes, [1, 2, 3, 4, 5, 6]) == {} and worst_break(axes, [1, 2, 3, 4, 5, 6]) == 1.0
    # within the tolerance (1.5x) nothing is flagged: 1.4 against 1.0 at the larger M
    assert breaks({"M": [1, 2]}, [1.4, 1.0]) == {}


def test_an_outlier_is_measured_again():
    pytest.importorskip("torch")
    from validate.kernels import _remeasure, _table, _timer

    timed = _timer("cpu", None, 0.001)
    sleeps = {0: [0.02, 0.002], 1: [0.004], 2: [0.008]}  # cell 0: slow once (5x its larger neighbour)
    calls = {0: 0, 1: 0, 2: 0}

    def make(dtype):
        secs = []
        for i in range(3):
            if timed.skip():
                secs.append(timed(None))
                continue
            k = min(calls[i], len(sleeps[i]) - 1)
            calls[i] += 1
            secs.append(timed(lambda s=sleeps[i][k]: time.sleep(s)))
        return [_table("embedding", "bf16", {"bytes": [1.0, 2.0, 3.0]}, secs, _prov())]

    (first,) = make("bf16")
    assert first.seconds[0] >= 0.02
    (t,), note = _remeasure([first], make, "bf16", timed)
    assert 0.002 <= t.seconds[0] < 0.004  # its fastest time now, under its larger neighbour's
    assert t.seconds[1:] == first.seconds[1:] and calls[1] == calls[2] == 1  # the others kept, not re-run
    assert note.startswith("1 cells slower than a larger neighbour by > 1.5x measured again (1 round)")


@pytest.mark.parametrize("first, later, calls, fastest", [
    (0.03, 0.04, 2, 0.03),  # slower than the budget: the warm-up call and one sample; the warm-up is fastest
    (0.0005, 0.004, None, 0.004),  # faster: the warm-up is no candidate, the samples decide
])
def test_a_cell_slower_than_the_budget_counts_its_warm_up(first, later, calls, fastest):
    pytest.importorskip("torch")
    from validate.kernels import _timer

    timed = _timer("cpu", None, 0.02)
    made = []

    def fn():
        made.append(1)
        time.sleep(first if len(made) == 1 else later)

    got = timed(fn)
    assert fastest <= got < fastest * 1.5
    if calls is not None:
        assert len(made) == calls
    else:
        assert len(made) >= 1 + 2  # the warm-up and at least 2 samples


def _prov():
    from calc.spec.kernel_tables import Provenance

    return Provenance(device="cpu", date="2026-12-01", source="test")
