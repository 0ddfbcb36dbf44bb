"""Engines whose CUDA graphs hold decode-only steps (TensorRT-LLM, SGLang, LMDeploy, TGI) launch
a step or pass with prefill eagerly; vLLM's piecewise graphs hold any step up to their token cap.
The extra time is the pass's kernels x the preset's eager launch cost, worked out below."""

import pytest

from calc import load_hardware, load_model
from calc.cost.dtypes import Dtypes
from calc.cost.latency import estimate
from calc.cost.setup import Setup
from calc.serving.replica.capacity import Replica, steady_state
from calc.spec.engine import load_engine
from calc.spec.scheduler import Serving, resolve_serving


def test_the_rule_by_step_kind():
    decode_only = Serving(graph_max_batch=128, eager_launch_us=8.8, graph_prefill=False)
    assert not decode_only.eager(64) and decode_only.eager(200)  # decode steps: by the cap
    assert decode_only.eager(1, prefill=True)  # any step with prefill, however small
    piecewise = Serving(graph_max_batch=512, eager_launch_us=8.8)
    assert not piecewise.eager(300, prefill=True) and piecewise.eager(600, prefill=True)
    assert (decode_only.prefill_launch_us, piecewise.prefill_launch_us) == (8.8, 0.0)
    assert {n: load_engine(n).scheduler.graph_prefill for n in ("trtllm", "sglang", "lmdeploy", "tgi", "vllm")} \
        == {"trtllm": False, "sglang": False, "lmdeploy": False, "tgi": False, "vllm": True}


def _replica(hw, max_batch):
    model = load_model("llama-3.1-8b")
    return Replica(model, hw, 1, max_batch, Dtypes.resolve(model), resolve_serving(hw.preset, hw.name, hw.memory_gb))


def _graphed_prefill(engine: str):
    spec = load_engine(engine)
    return spec.model_copy(update={"scheduler": spec.scheduler.model_copy(update={"graph_prefill": True})})


def test_a_prefill_pass_pays_one_eager_launch_per_kernel():
    model, hw = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    trt, graphed = hw.with_engine("trtllm"), hw.with_engine(_graphed_prefill("trtllm"))
    a = estimate(model, trt, 1, 128, 16)
    b = estimate(model, graphed, 1, 128, 16)
    # the difference is a whole number of launches at the preset's 8.8 us, one per kernel the
    # pass launches: the same count a decode step of this engine launches
    kernels = _replica(trt, 8).kernels_per_step
    assert float(a.ttft_s - b.ttft_s) == pytest.approx(kernels * 8.8e-6)
    assert kernels > model.num_layers  # several kernels a layer
    assert float(a.tpot_s) == pytest.approx(float(b.tpot_s))  # decode steps replay graphs either way
    # ideal: no engine, no launches
    ideal = Setup.of(ideal=True)
    assert float(estimate(model, trt, 1, 128, 16, ideal).ttft_s) == float(estimate(model, graphed, 1, 128, 16, ideal).ttft_s)


def test_the_closed_form_charges_mixed_steps_as_the_simulator_does():
    hw = load_hardware("h100-sxm")
    eager, graphed = _replica(hw.with_engine("trtllm"), 32), _replica(hw.with_engine(_graphed_prefill("trtllm")), 32)
    # 64-token prompts beside 31 decodes: 95 tokens, under TensorRT-LLM's 128-token graph cap, so
    # only the decode-only rule makes the mixed step eager
    a, b = steady_state(eager, [64], [512]), steady_state(graphed, [64], [512])
    assert a.prefill_share < 1 and b.mixed_step_s > 0
    assert a.mixed_step_s - b.mixed_step_s == pytest.approx(eager.eager_step_s)
    assert a.decode_step_s == pytest.approx(b.decode_step_s)  # 32 decodes: under the 128 cap
    assert eager.eager_step_s == pytest.approx(eager.kernels_per_step * 8.8e-6)


def test_vllm_v0_graphs_hold_decode_only_steps():
    # vLLM's V0 engine (the default before 0.8.0): _use_captured_graph needs decode_only, and its
    # capture sizes reach the first multiple of 8 >= max_num_seqs (up to 8192), so a decode-only
    # step of any batch the scheduler forms replays a graph and a step with a prompt chunk runs
    # eagerly: 8.8 us more per kernel than V1's piecewise graphs, which hold it up to 512 tokens
    hw = load_hardware("h100-sxm")
    vllm = load_engine("vllm")
    v0 = resolve_serving(vllm, hw.name, hw.memory_gb, version="0.7.3")
    v1 = resolve_serving(vllm, hw.name, hw.memory_gb, version="0.8.0")
    assert (v0.graph_prefill, v1.graph_prefill) == (False, True)
    assert v0.eager(64, prefill=True) and not v1.eager(64, prefill=True)  # a 64-token prompt chunk
    assert not v0.eager(1024) and not v0.eager(8192)  # decode-only: every batch up to 8192
    assert (v0.prefill_launch_us, v1.prefill_launch_us) == (8.8, 0.0)
    model = load_model("llama-3.1-8b")
    h = hw.with_engine("vllm")
    r0 = Replica(model, h, 1, 32, Dtypes.resolve(model), v0)
    r1 = Replica(model, h, 1, 32, Dtypes.resolve(model), v1)
    a, b = steady_state(r0, [64], [512]), steady_state(r1, [64], [512])
    assert a.mixed_step_s - b.mixed_step_s == pytest.approx(r0.kernels_per_step * 8.8e-6)
