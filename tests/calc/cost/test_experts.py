"""Experts on the busiest GPU under expert parallelism, against exact enumeration of every routing."""

import itertools
from fractions import Fraction

import numpy as np
import pytest

from calc.cost.experts import busiest_experts, experts_touched


def _enumerated(E: int, k: int, ep: int, tokens: int) -> float:
    """E[max over GPUs of the distinct experts hit on each]: every token picks one of the C(E, k)
    expert sets, all equally likely; GPU g holds experts g*m .. (g+1)*m - 1, m = E / ep."""
    m = E // ep
    sets = list(itertools.combinations(range(E), k))
    total = Fraction(0)
    for choice in itertools.product(sets, repeat=tokens):
        hit = set().union(*choice)
        total += max(sum(1 for e in hit if e // m == g) for g in range(ep))
    return float(total / len(sets) ** tokens)


@pytest.mark.parametrize("E, k, ep, tokens", [
    (8, 2, 2, 1), (8, 2, 2, 2), (8, 2, 2, 3), (8, 2, 4, 1), (8, 2, 4, 2), (6, 2, 3, 2), (8, 1, 4, 3), (6, 3, 2, 2),
])
def test_busiest_gpu_matches_enumeration(E, k, ep, tokens):
    assert float(busiest_experts(E, k, ep, tokens)) == pytest.approx(_enumerated(E, k, ep, tokens), rel=1e-12)


def test_mixtral_ep2_one_token_by_hand():
    # C(8, 2) = 28 pairs: 12 put both experts on one GPU (max 2), 16 split them (max 1)
    assert float(busiest_experts(8, 2, 2, 1)) == pytest.approx((2 * 12 + 1 * 16) / 28)
    assert float(experts_touched(8, 2, 1)) / 2 == 1.0  # the mean per GPU


def test_busiest_gpu_limits():
    # one GPU holds every expert: the mean; many tokens: every GPU's experts all hit
    assert float(busiest_experts(8, 2, 1, 3)) == pytest.approx(float(experts_touched(8, 2, 3)))
    assert float(busiest_experts(256, 8, 8, 10_000)) == pytest.approx(32.0)
    # DeepSeek-V3 (E 256, k 8) at EP8, one token: 8 experts over 8 GPUs of 32, the busiest ~2.6
    assert 2.3 < float(busiest_experts(256, 8, 8, 1)) < 2.8
    # never fewer than the mean; fractional tokens interpolate between whole ones
    t = np.arange(0, 50)
    assert np.all(busiest_experts(64, 4, 8, t) >= experts_touched(64, 4, t) / 8 - 1e-12)
    mid = float(busiest_experts(8, 2, 2, 1.5))
    assert mid == pytest.approx((float(busiest_experts(8, 2, 2, 1)) + float(busiest_experts(8, 2, 2, 2))) / 2)


def test_imbalance_skews_the_busiest_gpu():
    # rho = 2 at EP2: each of the busiest GPU's 4 experts picked with probability min(1, 2 x 2 / 8) = 1/2
    assert float(busiest_experts(8, 2, 2, 1, 2.0)) == pytest.approx(4 * (1 - 0.5))
    assert float(busiest_experts(8, 2, 2, 3, 2.0)) == pytest.approx(4 * (1 - 0.5**3))


def test_one_token_count_in_scalars_is_the_array_path():
    """The scheduler's one-step path (a float) gives what the array path gives at that count, to the
    last bit (np.power, np.interp on the table), with and without EP and a skewed router."""
    for E, k, ep in ((8, 2, 1), (8, 2, 2), (64, 6, 4), (256, 8, 8)):
        for imbalance in (1.0, 1.3):
            for t in (0.0, 1.0, 2.0, 2.5, 17.0, 63.25, 400.0, 8192.0):
                one = busiest_experts(E, k, ep, t, imbalance)
                assert isinstance(one, float)
                assert one == float(busiest_experts(E, k, ep, np.asarray(t), imbalance))
