"""Launch commands: the engine's own flags carry the scheduler the simulation ran, the
parallelism and the dtypes; a preset of no serving engine has none; plan --init's workload
plans to a folder that holds them."""

import json

import pytest
from typer.testing import CliRunner

from calc.cli.app import app
from calc.cost.dtypes import Dtypes
from calc.serving.planner.launch import launch, model_id
from calc.serving.replica.capacity import Replica
from calc.spec.catalog import load_hardware, load_model
from calc.spec.engine import load_engine
from calc.spec.scheduler import engine_args_of, resolve_serving


def _rep(engine, model="llama-3.1-70b", hw="h100-sxm", tp=2, mb=64, weight=None, kv=None, ep=1):
    m = load_model(model)
    h = load_hardware(hw).with_engine(engine)
    serving = resolve_serving(load_engine(engine), h.name, h.reported_memory_gb)  # the preset's, on this GPU
    return Replica(m, h, tp, mb, Dtypes.resolve(m, weight, kv), serving, ep=ep)


def _flags(cmd) -> dict:
    argv = cmd.argv()
    out, i = {}, 0
    while i < len(argv):
        if argv[i].startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if nxt is not None and not nxt.startswith("--"):
                out[argv[i]] = nxt
                i += 2
                continue
            out[argv[i]] = None
        i += 1
    return out


def test_model_id_is_the_cited_checkpoint():
    # llama-3.1-70b.yaml cites https://huggingface.co/meta-llama/Llama-3.1-70B/blob/main/config.json
    assert model_id(load_model("llama-3.1-70b")) == "meta-llama/Llama-3.1-70B"


