"""The discrete-event simulator: determinism, conservation, preemption, step counts, and agreement
with the closed form at saturation."""

import numpy as np
import pytest

from calc.cost.dtypes import Dtypes
from calc.serving.replica.capacity import Replica, steady_state
from calc.serving.sim.simulate import simulate
from calc.spec.catalog import load_hardware, load_model
from calc.spec.workload import Serving


def replica(model="llama-3.1-8b", hw="h100-sxm", tp=1, mb=64, serving=None):
    m = load_model(model)
    return Replica(m, load_hardware(hw), tp, mb, Dtypes.resolve(m), serving or Serving())


def lengths(n, seed=0, t_med=800, g_med=200):
    rng = np.random.default_rng(seed)
    T = np.clip(np.rint(rng.lognormal(np.log(t_med), 0.9, n)), 16, 8000).astype(int)
    G = np.clip(np.rint(rng.lognormal(np.log(g_med), 0.7, n)), 1, 2000).astype(int)
    return T, G


def test_deterministic_for_a_seed():
    rep = replica()
    T, G = lengths(600)
    a = simulate(rep, T, G, rate_per_s=10, seed=5)
    b = simulate(rep, T, G, rate_per_s=10, seed=5)
    for f in ("arrive_s", "first_token_s", "finish_s"):
        assert np.array_equal(getattr(a, f), getattr(b, f))
    assert a.timeline["kv_used"].tolist() == b.timeline["kv_used"].tolist()
    c = simulate(rep, T, G, rate_per_s=10, seed=6)
    assert not np.array_equal(a.finish_s, c.finish_s)


def test_every_request_completes_with_consistent_times():
    rep = replica()
    T, G = lengths(800, seed=1)
    r = simulate(rep, T, G, rate_per_s=12, seed=0)
    assert np.all(np.isfinite(r.finish_s)) and np.all(r.first_token_s >= r.arrive_s)
    assert r.timeline["output_tokens"][-1] == G.sum()  # one token per request per step it decodes
    many = G > 1
    assert np.allclose(r.e2e_s[many], r.ttft_s[many] + (G[many] - 1) * r.tpot_s[many])
    assert np.all(np.isnan(r.tpot_s[~many]))
    # a request's TTFT is at least its prefill alone; TPOT at least a decode step at batch 1
    alone = np.array([rep.steps.step_s([min(t, 2048)], [0]) for t in T[:50]])
    assert np.all(r.ttft_s[:50] >= alone * (1 - 1e-9))
    assert r.timeline["running"].max() <= rep.max_batch
    assert r.timeline["kv_used"].max() <= 1.0


def test_preemption_by_recompute_when_kv_runs_out():
    # about 1.7 GB of KV pages (81,559 MiB x 0.21 - weights - workspace: ~13k tokens) for 64
    # sequences of up to 1,500 positions
    rep = replica(serving=Serving(gpu_memory_utilization=0.21))
    assert 500 < rep.kv.pages < 1000
    T, G = np.full(300, 500), np.full(300, 1000)
    r = simulate(rep, T, G, rate_per_s=50, seed=0)
    assert r.preemptions.sum() > 0
    assert np.all(np.isfinite(r.finish_s))
    assert r.timeline["output_tokens"][-1] == G.sum()  # recompute regenerates no token twice
    assert r.timeline["kv_used"].max() <= 1.0


def test_closed_loop_keeps_at_most_the_clients_running():
    rep = replica(mb=256)
    T, G = lengths(500, seed=2)
    r = simulate(rep, T, G, concurrency=16, seed=0)
    assert (r.timeline["running"] + r.timeline["waiting"]).max() <= 16
    assert np.all(np.isfinite(r.finish_s))


@pytest.mark.parametrize("model, hw, tp, mb, t_med, g_med, limit", [
    ("llama-3.1-8b", "h100-sxm", 1, 64, 800, 200, "max batch"),
    ("llama-3.1-8b", "h100-sxm", 1, 32, 128, 600, "max batch"),  # decode-dominated
    ("llama-3.1-8b", "l40s", 1, 256, 800, 200, "KV cache"),
    ("llama-3.1-8b", "a100-40gb", 1, 512, 2000, 300, "KV cache"),  # preemptions
    ("mixtral-8x7b", "h100-sxm", 2, 64, 800, 200, "max batch"),
])
def test_saturation_throughput_matches_the_closed_form(model, hw, tp, mb, t_med, g_med, limit):
    rep = replica(model, hw, tp, mb)
    T, G = lengths(1500, seed=3, t_med=t_med, g_med=g_med)
    ss = steady_state(rep, T, G)
    assert ss.limited_by == limit
    r = simulate(rep, T, G, rate_per_s=3 * ss.requests_per_s, seed=0)  # a queue always waiting
    assert r.requests_per_s == pytest.approx(ss.requests_per_s, rel=0.10)
    assert r.output_tokens_per_s == pytest.approx(ss.output_tokens_per_s, rel=0.10)
    assert r.backlog_growth() > 0.2  # it does fall behind at 3x its capacity


def test_gamma_arrivals_are_burstier():
    rep = replica()
    T, G = lengths(1000, seed=4)
    cap = steady_state(rep, T, G).requests_per_s
    smooth = simulate(rep, T, G, rate_per_s=0.7 * cap, seed=1)
    bursty = simulate(rep, T, G, rate_per_s=0.7 * cap, process="gamma", cv=3.0, seed=1)
    assert bursty.percentile("ttft", 99) > smooth.percentile("ttft", 99)


def test_ten_thousand_requests_in_a_bounded_count_of_steps():
    """The work is counted, not timed (a CPU-time threshold fails on a loaded machine and passes
    a slow algorithm on a fast one; ``python -m calc.bench`` times 50,000 requests). Bounds by
    hand: a step decodes at most max_batch = 64 sequences and so emits at most 64 output
    tokens, so steps >= G.sum() / 64; every step makes progress, one output token or one
    prefill chunk of at most 2,048 tokens at least, so steps <= G.sum() + sum(ceil(T / 2048))."""
    rep = replica()
    assert rep.steps.max_fit_error < 1e-9  # fitted once per configuration
    T, G = lengths(10_000, seed=0)
    r = simulate(rep, T, G, rate_per_s=12.5, seed=1)
    assert r.n == 10_000 and np.all(np.isfinite(r.finish_s))
    assert rep.max_batch == 64 and rep.serving.max_batched_tokens == 2048
    low, high = G.sum() / 64, G.sum() + np.ceil(T / 2048).sum()
    assert low <= r.steps <= high, (low, r.steps, high)
    assert r.steps >= G.max()  # the longest request decodes one token a step
    assert len(r.timeline["t_s"]) <= r.steps  # at most one timeline row a step
