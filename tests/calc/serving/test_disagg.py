"""Disaggregated serving: KV transfer bytes and time by hand, the link chosen, one request's
TTFT and TPOT through both pools, the planner's search and its bad input."""

import numpy as np
import pytest
from typer.testing import CliRunner

from calc.cli.app import app
from calc.core.errors import SpecError
from calc.cost.dtypes import Dtypes
from calc.serving.planner.disagg import KVLink, kv_transfer_bytes, kv_transfer_s, pick_link, simulate_disagg
from calc.serving.planner.disagg_search import FrontPoint, pareto
from calc.serving.replica.capacity import Replica
from calc.spec.catalog import load_hardware, load_model
from calc.spec.workload import Serving, load_workload

NET = KVLink("network", 50e9, 10e-6)


@pytest.fixture(scope="module")
def llama8b():
    return load_model("llama-3.1-8b")


def rep(model, hw="h100-sxm", tp=1, mb=64):
    return Replica(model, load_hardware(hw), tp, mb, Dtypes.resolve(model), Serving())


def test_kv_transfer_bytes_by_hand(llama8b):
    # 32 layers x 2 (K and V) x 8 KV heads x 128 dims x 2 bytes (bf16) per position
    assert float(kv_transfer_bytes(llama8b, "bf16", 1000)) == 1000 * 32 * 2 * 8 * 128 * 2
    assert float(kv_transfer_bytes(llama8b, "fp8", 1000)) == 1000 * 32 * 2 * 8 * 128 * 1


def test_kv_transfer_time_by_hand():
    b = 131_072_000.0
    assert float(kv_transfer_s(b, NET, 1)) == pytest.approx(b / 50e9 + 10e-6)
    assert float(kv_transfer_s(b, NET, 2)) == pytest.approx(b / 100e9 + 10e-6)  # two GPUs send their shards
    t = b / 50e9 + 10e-6
    # overlapped with a 100 ms prefill of 32 layers: all but the last layer's share hides behind compute
    assert float(kv_transfer_s(b, NET, 1, 0.1, 32, overlap=True)) == pytest.approx(t / 32)
    # a prefill too short to hide it: what sticks out past the first 31 layers' compute
    assert float(kv_transfer_s(b, NET, 1, 0.001, 32, overlap=True)) == pytest.approx(t - 0.001 * 31 / 32)


def test_link_nvlink_inside_a_node_else_network(llama8b):
    p, d = rep(llama8b, tp=1), rep(llama8b, tp=2)
    assert pick_link(p, 2, d, 3, 8, NET).name.startswith("NVLink")  # 2 + 6 = 8 GPUs: one node
    assert pick_link(p, 3, d, 3, 8, NET) is NET  # 9 GPUs: two nodes
    assert pick_link(p, 1, rep(llama8b, "a100-80gb-sxm"), 1, 8, NET) is NET  # two GPU types
    h100 = load_hardware("h100-sxm").interconnect
    link = pick_link(p, 1, d, 1, 8, NET)
    assert link.bandwidth_bytes_per_s == h100.bandwidth_gb_s_per_direction * 1e9


def test_one_request_through_both_pools(llama8b):
    p, d = rep(llama8b), rep(llama8b)
    T, G = np.array([1000]), np.array([3])
    t = simulate_disagg(p, 1, d, 1, T, G, rate_per_s=0.01, gaps=np.array([1.0]), seed=0, targets={}, link=NET,
                        overlap=False, prefix=None, prices=(1.0, 1.0))
    tx = 1000 * 131072 / 50e9 + 10e-6
    assert t.ttft[0] == pytest.approx(p.steps.step_s([1000], [0]) + tx)
    # the decode pool holds the prompt's KV: token 2 is a one-token step at 999 cached, token 3 a decode at 1000
    assert t.tpot[0] == pytest.approx((d.steps.step_s([1], [999]) + d.steps.step_s([1], [1000])) / 2)
    assert t.gpus == 2 and t.usd_per_hour == 2.0


