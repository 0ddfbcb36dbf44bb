"""The decode line (calc.serving.steps.decodeline) against the cost model itself and the general step
model path: a run of pure decode steps, plain and speculative, on dense GQA at TP 1/4/8, MoE under
EP (with a skewed router) and MLA; windowed models keep the general path."""

from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calc.cost.dtypes import Dtypes
from calc.cost.latency import mixed_step_cost
from calc.cost.speculative import SpecConfig
from calc.serving.replica.capacity import Replica
from calc.serving.steps.decodeline import decode_line
from calc.serving.steps.stepmodel import StepFeatures
from calc.serving.steps.timer import until
from calc.spec.catalog import load_hardware, load_model
from calc.spec.workload import Serving

CONFIGS = [  # (model, hardware, TP, EP, imbalance)
    ("llama-3.1-8b", "h100-sxm", 1, 1, 1.0),
    ("llama-3.1-70b", "h100-sxm", 4, 1, 1.0),
    ("llama-3.1-70b", "b200", 8, 1, 1.0),
    ("mixtral-8x7b", "h200", 4, 2, 1.0),
    ("mixtral-8x7b", "a100-80gb-sxm", 4, 4, 1.5),
    ("deepseek-v2-lite", "h100-sxm", 2, 1, 1.0),
]


@cache
def replica(i: int, k: int = 0) -> Replica:
    name, hw, tp, ep, imb = CONFIGS[i]
    m = load_model(name)
    spec = SpecConfig(k, 0.7, draft=load_model("llama-3.2-1b")) if k else None
    return Replica(m, load_hardware(hw), tp, 256, Dtypes.resolve(m), Serving(), ep=ep, imbalance=imb, speculative=spec)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(i=st.integers(0, len(CONFIGS) - 1), kv=st.lists(st.integers(1, 120_000), min_size=1, max_size=256),
       steps=st.integers(1, 40), rows=st.integers(1, 8))
def test_decode_line_is_the_step_model(i, kv, steps, rows):
    """Times and shares by bound of a run of decode steps: the general path's, to float noise."""
    sm = replica(i).steps
    kv = np.array(kv, float)
    ahead = np.arange(steps) * float(rows)
    want_t, want_s = sm.time_and_shares(StepFeatures.decoding(sm.windows, kv, ahead, rows), "decode")
    line = decode_line(sm, kv.size, rows)
    got_t, got_s = line.run(kv.sum() + kv.size * ahead)
    assert np.allclose(got_t, want_t, rtol=1e-12, atol=0)
    assert np.allclose(got_s, want_s, rtol=0, atol=1e-12 * want_t.max())
    assert line.time(float(kv.sum())) == pytest.approx(float(want_t[0]), rel=1e-12)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(i=st.integers(0, len(CONFIGS) - 1), kv=st.lists(st.integers(1, 60_000), min_size=1, max_size=48),
       ahead=st.lists(st.integers(0, 3000), min_size=1, max_size=3))
def test_plain_decode_run_is_the_cost_model(i, kv, ahead):
    """Each step of a plain timer's decode run: mixed_step_cost of the batch at kv + ahead."""
    rep = replica(i)
    kv = np.array(kv, float)
    a = np.array(ahead, float)
    got, _ = rep.timer.decode_run(kv, a)
    for j, step in enumerate(a):
        want = float(mixed_step_cost(rep.model, rep.hw, np.ones(kv.size), kv + step, rep.dt, rep.eff, rep.attention,
                                     rep.par, "decode").time_s)
        assert got[j] == pytest.approx(want, rel=1e-9)
    assert rep.timer.decode_s(kv) == pytest.approx(rep.timer.one(kv)[0], rel=1e-12)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kv=st.lists(st.integers(1, 60_000), min_size=1, max_size=64), k=st.integers(1, 6),
       steps=st.integers(1, 30))
