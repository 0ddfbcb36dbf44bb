"""SGLang's overlap scheduler (Serving.overlap_schedule): the next step is launched before the last
one's results are taken, so a request that arrives while a step runs joins one step later than on an
engine that schedules between steps; an idle engine takes it at once."""

import numpy as np
import pytest

from calc.cost.dtypes import Dtypes
from calc.serving.replica.capacity import Replica
from calc.serving.sim.simulate import simulate
from calc.spec.catalog import load_hardware, load_model
from calc.spec.engine import load_preset
from calc.spec.scheduler import resolve_serving
from calc.spec.workload import Serving


def _replica(overlap: bool):
    m = load_model("llama-3.1-8b")
    return Replica(m, load_hardware("h100-sxm"), 1, 64, Dtypes.resolve(m), Serving(overlap_schedule=overlap))


def test_an_arrival_during_a_step_waits_one_step_more():
    """Request 0 (16-token prompt, 400 tokens out) decodes alone; request 1 arrives at 100 ms, in the
    middle of one of its steps. Scheduling between steps, request 1's prompt joins the step after the
    one it arrived in; with the step after that already queued, it joins one step later: its TTFT grows
    by that step, a decode step of request 0 alone (its context then 16 + the steps run, within one)."""
    T, G = np.array([16, 16]), np.array([400, 8])
    gaps = np.array([0.0, 0.1])  # arrivals at 0 and 100 ms (rate 1/s)
    plain = simulate(_replica(False), T, G, rate_per_s=1.0, gaps=gaps)
    lagged = simulate(_replica(True), T, G, rate_per_s=1.0, gaps=gaps)
    rep = _replica(False)
    d = rep.timer.decode_s(np.array([16 + 0.1 // rep.timer.decode_s(np.array([16]))]))  # ~ one decode step then
    assert lagged.ttft_s[0] == pytest.approx(plain.ttft_s[0])  # request 0 found the engine idle
    assert lagged.ttft_s[1] - plain.ttft_s[1] == pytest.approx(d, rel=1e-3)
    assert 0 < d < 0.1


def test_an_idle_engine_takes_a_request_at_once():
    """Requests far apart (each done before the next arrives): no step is queued when one arrives, so
    overlap scheduling changes nothing."""
    T, G = np.full(3, 64), np.full(3, 4)
    gaps = np.array([0.0, 5.0, 5.0])
    plain = simulate(_replica(False), T, G, rate_per_s=1.0, gaps=gaps)
    lagged = simulate(_replica(True), T, G, rate_per_s=1.0, gaps=gaps)
    assert lagged.ttft_s == pytest.approx(plain.ttft_s)


def test_sglang_overlaps_from_0_3_6_unless_told_not_to():
    """engines.yaml sglang (sglang_overlap): on by default from 0.3.6 (disable_overlap_schedule: False),
    opt-in before (0.3.4-0.3.5 enable_overlap_schedule: False); both flags map onto the field."""
    p = load_preset("sglang")
    assert resolve_serving(p).overlap_schedule is True
    assert resolve_serving(p, version="0.3.5").overlap_schedule is False
    assert resolve_serving(p, version="0.3.6").overlap_schedule is True
    assert resolve_serving(p, version="0.4.1", engine_args={"disable_overlap_schedule": True}).overlap_schedule is False
    assert resolve_serving(p, version="0.3.5", engine_args={"enable_overlap_schedule": True}).overlap_schedule is True
    assert resolve_serving(load_preset("vllm"), version="0.11.0").overlap_schedule is False


def test_vllm_schedules_asynchronously_from_0_14():
    """engines.yaml vllm (vllm_async): async_scheduling opt-in in 0.12-0.13 (False), on by default from
    0.14.0 (None, resolved to on); vLLM's own flag sets it either way."""
    p = load_preset("vllm")
    assert resolve_serving(p).overlap_schedule is True
    assert resolve_serving(p, version="0.13.0").overlap_schedule is False
    assert resolve_serving(p, version="0.14.0").overlap_schedule is True
    assert resolve_serving(p, engine_args={"async_scheduling": False}).overlap_schedule is False


def test_vllm_keeps_async_scheduling_for_draft_heads_not_for_a_draft_model():
    """vllm_async_spec: EAGLE/MTP heads keep async scheduling (overlap_speculative: heads), a draft
    model turns it off, and SGLang (none) turns it off for both. With it kept, the arrival in the
    first test waits for a step more than without; without it, the same as scheduling between steps."""
    from dataclasses import replace

    from calc.cost.speculative import DraftHeads, SpecConfig

    T, G = np.array([16, 16]), np.array([400, 8])
    gaps = np.array([0.0, 0.1])
    heads = SpecConfig(k=3, acceptance=0.7, heads=DraftHeads(layers=1))
    draft = SpecConfig(k=3, acceptance=0.7, draft=load_model("llama-3.2-1b"))
    assert resolve_serving(load_preset("vllm")).overlap_speculative == "heads"
    assert resolve_serving(load_preset("sglang")).overlap_speculative == "none"
    assert resolve_serving(load_preset("trtllm")).overlap_speculative == "heads"  # trt_matrix: MTP, one-engine EAGLE-3

    def ttft(spec, overlap, keeps):
        rep = replace(_replica(overlap), speculative=spec)
        rep = replace(rep, serving=rep.serving.model_copy(update={"overlap_speculative": keeps}))
        return simulate(rep, T, G, rate_per_s=1.0, gaps=gaps).ttft_s

    lag = ttft(heads, True, "heads")[1] - ttft(heads, False, "heads")[1]
    spec_rep = replace(_replica(False), speculative=heads)
    step = spec_rep.timer.decode_s  # one speculative step (k draft passes and the verification)
    # one step later: a step of request 0 alone, its context between the prompt and the prompt + output
    assert step(np.array([16])) * 0.999 <= lag <= step(np.array([416])) * 1.001
    assert ttft(heads, True, "none") == pytest.approx(ttft(heads, False, "none"))
    assert ttft(draft, True, "heads") == pytest.approx(ttft(draft, False, "heads"))


def test_tensorrt_llm_overlaps_from_0_20():
    """engines.yaml trtllm (trt_overlap): PR 4174 renamed the PyTorch backend's opt-in
    enable_overlap_scheduler (0.18.2: default False) to disable_overlap_scheduler (default False),
    first released in 0.20.0; the run's own argument sets it either way."""
    p = load_preset("trtllm")
    assert resolve_serving(p).overlap_schedule is True
    assert resolve_serving(p, version="0.17.post1.dev (trtllm-serve --backend pytorch)").overlap_schedule is False
    assert resolve_serving(p, version="0.19.0").overlap_schedule is False
    assert resolve_serving(p, version="0.20.0").overlap_schedule is True
    assert resolve_serving(p, version="1.0.0", engine_args={"disable_overlap_scheduler": True}).overlap_schedule is False


def test_pipeline_stages_and_speculation_schedule_between_steps():
    """Both engines turn overlap scheduling off under pipeline parallelism (SGLang 0.5.7 server_args
    line 1916, vLLM 0.14 config/vllm.py), and SGLang with speculative decoding: the arrival of the first
    test then waits no extra step."""
    from dataclasses import replace

    T, G = np.array([16, 16]), np.array([400, 8])
    gaps = np.array([0.0, 0.1])
    m = load_model("llama-3.1-8b")
    hw = load_hardware("h100-sxm")
    for on in (True, False):
        rep = Replica(m, hw, 1, 64, Dtypes.resolve(m), Serving(overlap_schedule=on), pp=2)
        if on:
            lagged = simulate(rep, T, G, rate_per_s=1.0, gaps=gaps).ttft_s
        else:
            plain = simulate(rep, T, G, rate_per_s=1.0, gaps=gaps).ttft_s
    assert lagged == pytest.approx(plain)
    from calc.cost.speculative import SpecConfig

    spec = SpecConfig(k=3, acceptance=0.7, draft=load_model("llama-3.2-1b"))
    on, off = (replace(_replica(v), speculative=spec) for v in (True, False))
    assert simulate(on, T, G, rate_per_s=1.0, gaps=gaps).ttft_s == pytest.approx(
        simulate(off, T, G, rate_per_s=1.0, gaps=gaps).ttft_s)