def test_layerwise_overlap_hides_behind_the_prefill_not_the_queue(llama8b):
    """Two 2,048-token prompts arrive together; the token budget (2,048) runs one per step, so the
    second waits a whole step. Both prefills compute the same (one 2,048-token step), so both hide
    the same part of their transfer: exposed = max(t / 32, t - prefill (32 - 1) / 32), prefill the
    one step's time. (Before the fix the second hid its wait too: a smaller exposed time.)"""
    p, d = rep(llama8b), rep(llama8b)
    T, G = np.array([2048, 2048]), np.array([2, 2])
    slow = KVLink("slow", 2e9, 10e-6)
    t = simulate_disagg(p, 1, d, 1, T, G, rate_per_s=1.0, gaps=np.array([1.0, 0.0]), seed=0, targets={}, link=slow,
                        overlap=True, prefix=None, prices=(1.0, 1.0))
    tx = 2048 * 131072 / 2e9 + 10e-6  # bytes per position: 32 x 2 x 8 x 128 x 2
    prefill = p.steps.step_s([2048], [0])
    assert t.prefill_sim.ttft_s[1] == pytest.approx(2 * prefill)  # it queued one step
    exposed = max(tx / 32, tx - prefill * 31 / 32)
    assert t.transfer_s == pytest.approx([exposed, exposed])


def test_pareto_keeps_the_points_nobody_beats():
    pts = [FrontPoint(n, "aggregated", u, g, True) for n, u, g in
           (("a", 10, 100), ("b", 20, 80), ("c", 15, 70), ("d", 30, 20))]
    assert [p.label for p in pareto(pts)] == ["a", "b", "d"]


BASE = """\
name: t
model: llama-3.1-8b
hardware: [h100-sxm, l4]
arrival: {rate_per_s: 2}
output_len: {dist: fixed, value: 10}
max_gpus: 4
tp: [1]
max_batch: [32]
requests: 60
"""


def test_a_decode_pool_that_cannot_hold_one_request_is_an_error(tmp_path):
    w = tmp_path / "w.yaml"
    # 100,000 positions x 131,072 B = 13.1 GB of KV; an L4's 24 GB less 16 GB of weights cannot hold it
    w.write_text(BASE + "prompt_len: {dist: fixed, value: 100000}\ndisaggregation: {decode: {hardware: [l4]}}\n")
    r = CliRunner().invoke(app, ["plan", str(w)])
    assert r.exit_code == 2
    assert "disaggregation.decode" in r.output and "KV" in r.output and "Traceback" not in r.output


def test_a_watermark_that_leaves_no_room_is_an_error_not_a_stalled_simulation(tmp_path):
    """serving.watermark 0.999999999 keeps all but ceil-rounded-away pages free: no request can be
    admitted, and the disaggregated search, which checked the pages without the watermark, ran
    the simulator into "request 0 needs 2100 positions" (a RuntimeError; fuzz, issue 25)."""
    w = tmp_path / "w.yaml"
    w.write_text(BASE + "prompt_len: {dist: fixed, value: 2100}\ndisaggregation: {}\n"
                 "serving: {watermark: 0.999999999}\n")
    r = CliRunner().invoke(app, ["plan", str(w)])
    assert r.exit_code == 2, (r.output, r.exception)
    [line] = r.output.strip().splitlines()
    # 2,100 + 10 - 1 positions; every pool keeps ceil(0.999999999 x pages) = all of its pages free
    assert line.startswith(f"roofline: error: {w}: disaggregation.decode: no decode pool can hold one request's KV: "
                           "the longest request holds 2,109 positions"), line
    assert "h100-sxm TP1 (0 positions past the watermark)" in line


def test_disaggregation_needs_an_open_loop(tmp_path):
    w = tmp_path / "w.yaml"
    w.write_text(BASE.replace("rate_per_s: 2", "concurrency: 4") + "prompt_len: {dist: fixed, value: 100}\n"
                 "disaggregation: {}\n")
    with pytest.raises(SpecError, match="open-loop"):
        load_workload(w)


def test_plan_searches_both_and_names_a_winner(tmp_path):
    from calc.serving.planner.plan import plan

    w = tmp_path / "w.yaml"
    w.write_text(BASE.replace("[h100-sxm, l4]", "[h100-sxm]") + "prompt_len: {dist: fixed, value: 2000}\n"
                 "disaggregation: {}\n")
    p = plan(load_workload(w))
    assert p.disagg and p.winner in ("aggregated", "disaggregated")
    assert all(t.gpus <= 4 for t in p.disagg)
    # the headline names the cheaper kind and the other kind as runner-up; the launch commands are the pools'
    from calc.render.plan import verdict

    best, other = (p.best_disagg, p.chosen) if p.winner == "disaggregated" else (p.chosen, p.best_disagg)
    assert p.answer is best
    if other is not None:
        assert p.runner_up is other and f"Runner-up (the best {'aggregated' if other is p.chosen else 'disaggregated'})" in verdict(p)
    roles = [role for role, _ in p.launches()]
    assert roles == (["prefill", "decode"] if p.winner == "disaggregated" else ["replica"])
