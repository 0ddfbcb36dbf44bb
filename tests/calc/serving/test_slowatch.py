"""Stopping a simulation once its SLOs are missed for certain: the rank rule by hand, the stop,
a stopped run resumed to the very same result, and the planner's answers unchanged by it."""

import math

import numpy as np

from calc.serving.sim.simulate import simulate
from calc.serving.sim.slowatch import SloWatch, lower_bounds
from tests.calc.serving.test_simulate import lengths, replica


def test_a_percentile_is_missed_once_enough_lower_bounds_exceed_the_limit():
    # 10 measured requests, TTFT p90 <= 1 s. numpy's linear p90 of 10 values sits between the
    # values of rank floor(9 x 0.9) = 8 and 9 (0-based, ascending), so it is above 1 s for sure
    # once 10 - 8 = 2 values are; with 1 it is not (the rest may still come in at 0).
    n = 10
    watch = SloWatch({"ttft_p90": 1.0}, np.full(n, 5), 0, n)
    arrive = np.zeros(n)
    first = np.full(n, np.nan)
    first[:8] = 0.5  # eight known, under the limit
    # at clock 1.5 the two without a first token have waited 1.5 s > 1 s: two certain values above
    assert watch.missed(arrive, first, np.full(n, np.nan), clock=1.5)
    first[8] = 0.5  # only one left waiting
    assert not watch.missed(arrive, first, np.full(n, np.nan), clock=1.5)
    # and numpy agrees on both sides of the rule: 1 value above gives p90 <= 1 s can still hold
    assert np.percentile(np.r_[np.full(9, 0.5), 1.5], 90) <= 1.0
    assert np.percentile(np.r_[np.full(8, 0.5), 1.5, 1.5], 90) > 1.0


def test_lower_bounds_are_exact_once_known_and_the_clock_before():
    arrive, first, finish, G = np.array([0.0, 1.0, 5.0]), np.array([0.2, np.nan, np.nan]), \
        np.array([1.2, np.nan, np.nan]), np.array([6, 3, 3])
    low = lower_bounds(arrive, first, finish, G, clock=3.0)
    assert low["ttft"][:2].tolist() == [0.2, 2.0] and math.isnan(low["ttft"][2])  # the third not arrived
    assert low["e2e"][:2].tolist() == [1.2, 2.0]
    assert low["tpot"][0] == (1.2 - 0.2) / 5 and math.isnan(low["tpot"][1])  # no first token yet


def test_a_stopped_run_misses_and_goes_on_to_the_same_result():
    rep = replica(mb=32)
    T, G = lengths(600, seed=3)
    targets = {"ttft_p99": 0.5, "tpot_p50": 0.05}
    full = simulate(rep, T, G, rate_per_s=30, seed=1)  # overloaded: the queue grows
    assert full.percentile("ttft", 99) > 0.5
    part = simulate(rep, T, G, rate_per_s=30, seed=1, stop_on_miss=targets)
    assert part.stopped_s is not None and part.stopped_s < np.nanmax(full.finish_s) / 2
    assert part.steps < full.steps / 2
    # what it is at least, when it stopped, is a lower bound of the whole run's and above the limit
    assert 0.5 < part.at_least("ttft", 99) <= full.percentile("ttft", 99)
    assert part.at_least("tpot", 50) <= full.percentile("tpot", 50)
    rest = part.rest()
    assert rest.stopped_s is None
    for f in ("first_token_s", "finish_s", "preemptions"):
        assert np.array_equal(getattr(rest, f), getattr(full, f))
    for k in full.timeline:
        assert np.array_equal(rest.timeline[k], full.timeline[k])
    assert rest.bound_time_s == full.bound_time_s and rest.steps == full.steps


def test_a_run_that_meets_its_slos_is_never_stopped():
    rep = replica(mb=64)
    T, G = lengths(400, seed=4)
    full = simulate(rep, T, G, rate_per_s=2, seed=0)
    loose = {"ttft_p99": 2 * full.percentile("ttft", 99), "e2e_p90": 2 * full.percentile("e2e", 90)}
    run = simulate(rep, T, G, rate_per_s=2, seed=0, stop_on_miss=loose)
    assert run.stopped_s is None and np.array_equal(run.finish_s, full.finish_s)


def test_the_search_stops_missing_trials_and_the_answer_stays(tmp_path, monkeypatch):
    # The same plan with and without stopping: the same trials meet, the same answer; a stopped
    # trial reads what was certain, and its whole figures on demand (the run goes on).
    from calc.serving.planner import search as S
    from calc.serving.planner.plan import plan
    from calc.spec.workload import load_workload
    from tests.calc.serving.test_plan import CHAT

    (tmp_path / "w.yaml").write_text(CHAT)
    wl = load_workload(tmp_path / "w.yaml")
    stopped = plan(wl)
    monkeypatch.setattr(S, "simulate", lambda *a, stop_on_miss=None, **k: simulate(*a, **k))
    whole = plan(wl)
    assert [(t.label, t.meets) for t in stopped.trials] == [(t.label, t.meets) for t in whole.trials]
    assert stopped.chosen.label == whole.chosen.label
    assert not any(t.stopped for t in whole.trials)
    cut = [t for t in stopped.trials if t.stopped]
    assert cut, "the example has a missing trial to stop"
    t = cut[0]
    twin = next(w for w in whole.trials if w.label == t.label)
    assert "at least" in t.why()
    assert t.why(whole=True) == twin.why() and t.stats == twin.stats


def test_the_nearest_miss_is_the_one_the_whole_runs_give(tmp_path, monkeypatch):
    # Nothing meets a tight TTFT target; the closest configuration, and each GPU type's nearest
    # miss, found by running stopped runs on only as far as ranking needs, are those of the plan
    # run without stopping (min over (miss ratio, cost) of each option's most-replica trial).
    from calc.serving.planner import search as S
    from calc.serving.planner.plan import plan
    from calc.serving.planner.trial import cost_key
    from calc.spec.workload import load_workload
    from tests.calc.serving.test_plan import CHAT

    (tmp_path / "w.yaml").write_text(CHAT.replace("slo: {ttft_p99_s: 1.0, tpot_p99_s: 0.05}",
                                                  "slo: {ttft_p99_s: 0.04, tpot_p99_s: 0.05}"))
    wl = load_workload(tmp_path / "w.yaml")
    stopped = plan(wl)
    assert stopped.chosen is None and any(t.stopped for t in stopped.trials)
    near = stopped.closest
    assert not all(t.whole for t in stopped.trials), "ranking should not need every whole run"
    monkeypatch.setattr(S, "simulate", lambda *a, stop_on_miss=None, **k: simulate(*a, **k))
    whole = plan(wl)
    brute = min((o.most_replicas for o in whole.options if o.trials), key=lambda t: (t.miss_ratio, cost_key(t)))
    assert near.label == brute.label and near.miss_ratio == brute.miss_ratio
    assert stopped.best_by_hardware() and [w for _, _, w in stopped.best_by_hardware()] == \
        [w for _, _, w in whole.best_by_hardware()]