def test_vllm_command_carries_the_simulated_scheduler():
    r = _rep("vllm")
    cmd = launch(r, 3, 4096)
    assert cmd.argv()[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-70B"] and cmd.replicas == 3
    f = _flags(cmd)
    s = r.serving
    assert f["--tensor-parallel-size"] == "2" and f["--pipeline-parallel-size"] == "1"
    assert f["--max-model-len"] == "4096" and f["--max-num-seqs"] == "64"  # the replica's max batch
    assert f["--max-num-batched-tokens"] == str(s.max_batched_tokens)
    assert f["--gpu-memory-utilization"] == f"{s.gpu_memory_utilization:g}" and f["--block-size"] == str(s.block_size)
    assert "--enable-chunked-prefill" in f and f["--enable-chunked-prefill"] is None  # a switch
    assert json.loads(f["--compilation-config"]) == {"max_cudagraph_capture_size": s.graph_max_batch}
    assert "--quantization" not in f and "--kv-cache-dtype" not in f  # bf16 weights and KV


def test_fp8_and_expert_parallel_flags():
    f = _flags(launch(_rep("vllm", weight="fp8", kv="fp8"), 1, 4096))
    assert f["--quantization"] == "fp8" and f["--kv-cache-dtype"] == "fp8"
    mix = launch(_rep("vllm", model="mixtral-8x7b", tp=4, ep=2), 1, 4096)
    assert "--enable-expert-parallel" in _flags(mix)
    assert any("EP = TP 4" in n for n in mix.notes)  # vLLM cannot say EP2 over TP4
    # DeepSeek-V3 ships fp8: nothing to quantise at load
    assert "--quantization" not in _flags(launch(_rep("vllm", model="deepseek-v3", hw="h200", tp=8), 1, 4096))


def test_sglang_and_trtllm_names():
    r = _rep("sglang")
    f = _flags(launch(r, 1, 4096))
    assert f["--tp-size"] == "2" and f["--max-running-requests"] == "64"
    assert f["--mem-fraction-static"] == f"{r.serving.gpu_memory_utilization:g}"
    assert f["--chunked-prefill-size"] == str(r.serving.max_batched_tokens)
    assert ("--enable-mixed-chunk" in f) == (r.serving.prefill == "mixed")
    assert "--enable-dp-attention" not in f  # a switch: only when the scheduler has it on
    dp = Replica(r.model, r.hw, 2, 64, r.dt, r.serving.model_copy(update={"dp_attention": True}))
    assert "--enable-dp-attention" in _flags(launch(dp, 1, 4096))
    # overlap scheduling is SGLang's default: the switch appears only to turn it off
    assert r.serving.overlap_schedule and "--disable-overlap-schedule" not in f
    off = Replica(r.model, r.hw, 2, 64, r.dt, r.serving.model_copy(update={"overlap_schedule": False}))
    assert "--disable-overlap-schedule" in _flags(launch(off, 1, 4096))
    t = _rep("trtllm", kv="fp8")
    cmd = launch(t, 1, 4096)
    f = _flags(cmd)
    assert cmd.argv()[:2] == ["trtllm-serve", "meta-llama/Llama-3.1-70B"] and f["--backend"] == "pytorch"
    assert f["--tp_size"] == "2" and f["--max_batch_size"] == "64"
    assert f["--max_num_tokens"] == str(t.serving.max_batched_tokens)
    opts = cmd.options_file
    # KV reserved to completion (preemption none) is TensorRT-LLM's GUARANTEED_NO_EVICT
    assert t.serving.preemption == "none" and opts["scheduler_config"] == {"capacity_scheduler_policy": "GUARANTEED_NO_EVICT"}
    assert opts["kv_cache_config"]["dtype"] == "fp8" and opts["kv_cache_config"]["tokens_per_block"] == t.serving.block_size
    assert "extra_llm_api_options.yaml <<'EOF'" in cmd.shell()
    # the PyTorch backend overlaps by default (from 0.20.0); the file says which the plan ran
    assert t.serving.overlap_schedule and opts["disable_overlap_scheduler"] is False
    off = Replica(t.model, t.hw, 2, 64, t.dt, t.serving.model_copy(update={"overlap_schedule": False}))
    assert launch(off, 1, 4096).options_file["disable_overlap_scheduler"] is True


def test_value_tables_map_back_to_the_engines_value():
    pre = load_engine("trtllm")
    args = engine_args_of(pre, pre.scheduler.model_copy(update={"preemption": "recompute"}))
    assert args["capacity_scheduler_policy"] == "MAX_UTILIZATION"
    assert "free_gpu_memory_fraction" not in args  # an alias of kv_cache_free_gpu_memory_fraction: said once


def test_tgi_prefill_chunking_is_its_environment_not_a_flag():
    """TGI reads PREFILL_CHUNKING from its environment: chunked (its default) needs nothing; a
    plan without chunking says to set PREFILL_CHUNKING=0, and no launcher flag is made of it."""
    r = _rep("tgi")
    cmd = launch(r, 1, 4096)
    assert r.serving.prefill == "mixed" and not any("prefill-chunking" in a for a in cmd.argv())
    assert not any("PREFILL_CHUNKING" in n for n in cmd.notes)
    off = Replica(r.model, r.hw, r.tp, r.max_batch, r.dt, r.serving.model_copy(update={"prefill": "prefill_first"}))
    cmd = launch(off, 1, 4096)
    assert not any("prefill-chunking" in a for a in cmd.argv())
    assert any(n.startswith("PREFILL_CHUNKING=0") for n in cmd.notes)
    assert engine_args_of(load_engine("tgi"), off.serving)["prefill_chunking"] is False


@pytest.mark.parametrize("engine", ["hf", "llama.cpp", "ideal"])
def test_no_serving_engine_no_command(engine):
    assert launch(_rep(engine), 1, 4096) is None


def test_plan_init_then_plan_out_holds_the_launch_commands(tmp_path):
    w, out = tmp_path / "x.yaml", tmp_path / "p"
    r = CliRunner().invoke(app, ["plan", "--init", str(w)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["plan", str(w), "--out", str(out)])
    assert r.exit_code == 0, r.output
    rec = json.loads((out / "plan.json").read_text())
    (first,) = rec["launch"]
    assert first["argv"][:2] == ["vllm", "serve"] and first["replicas"] == rec["chosen"]["replicas"]
    assert f"--tensor-parallel-size {rec['chosen']['tp']}" in first["shell"]
    assert "How to launch it" in (out / "report.md").read_text() and "vllm serve" in r.output
    assert rec["answer"]["config"] == rec["chosen"]["config"]
    assert {h["hardware"] for h in rec["best_by_hardware"]} == {"h100-sxm", "h200"}


def test_a_kv_token_cap_launches_under_each_engines_name():
    """kv_tokens set (a workload's engine_args): SGLang's --max-total-tokens flag, TensorRT-LLM's
    kv_cache_config max_tokens in the options file; unset, neither appears."""
    from dataclasses import replace as dc_replace

    s = _rep("sglang")
    assert "--max-total-tokens" not in _flags(launch(s, 1, 4096))
    s = dc_replace(s, serving=s.serving.model_copy(update={"kv_tokens": 200_000}))
    assert _flags(launch(s, 1, 4096))["--max-total-tokens"] == "200000"
    t = _rep("trtllm")
    assert "max_tokens" not in launch(t, 1, 4096).options_file.get("kv_cache_config", {})
    t = dc_replace(t, serving=t.serving.model_copy(update={"kv_tokens": 200_000}))
    assert launch(t, 1, 4096).options_file["kv_cache_config"]["max_tokens"] == 200_000
