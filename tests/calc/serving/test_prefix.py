"""Prefix caching: cached tokens and pinned pages by hand, prefill FLOPs of the uncached
suffix, the simulator's TTFT and pages with a shared prefix, workload errors, the plan's section."""

import numpy as np
import pytest

from calc.core.errors import SpecError
from calc.cost.dtypes import Dtypes
from calc.cost.efficiency import Efficiency
from calc.cost.latency import prefill_cost
from calc.serving.planner.plan import plan
from calc.serving.replica.capacity import Replica, steady_state
from calc.serving.replica.prefix import cached_prefix
from calc.serving.sim.simulate import simulate
from calc.spec.catalog import load_hardware, load_model
from calc.spec.workload import PrefixCache, Serving, load_workload


@pytest.fixture(scope="module")
def rep():
    m = load_model("llama-3.1-8b")
    return Replica(m, load_hardware("h100-sxm"), 1, 64, Dtypes.resolve(m), Serving())


def test_shared_prefix_pins_whole_pages_once():
    T = np.array([2100, 2100, 5000])
    p = cached_prefix(PrefixCache(shared_tokens=2000), T, 16)
    assert p.shared_pages == 2000 // 16 == 125
    assert p.cached.tolist() == [2000, 2000, 2000]
    # 2,010 shared tokens: only the 125 whole pages (2,000 tokens) are shared; the other 10 are recomputed
    assert cached_prefix(PrefixCache(shared_tokens=2010), T, 16).cached.tolist() == [2000] * 3
    # a request of 2100 prompt + 150 output holds 2249 positions: ceil(2249 / 16) = 141 pages, 125 of them shared
    assert p.own_pages(2100 + 150 - 1) == 141 - 125


def test_hit_rate_caches_a_share_of_the_rest_never_the_last_token():
    p = cached_prefix(PrefixCache(shared_tokens=1000, hit_rate=0.5), np.array([3000, 993]), 16)
    # 1000 // 16 = 62 pages = 992 tokens shared; then floor(0.5 * (3000 - 992)) = 1004 -> 1996
    # and for 993: 992 + floor(0.5 * 1) = 992 (at most 993 - 1)
    assert p.cached.tolist() == [992 + 1004, 992]
    assert cached_prefix(None, np.array([10]), 16).cached.tolist() == [0]
    assert cached_prefix(PrefixCache(shared_tokens=8, enabled=False), np.array([10]), 4).shared_pages == 0


def test_prefill_of_the_uncached_suffix_by_hand(rep):
    m, dt, eff = rep.model, rep.dt, Efficiency.of(rep.hw, True)
    ph, _ = prefill_cost(m, rep.hw, 1, 100, dt, eff, past=2000)
    # Llama 3.1 8B per layer: q,o 4096^2 each, k,v 4096*1024 each, MLP 3*4096*14336; 32 layers
    layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336
    assert float(ph.linear_flops) == 2 * 100 * 32 * layer + 2 * 4096 * 128256  # logits for the last token only
    # 100 new queries after 2000 cached: query i sees 2000 + i keys -> 100 * 2000 + 100 * 101 / 2 pairs
    pairs = 100 * 2000 + 100 * 101 // 2
    assert float(ph.attention_flops) == 4 * 32 * 128 * pairs * 32


def test_simulated_ttft_is_the_suffix_prefill_alone(rep):
    T, G = np.array([2100]), np.array([2])
    p = cached_prefix(PrefixCache(shared_tokens=2000), T, rep.kv.block_size)
    on = simulate(rep, T, G, concurrency=1, prefix=p)
    off = simulate(rep, T, G, concurrency=1)
    assert on.first_token_s[0] == pytest.approx(rep.steps.step_s([100], [2000]))
    assert off.first_token_s[0] == pytest.approx(rep.steps.step_s([2048], [0]) + rep.steps.step_s([52], [2048]))
    assert on.first_token_s[0] < off.first_token_s[0] / 5


def test_shared_pages_are_held_once(rep):
    T, G = np.full(40, 2100), np.full(40, 50)
    p = cached_prefix(PrefixCache(shared_tokens=2000), T, rep.kv.block_size)
    sim = simulate(rep, T, G, concurrency=40, prefix=p)
    pages = rep.kv.pages
    # all 40 admitted (100-token prefills, 2048 per step): each holds ceil(2100 / 16) - 125 = 7 pages of its
    # own (a first decode token at 2101 stays in page 132), plus the 125 shared ones, once
    assert sim.timeline["kv_used"].max() == pytest.approx((40 * 7 + 125) / pages)
    assert sim.timeline["kv_used"][-1] == pytest.approx(125 / pages)  # all done: the shared prefix stays
    assert simulate(rep, T, G, concurrency=40).timeline["kv_used"][-1] == 0


def test_closed_form_holds_more_requests_with_the_cache(rep):
    T, G = np.full(100, 2100), np.full(100, 200)
    p = cached_prefix(PrefixCache(shared_tokens=2000), T, rep.kv.block_size)
    assert steady_state(rep, T, G, prefix=p).requests_per_s > steady_state(rep, T, G).requests_per_s


def test_shared_prefix_longer_than_a_prompt_is_an_error(tmp_path):
    w = tmp_path / "w.yaml"
    w.write_text("name: t\nmodel: llama-3.1-8b\nhardware: [h100-sxm]\narrival: {rate_per_s: 2}\n"
                 "prompt_len: {dist: fixed, value: 500}\noutput_len: {dist: fixed, value: 5}\n"
                 "prefix_cache: {shared_tokens: 500}\n")
    with pytest.raises(SpecError, match="prefix_cache.shared_tokens"):
        load_workload(w)


def test_plan_reports_ttft_and_pages_with_and_without_the_cache():
    wl = load_workload("reports/plans/workloads/rag-shared-prefix-llama-3.1-8b.yaml", requests=200)
    e = plan(wl).prefix_effect
    assert e is not None and e.shared_pages == 125
    assert (e.prefill_tokens_cached, e.prefill_tokens_full) == (100, 2100)
    assert e.with_cache.percentile("ttft", 99) < e.without_cache.percentile("ttft", 99)
