"""The API servers in front of the engine (Serving.api_servers): requests pass them in turn, the
preset's request overhead each, so a burst queues there before the engine sees it."""

import math

import numpy as np
import pytest

from calc.cost.dtypes import Dtypes
from calc.serving.replica.capacity import Replica, api_server_rate, steady_state
from calc.serving.sim.scheduler import served
from calc.serving.sim.simulate import simulate
from calc.spec.catalog import load_hardware, load_model
from calc.spec.engine import load_preset
from calc.spec.scheduler import resolve_serving
from calc.spec.workload import Serving


def test_requests_take_the_servers_in_turn():
    """Sent at 0, 0, 0 and 5 ms to one server of 2 ms each: it takes them at 0, 2, 4 and max(5, 4 + 2)
    = 6 ms (each less its own 2 ms, which is reported beside the times). Two servers: request k gets
    request k - 2's server: 0, 0, max(0, 0 + 2) = 2, max(5, 0 + 2) = 5."""
    a = np.array([0.0, 0.0, 0.0, 5e-3])
    assert served(a, 2e-3, 1) == pytest.approx([0.0, 2e-3, 4e-3, 6e-3])
    assert served(a, 2e-3, 2) == pytest.approx([0.0, 0.0, 2e-3, 5e-3])
    assert served(a, 0.0, 1) == pytest.approx(a)


def _replica(servers, overhead_us=0.0, mb=64):
    m = load_model("llama-3.1-8b")
    hw = load_hardware("h100-sxm").with_engine(load_preset("vllm").model_copy(update={"request_overhead_us": overhead_us}))
    return Replica(m, hw, 1, mb, Dtypes.resolve(m), Serving(api_servers=servers))


def test_a_burst_waits_its_turn_at_the_server():
    """Four 16-token requests at once, one server of 1 s each: the engine sees them 1 s apart, long
    after the one before has finished, so request k's TTFT is k s more than request 0's, which
    is one request's alone (the engine's time; the 1 s itself is reported beside it)."""
    T, G = np.full(4, 16), np.full(4, 4)
    slow = simulate(_replica(1, 1e6), T, G, burst=True)
    alone = simulate(_replica(None, 1e6), T[:1], G[:1], burst=True)
    assert slow.ttft_s == pytest.approx(alone.ttft_s[0] + np.arange(4) * 1.0)
    overlapped = simulate(_replica(None, 1e6), T, G, burst=True)
    assert overlapped.ttft_s.max() < 0.1  # no server queue: one step takes all four prompts


def test_closed_loop_requests_queue_at_the_server_too():
    """A closed loop of 2 clients: both send at 0, and the one server passes the second on 1 s after
    the first; each later request, sent when one finishes, waits for the request before it."""
    T, G = np.full(6, 16), np.full(6, 4)
    sim = simulate(_replica(1, 1e6), T, G, concurrency=2)
    assert sim.ttft_s[1] - sim.ttft_s[0] == pytest.approx(1.0)
    # every later request is issued when one finishes; none reaches the engine before the request
    # ahead of it has had its 1 s at the server
    ready = sim.arrive_s + sim.ttft_s - sim.ttft_s[0]
    assert np.all(np.diff(ready) >= 1.0 - 1e-9)


def test_the_servers_cap_the_steady_state():
    """100 ms per request at one server: at most 10 requests/s, whatever the engine could do; the
    state then says so, and two servers double the cap."""
    T, G = np.full(200, 64), np.full(200, 8)
    free = steady_state(_replica(None, 1e5), T, G)
    assert free.requests_per_s > 20
    one = steady_state(_replica(1, 1e5), T, G)
    assert (one.requests_per_s, one.limited_by) == (pytest.approx(10.0, rel=1e-3), "API servers")
    assert one.output_tokens_per_s == pytest.approx(10.0 * 8, rel=1e-3)
    assert api_server_rate(_replica(2, 1e5)) == pytest.approx(20.0)
    assert math.isinf(api_server_rate(_replica(None, 1e5)))


def test_vllm_api_server_count_sets_the_servers():
    """vLLM's own --api-server-count (engines.yaml vllm, vllm_api): 1 by default."""
    preset = load_preset("vllm")
    assert resolve_serving(preset).api_servers == 1
    assert resolve_serving(preset, engine_args={"api_server_count": 4}).api_servers == 4


def test_requests_handed_over_by_another_replica_skip_the_servers():
    """A disaggregated decode pool takes its requests from the prefill pool, not over HTTP:
    simulate(api=False) and steady_state(api=False) see no server queue and no cap."""
    T, G = np.full(4, 16), np.full(4, 4)
    handed = simulate(_replica(1, 1e6), T, G, burst=True, api=False)
    free = simulate(_replica(None, 1e6), T, G, burst=True)
    assert handed.ttft_s == pytest.approx(free.ttft_s)
    T, G = np.full(200, 64), np.full(200, 8)
    assert steady_state(_replica(1, 1e5), T, G, api=False).requests_per_s == pytest.approx(
        steady_state(_replica(None, 1e5), T, G).requests_per_s)