def test_speculative_decode_run_is_the_general_path(kv, k, steps):
    """A speculative run: the verification (k + 1 positions) plus k draft passes, as the general path."""
    rep = replica(0, k)
    t, d = rep.timer.target, rep.timer.draft
    kv = np.array(kv, float)
    a = np.arange(steps) * 2.0
    vt, vs = t.time_and_shares(StepFeatures.decoding(t.windows, kv, a, k + 1), "decode")
    dt, ds = d.time_and_shares(StepFeatures.decoding(d.windows, kv, a), "decode")
    got_t, got_s = rep.timer.decode_run(kv, a)
    assert np.allclose(got_t, vt + k * dt, rtol=1e-12, atol=0)
    assert np.allclose(got_s, vs + k * ds, rtol=0, atol=1e-12 * got_t.max())
    assert rep.timer.decode_s(kv) == pytest.approx(rep.timer.one(kv)[0], rel=1e-12)


def test_windowed_models_keep_the_general_path():
    """Positions read are min(kv + 1, W) per sequence, not affine in the total context: no line."""
    for name, hw in (("gemma-2-9b", "a100-80gb-sxm"), ("mistral-7b", "l4")):
        m = load_model(name)
        rep = Replica(m, load_hardware(hw), 1, 64, Dtypes.resolve(m), Serving())
        assert decode_line(rep.steps, 8) is None
        kv = np.array([100.0, 9000.0])
        want = rep.steps.time_and_shares(StepFeatures.decoding(rep.steps.windows, kv, np.arange(3.0)), "decode")[0]
        assert np.array_equal(rep.timer.decode_run(kv, np.arange(3.0))[0], want)


def test_line_of_one_sequence_by_hand():
    """One sequence, no breakpoint crossed between two contexts: the time is a + b u, so the step
    at the midpoint context is the mean of the two (checked on a span with no breakpoint)."""
    sm = replica(0).steps
    line = decode_line(sm, 1)
    bp = np.concatenate([line.bp, [np.inf]])
    lo = float(bp[np.searchsorted(bp, 1000.0)])
    u0, u1 = 1000.0, min(lo, 1000.0 + 2 * 10_000.0)
    mid = (u0 + u1) / 2
    t = [float(sm.time(StepFeatures.decoding(sm.windows, np.array([u]), 0.0), "decode")) for u in (u0, mid, u1)]
    assert t[1] == pytest.approx((t[0] + t[2]) / 2, rel=1e-12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(i=st.integers(0, len(CONFIGS) - 1), kv=st.lists(st.integers(1, 120_000), min_size=1, max_size=256),
       steps=st.integers(1, 48), extra=st.sampled_from([0.0, 3e-4]), cut=st.floats(0.0, 1.2))
def test_short_run_in_scalars_is_the_array_path_exactly(i, kv, steps, extra, cut):
    """A plain timer's decode_until (a short run on one piece: scalars) gives what the array path
    (until over decode_times) gives, to the last bit: steps taken, seconds and shares; ``cut``
    places the arrival at that share of the run's whole time."""
    timer = replica(i).timer
    kv = np.array(kv, np.int64)
    ahead = np.arange(float(steps))
    times, shares = timer.decode_times(kv, ahead)
    t_arr = cut * float(np.sum(times + extra))
    for arrival in (None, t_arr):
        want = until(times, shares, extra, arrival)
        got = timer.decode_until(kv, ahead, extra, arrival)
        assert got[0] == want[0] and got[1] == want[1] and list(got[2]) == list(want[2])


def test_short_run_stops_during_the_arrival():
    """The run stops at the step during which the arrival lands: an arrival at exactly the end of
    step 3 stops it after 3 steps, one a nanosecond later after 4, none after all of them."""
    timer = replica(0).timer
    kv = np.array([1000, 2000, 3000], np.int64)
    ahead = np.arange(10.0)
    times, _ = timer.decode_times(kv, ahead)
    three = times[0] + times[1] + times[2]  # the cumulative time the scheduler adds step by step
    assert timer.decode_until(kv, ahead, 0.0, three)[:2] == (3, three)
    assert timer.decode_until(kv, ahead, 0.0, three + 1e-9)[0] == 4
    assert timer.decode_until(kv, ahead)[0] == 10
