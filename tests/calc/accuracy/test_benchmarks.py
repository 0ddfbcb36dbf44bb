"""The readers: which field of each tool's file is which metric, in which unit (hand-checked
against the fixtures, which follow each tool's writer: tests/fixtures/bench/README.md)."""

import json
from pathlib import Path

import numpy as np
import pytest

from calc.accuracy.benchmarks import read_results
from calc.core.errors import SpecError

BENCH = Path(__file__).resolve().parents[2] / "fixtures" / "bench"


def doc(name):
    return json.loads((BENCH / name).read_text())


def test_vllm_serve_fields_ms_to_seconds_and_load():
    d = doc("vllm-serve-concurrency16.json")
    (run,) = read_results(BENCH / "vllm-serve-concurrency16.json")
    m = run.measured
    assert run.format == "vllm-serve" and run.load == "concurrency" and run.concurrency == 16
    assert run.rate_per_s is None  # "request_rate": "inf"
    assert m["ttft_mean_s"] == pytest.approx(d["mean_ttft_ms"] / 1000)
    assert m["ttft_p50_s"] == pytest.approx(d["median_ttft_ms"] / 1000)
    assert m["tpot_p99_s"] == pytest.approx(d["p99_tpot_ms"] / 1000)
    assert m["itl_p99_s"] == pytest.approx(d["p99_itl_ms"] / 1000)
    assert m["output_tokens_per_s"] == d["output_throughput"]  # tokens/s, no conversion
    assert m["requests_per_s"] == d["request_throughput"]
    assert "e2e_mean_s" not in m  # e2el is not in vLLM's default --percentile-metrics
    # no --save-detailed: mean lengths from the totals, 20480 / 40 and 5120 / 40
    assert (run.prompt_len, run.output_len, run.prompt_lens) == (512, 128, None)
    assert run.model_id == "meta-llama/Llama-3.1-8B-Instruct"


def test_vllm_serve_detailed_keeps_requests_and_tpot_definition():
    d = doc("vllm-serve-rate4-detailed.json")
    (run,) = read_results(BENCH / "vllm-serve-rate4-detailed.json")
    assert run.load == "rate" and run.rate_per_s == 4.0 and run.burstiness == 1.0
    assert "request_goodput:" in d  # the old script's key, with its colon
    assert run.prompt_lens == tuple(d["input_lens"]) and run.output_lens == tuple(d["output_lens"])
    # vLLM's TPOT: per request (latency - ttft) / (G - 1), latency = ttft + sum of the gaps
    tpot = [sum(itl) / (g - 1) for itl, g in zip(d["itls"], d["output_lens"], strict=True)]
    assert run.measured["tpot_mean_s"] == pytest.approx(np.mean(tpot))
    # ITL: every gap, so its mean is the token-weighted one
    gaps = [x for itl in d["itls"] for x in itl]
    assert run.measured["itl_mean_s"] == pytest.approx(np.mean(gaps))
    assert run.measured["ttft_mean_s"] == pytest.approx(np.mean(d["ttfts"]))  # ttfts are seconds


def test_vllm_latency_is_seconds_and_a_batch():
    (run,) = read_results(BENCH / "vllm-latency.json")
    assert run.format == "vllm-latency" and run.load == "batch"
    assert run.measured == {"e2e_mean_s": 1.2913, "e2e_p50_s": 1.2913, "e2e_p99_s": 1.2954}


def test_sglang_jsonl_two_runs():
    lines = [json.loads(x) for x in (BENCH / "sglang.jsonl").read_text().splitlines()]
    assert lines[0]["request_rate"] == float("inf")  # written as Infinity by json.dumps
    runs = read_results(BENCH / "sglang.jsonl")
    assert [r.concurrency for r in runs] == [4, 16] and {r.load for r in runs} == {"concurrency"}
    m, d = runs[1].measured, lines[1]
    assert m["e2e_mean_s"] == pytest.approx(d["mean_e2e_latency_ms"] / 1000)
    assert m["e2e_p99_s"] == pytest.approx(d["p99_e2e_latency_ms"] / 1000)
    assert m["tpot_p50_s"] == pytest.approx(d["median_tpot_ms"] / 1000)
    assert m["itl_mean_s"] == pytest.approx(d["mean_itl_ms"] / 1000)
    assert (runs[1].prompt_len, runs[1].output_len) == (1024, 256)  # 65536 / 64, 16384 / 64
    assert runs[1].model_id is None  # SGLang writes no model id


def test_guidellm_units_and_strategies():
    d = doc("guidellm.json")
    sync, conc = read_results(BENCH / "guidellm.json")
    assert (sync.load, sync.concurrency) == ("concurrency", 1)  # synchronous: one at a time
    assert (conc.load, conc.concurrency) == ("concurrency", 8)  # concurrent, streams 8
    met = d["benchmarks"][1]["metrics"]
    assert conc.measured["ttft_p99_s"] == pytest.approx(met["time_to_first_token_ms"]["successful"]["percentiles"]["p99"] / 1000)
    assert conc.measured["e2e_mean_s"] == met["request_latency"]["successful"]["mean"]  # already seconds
    assert conc.measured["itl_mean_s"] == pytest.approx(met["inter_token_latency_ms"]["successful"]["mean"] / 1000)
    assert "tpot_mean_s" not in conc.measured  # time_per_output_token_ms is not vLLM's TPOT
    assert conc.measured["output_tokens_per_s"] == met["output_tokens_per_second"]["successful"]["mean"]
    assert (conc.prompt_len, conc.output_len) == (256, 128)
    assert conc.model_id == "Qwen/Qwen2.5-7B-Instruct"


