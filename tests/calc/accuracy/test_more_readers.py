"""GenAI-Perf, trtllm-bench, LMDeploy and vLLM's current serve layout: which field is which
metric, in which unit, and the load each implies. The fixtures (tests/fixtures/bench/more_formats.py)
hold four requests: prompts 200, outputs 101 tokens, TTFT 100/120/140/160 ms, 100 gaps of
10/12/14/16 ms each (latency 1100/1320/1540/1760 ms), 4 s from first send to last token."""

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from calc.accuracy.benchmarks import read_results
from calc.accuracy.compare import arrivals, compare_files, load_preset, predict
from calc.accuracy.scenario import Conditions, resolve

BENCH = Path(__file__).resolve().parents[2] / "fixtures" / "bench"
H100 = Conditions(hardware="h100-sxm")


def test_genaiperf_json_inter_token_latency_is_tpot():
    (run,) = read_results(BENCH / "genai-perf.json")
    m = run.measured
    assert (run.format, run.load, run.concurrency) == ("genai-perf", "concurrency", 2)  # stimulus {"concurrency": 2}
    assert m["ttft_mean_s"] == pytest.approx((100 + 120 + 140 + 160) / 4 / 1000)  # 130 ms
    # inter_token_latency = (latency - TTFT) / (101 - 1) per request: 10..16 ms, mean 13 ms: vLLM's TPOT
    assert m["tpot_mean_s"] == pytest.approx(13e-3) and "itl_mean_s" not in m
    # numpy's p99 of 10, 12, 14, 16: 14 + 0.97 * 2 = 15.94 ms
    assert m["tpot_p99_s"] == pytest.approx(15.94e-3)
    assert m["e2e_mean_s"] == pytest.approx((1100 + 1320 + 1540 + 1760) / 4 / 1000)
    assert m["output_tokens_per_s"] == pytest.approx(4 * 101 / 4.0)  # 404 tokens over 4 s
    assert m["requests_per_s"] == pytest.approx(1.0)
    assert (run.prompt_len, run.output_len, run.num_requests) == (200, 101, 4)
    assert run.model_id == "meta-llama/Llama-3.1-8B-Instruct"


def test_genaiperf_csv_same_numbers_load_from_the_sidecar():
    (j,) = read_results(BENCH / "genai-perf.json")
    (c,) = read_results(BENCH / "genai-perf.csv")
    assert c.load is None and c.model_id is None  # the CSV keeps no configuration
    for k, v in j.measured.items():  # "1,430.00": two decimals, thousands separated
        assert c.measured[k] == pytest.approx(v, abs=0.005e-3 if k.endswith("_s") else 0.005)
    sc = resolve(c, Conditions())  # genai-perf.roofline.yaml: concurrency 2, the H100, the model
    assert (sc.run.load, sc.run.concurrency, sc.model, sc.hardware) == ("concurrency", 2, "llama-3.1-8b", "h100-sxm")
    assert sc.origin["model"] == "sidecar"


def test_genaiperf_2024_layout_and_request_rate(tmp_path):
    d = json.loads((BENCH / "genai-perf.json").read_text())
    d["input_config"] = {"model": ["m"], "concurrency": None, "request_rate": 2.5, "streaming": True}
    p = tmp_path / "g.json"
    p.write_text(json.dumps(d))
    (run,) = read_results(p)
    assert (run.load, run.rate_per_s, run.model_id) == ("rate", 2.5, "m")
    assert run.burstiness >= 1e4  # perf_analyzer's default --request-distribution constant: even gaps


def test_trtllm_bench_report():
    (run,) = read_results(BENCH / "trtllm-bench.json")
    m = run.measured
    # PercentileStats pNN = sorted[int(4 q)]: p50 = sorted[2], p99 = sorted[3]
    assert (m["e2e_p50_s"], m["e2e_p99_s"]) == pytest.approx((1.540, 1.760))
    assert m["e2e_mean_s"] == pytest.approx(1.430)
    assert (m["ttft_mean_s"], m["ttft_p50_s"]) == pytest.approx((0.130, 0.140))
    assert (m["tpot_mean_s"], m["tpot_p99_s"]) == pytest.approx((0.013, 0.016))
    assert m["output_tokens_per_s"] == pytest.approx(101.0) and m["requests_per_s"] == pytest.approx(1.0)
    assert run.conditions == {"tp": 1, "pp": 1, "max_num_seqs": 64, "weight_dtype": "fp8", "kv_dtype": "fp8"}
    assert (run.load, run.concurrency) == ("burst", 4)  # --concurrency -1: all four at once
    sc = resolve(run, H100)
    assert (sc.engine, sc.max_num_seqs, sc.weight_dtype) == ("trtllm", 64, "fp8")


