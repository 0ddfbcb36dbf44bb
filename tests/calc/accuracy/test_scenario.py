"""From a run to a scenario: where each condition comes from, and the errors for what is missing."""

import json
from pathlib import Path

import pytest

from calc.accuracy.benchmarks import read_results
from calc.accuracy.scenario import Conditions, resolve, resolve_model_id
from calc.core.errors import SpecError

BENCH = Path(__file__).resolve().parents[2] / "fixtures" / "bench"


def test_model_ids_resolve_to_catalog_names():
    assert resolve_model_id("llama-3.1-8b") == "llama-3.1-8b"
    assert resolve_model_id("meta-llama/Llama-3.1-8B-Instruct") == "llama-3.1-8b"  # HF_IDS
    assert resolve_model_id("meta-llama/Llama-3.1-8B") == "llama-3.1-8b"  # the catalog's own source config
    assert resolve_model_id("Qwen/Qwen2.5-7B") == "qwen2.5-7b"
    assert resolve_model_id("someone/unknown-model") is None


def test_options_win_over_sidecar_over_file(tmp_path):
    src = BENCH / "llama-bench.json"
    p = tmp_path / "lb.json"
    p.write_text(src.read_text())
    (tmp_path / "lb.roofline.yaml").write_text("model: llama-3-8b\nhardware: rtx-3090\nkv_dtype: int8\n")
    run = read_results(p)[0]
    sc = resolve(run, Conditions())
    assert (sc.model, sc.hardware, sc.kv_dtype, sc.weight_dtype) == ("llama-3-8b", "rtx-3090", "int8", "int4")
    assert (sc.origin["hardware"], sc.origin["weight_dtype"], sc.origin["kv_dtype"]) == ("sidecar", "file", "sidecar")
    sc = resolve(run, Conditions(hardware="l4", kv_dtype="fp16"))
    assert (sc.hardware, sc.kv_dtype, sc.origin["hardware"]) == ("l4", "fp16", "option")
    assert sc.engine == "llama.cpp" and any("llama.cpp" in a for a in sc.assumed)


def test_serving_result_needs_hardware_and_names_the_sidecar():
    run = read_results(BENCH / "vllm-serve-concurrency16.json")[0]
    with pytest.raises(SpecError) as e:
        resolve(run, Conditions())
    msg = str(e.value)
    assert "vllm-serve-concurrency16.json" in msg and "hardware" in msg and "vllm-serve-concurrency16.roofline.yaml" in msg
    sc = resolve(run, Conditions(hardware="h100-sxm"))
    assert sc.model == "llama-3.1-8b" and sc.origin["model"] == "file"
    assert list(sc.prompt_lens) == [512] and list(sc.output_lens) == [128]


def test_run_without_lengths_is_an_error_naming_the_file():
    run = read_results(BENCH / "vllm-latency-nolengths.json")[0]
    with pytest.raises(SpecError) as e:
        resolve(run, Conditions(model="llama-3.1-8b", hardware="h100-sxm"))
    assert "vllm-latency-nolengths.json" in str(e.value) and "batch, prompt_len, output_len" in str(e.value)


def test_serving_run_without_any_lengths(tmp_path):
    d = json.loads((BENCH / "vllm-serve-concurrency16.json").read_text())
    del d["total_input_tokens"], d["total_output_tokens"]
    p = tmp_path / "r.json"
    p.write_text(json.dumps(d))
    with pytest.raises(SpecError, match="no prompt/output lengths"):
        resolve(read_results(p)[0], Conditions(hardware="h100-sxm"))
    (tmp_path / "r.roofline.yaml").write_text("prompt_len: 300\noutput_len: 50\n")
    sc = resolve(read_results(p)[0], Conditions(hardware="h100-sxm"))
    assert (sc.prompt_lens[0], sc.output_lens[0]) == (300, 50)


def test_latency_sidecar_gives_batch_and_derived_throughput():
    run = read_results(BENCH / "vllm-latency.json")[0]
    sc = resolve(run, Conditions(model="llama-3.1-8b", hardware="h100-sxm"))
    assert (sc.batch, sc.prompt_lens[0], sc.output_lens[0]) == (8, 32, 128)
    assert sc.measured["output_tokens_per_s"] == pytest.approx(8 * 128 / 1.2913)  # B G / avg_latency


def test_sidecar_typo_is_an_error(tmp_path):
    p = tmp_path / "lb.json"
    p.write_text((BENCH / "llama-bench.json").read_text())
    (tmp_path / "lb.roofline.yaml").write_text("modle: llama-3-8b\n")
    with pytest.raises(SpecError) as e:
        resolve(read_results(p)[0], Conditions())
    assert "lb.roofline.yaml" in str(e.value) and "modle" in str(e.value)


def test_llamabench_layer_split_and_partial_offload(tmp_path):
    rows = json.loads((BENCH / "llama-bench.json").read_text())
    rows[1]["gpu_info"] = "NVIDIA GeForce RTX 4090, NVIDIA GeForce RTX 4090"
    rows[0]["n_gpu_layers"] = 20
    p = tmp_path / "lb.json"
    p.write_text(json.dumps(rows))
    pp_row, tg_row = read_results(p)
    sc = resolve(tg_row, Conditions(model="llama-3-8b"))
    assert (sc.tp, sc.pp, sc.gpus) == (1, 2, 2)  # split_mode layer over two GPUs: pipeline stages
    with pytest.raises(SpecError, match="20 of 32 layers"):
        resolve(pp_row, Conditions(model="llama-3-8b"))


def test_expert_parallelism_reaches_the_replica_and_a_bad_split_is_refused():
    """Mixtral-8x7B served TP2 with its 8 experts over both GPUs (EP2): each GPU holds 4 whole
    experts (expert TP = TP / EP = 1), as many weight bytes as half of each of the 8 under TP2;
    EP3 does not divide TP2, and the refusal names ep."""
    from calc.accuracy.compare import load_preset, replica

    run = read_results(BENCH / "vllm-serve-concurrency16.json")[0]
    base = dict(model="mixtral-8x7b", hardware="h100-sxm", tp=2)
    sc = resolve(run, Conditions(**base, ep=2))
    assert (sc.ep, sc.origin["ep"]) == (2, "option")
    rep = replica(sc, load_preset("vllm"), 16)
    assert (rep.par.ep, rep.par.expert_tp, rep.par.pp) == (2, 1, 1)
    flat = replica(resolve(run, Conditions(**base)), load_preset("vllm"), 16)
    assert flat.par.ep == 1 and rep.kv.weights_bytes == flat.kv.weights_bytes
    with pytest.raises(SpecError, match="ep"):
        resolve(run, Conditions(**base, ep=3))