def test_guidellm_v07_strategy_under_config(tmp_path):
    d = doc("guidellm.json")
    b = d["benchmarks"][1]
    b["config"] = {"strategy": {"type_": "poisson", "rate": 2.5}, "backend": {"model": "m"}}
    del b["args"]
    d["metadata"] = {"version": 2, "guidellm_version": "0.7.3"}
    p = tmp_path / "g.json"
    p.write_text(json.dumps(d))
    run = read_results(p)[1]
    assert (run.load, run.rate_per_s, run.burstiness, run.tool_version) == ("rate", 2.5, 1.0, "0.7.3")


def test_llamabench_json_csv_jsonl_agree(tmp_path):
    rows = json.loads((BENCH / "llama-bench.json").read_text())
    (tmp_path / "lb.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name in (BENCH / "llama-bench.json", BENCH / "llama-bench.csv", tmp_path / "lb.jsonl"):
        pp, tg = read_results(name)
        assert pp.measured["prefill_tokens_per_s"] == pytest.approx(rows[0]["avg_ts"], rel=1e-6)
        assert tg.measured["decode_tokens_per_s"] == pytest.approx(rows[1]["avg_ts"], rel=1e-6)
        assert (pp.prompt_len, pp.output_len, tg.prompt_len, tg.output_len) == (512, 0, 0, 512)
        assert pp.conditions["hardware"] == "rtx-4090"  # "NVIDIA GeForce RTX 4090"
        assert pp.conditions["weight_dtype"] == "int4"  # "llama 8B Q4_K - Medium"
        assert pp.conditions["kv_dtype"] == "fp16"  # type_k f16
        assert pp.ubatch == 512 and pp.depth == 0


def test_llamabench_avg_ts_is_tokens_over_seconds():
    rows = json.loads((BENCH / "llama-bench.json").read_text())
    for r in rows:  # avg_ts = mean over samples of (n_prompt + n_gen) * 1e9 / ns
        want = np.mean([(r["n_prompt"] + r["n_gen"]) * 1e9 / ns for ns in r["samples_ns"]])
        assert r["avg_ts"] == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("name, needle", [
    ("truncated.json", "truncated or invalid JSON"),
    ("unknown.json", "unknown format"),
])
def test_bad_files_name_the_file(name, needle):
    with pytest.raises(SpecError) as e:
        read_results(BENCH / name)
    assert str(BENCH / name) in str(e.value) and needle in str(e.value)


@pytest.mark.parametrize("text, needle", [
    ("", "empty file"),
    ("a,b\n1,2\n", "a CSV without llama-bench's"),
    ('{"x": 1}\n{"y": ', "line 2"),
    ('[{"n_prompt": 1}]', "not llama-bench output"),
    ('{"benchmarks": [{"metrics": {}}]}', "strategy"),
])
def test_more_bad_files(tmp_path, text, needle):
    p = tmp_path / "r.json"
    p.write_text(text)
    with pytest.raises(SpecError) as e:
        read_results(p)
    assert needle in str(e.value) and str(p) in str(e.value)


def test_missing_file():
    with pytest.raises(SpecError, match="no such file"):
        read_results(BENCH / "nope.json")


@pytest.mark.parametrize("strategy, load, conc, rate", [
    ({"type_": "throughput", "max_concurrency": 32}, "concurrency", 32, None),
    ({"type_": "throughput", "max_concurrency": None}, "burst", 80, None),  # all 80 requests at once
    ({"type_": "constant", "rate": 3.0}, "rate", None, 3.0),
])
def test_guidellm_strategies(tmp_path, strategy, load, conc, rate):
    d = doc("guidellm.json")
    d["benchmarks"][1]["args"]["strategy"] = strategy
    p = tmp_path / "g.json"
    p.write_text(json.dumps(d))
    run = read_results(p)[1]
    assert (run.load, run.concurrency, run.rate_per_s) == (load, conc, rate)


def test_a_run_with_nothing_completed(tmp_path):
    d = doc("vllm-serve-concurrency16.json")
    d["completed"], d["failed"] = 0, 40
    p = tmp_path / "r.json"
    p.write_text(json.dumps(d))
    with pytest.raises(SpecError, match="0 requests completed"):
        read_results(p)


def test_guidellm_per_request_lengths_only_when_not_sampled(tmp_path):
    d = doc("guidellm.json")
    b = d["benchmarks"][0]  # 20 requests
    b["requests"]["successful"] = [{"prompt_tokens": 100 + i, "output_tokens": 50} for i in range(20)]
    p = tmp_path / "g.json"
    p.write_text(json.dumps(d))
    assert read_results(p)[0].prompt_lens == tuple(range(100, 120))
    b["requests"]["successful"] = b["requests"]["successful"][:5]  # a sample: the means stand
    p.write_text(json.dumps(d))
    assert read_results(p)[0].prompt_lens is None