def test_trtllm_bench_latency_is_one_at_a_time(tmp_path):
    d = json.loads((BENCH / "trtllm-bench.json").read_text())
    d["world_info"]["max_batch_size"] = 1
    p = tmp_path / "lat.json"
    p.write_text(json.dumps(d))
    (run,) = read_results(p)
    assert (run.load, run.concurrency) == ("concurrency", 1)


def test_trtllm_sidecar_concurrency_wins(tmp_path):
    p = tmp_path / "t.json"
    p.write_text((BENCH / "trtllm-bench.json").read_text())
    (tmp_path / "t.roofline.yaml").write_text("hardware: h100-sxm\nconcurrency: 2\n")
    sc = resolve(read_results(p)[0], Conditions())
    assert (sc.run.load, sc.run.concurrency) == ("concurrency", 2)


def test_lmdeploy_restful_rate_and_inf_is_a_burst():
    rate, burst = read_results(BENCH / "lmdeploy-restful.csv")
    assert (rate.format, rate.load, rate.rate_per_s, rate.burstiness) == ("lmdeploy-restful", "rate", 2.0, 1.0)
    assert (burst.load, burst.concurrency) == ("burst", 4)  # request_rate inf, no concurrency limit in the script
    m = rate.measured
    assert (m["ttft_mean_s"], m["tpot_mean_s"], m["itl_mean_s"], m["e2e_mean_s"]) == pytest.approx(
        (0.130, 0.013, 0.013, 1.430))
    assert (rate.prompt_len, rate.output_len) == (800 / 4, 404 / 4)


def test_lmdeploy_throughput_bs_is_the_closed_loop_and_batch_cap():
    (run,) = read_results(BENCH / "lmdeploy-throughput.csv")
    assert (run.format, run.load, run.concurrency, run.conditions["max_num_seqs"]) == (
        "lmdeploy-throughput", "concurrency", 2, 2)
    assert run.measured["output_tokens_per_s"] == pytest.approx(101.0)


def test_vllm_current_layout_ramp_and_failed_request():
    (run,) = read_results(BENCH / "vllm-serve-ramp.json")
    assert run.ramp_up == ("linear", 1.0, 4.0) and run.load == "rate" and run.rate_per_s is None
    assert run.prompt_lens == (200,) * 4 and run.output_lens == (101,) * 4  # the failed 5th left out
    assert any("1 failed" in n for n in run.notes)


def test_ramp_arrivals_follow_vllm_rates():
    (run,) = read_results(BENCH / "vllm-serve-ramp.json")
    from calc.serving.sim.simulate import arrival_gaps

    run = replace(run, num_requests=5)
    gaps = arrivals(run, 5)
    rates = 1.0 + (4.0 - 1.0) * np.arange(5) / 4  # linear: 1, 1.75, 2.5, 3.25, 4 requests/s
    assert gaps == pytest.approx(arrival_gaps(5, "poisson", 1.0) / rates)
    exp = arrivals(replace(run, ramp_up=("exponential", 1.0, 4.0)), 5)
    assert exp == pytest.approx(arrival_gaps(5, "poisson", 1.0) / (4.0 ** (np.arange(5) / 4)))


def test_burst_is_every_request_at_t0(simulate_calls):
    seen = simulate_calls
    _, burst = read_results(BENCH / "lmdeploy-restful.csv")
    p = predict(resolve(burst, Conditions(hardware="h100-sxm", model="llama-3.1-8b")), load_preset("default"))
    assert seen["rate_per_s"] == 1.0 and list(seen["gaps"]) == [0.0] * 4
    assert math.isfinite(p["ttft_mean_s"])


def test_each_new_format_is_predicted():
    files = [BENCH / f for f in ("genai-perf.json", "genai-perf.csv", "trtllm-bench.json", "lmdeploy-restful.csv",
                                 "lmdeploy-throughput.csv", "vllm-serve-ramp.json")]
    results, failures, _ = compare_files(files, Conditions(hardware="h100-sxm", model="llama-3.1-8b"))
    assert not failures
    assert len(results) == 7
    for r in results:
        assert all(math.isfinite(m.predicted) for m in r.metrics if m.metric != "itl_p50_s" and m.metric != "itl_p99_s")
