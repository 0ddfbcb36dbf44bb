"""Predictions of benchmark runs: the published vLLM rows re-expressed as vLLM's result files
reproduce `roofline accuracy`; the other loads map to the right model terms."""

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from calc.accuracy.benchmarks import read_results
from calc.accuracy.benchmarks.llamabench import read as read_llamabench
from calc.accuracy.compare import compare, compare_files, load_preset, predict
from calc.accuracy.harness import load_rows
from calc.accuracy.harness import predict as predict_row
from calc.accuracy.scenario import Conditions, resolve
from calc.core.errors import SpecError
from calc.spec.engine import engines

BENCH = Path(__file__).resolve().parents[2] / "fixtures" / "bench"
PUBLISHED = sorted((BENCH / "published").glob("*.json"))
# published.csv metric -> the metric the tool's file reports
METRIC = {"e2e_s": "e2e_mean_s", "output_tokens_per_s": "output_tokens_per_s"}


def test_published_fixtures_cover_the_vllm_rows_with_lengths():
    rows = {r.id: r for r in load_rows()[0]}
    assert len(PUBLISHED) == 13
    assert all(rows[p.stem].engine == "vllm" for p in PUBLISHED)


@pytest.mark.parametrize("path", PUBLISHED, ids=lambda p: p.stem)
def test_compare_reproduces_roofline_accuracy(path):
    row = {r.id: r for r in load_rows()[0]}[path.stem]
    (run,) = read_results(path)
    result = compare(resolve(run, Conditions()))
    got = {m.metric: m for m in result.metrics}[METRIC[row.metric]]
    assert got.measured == pytest.approx(row.value, rel=1e-9)
    assert got.predicted == pytest.approx(predict_row(row, engines()[row.preset]), rel=1e-12)


def test_llamabench_rows_go_through_prefill_and_decode():
    from calc.cost.dtypes import Dtypes
    from calc.cost.efficiency import Efficiency
    from calc.cost.latency import decode_cost, prefill_cost
    from calc.spec.catalog import load_hardware, load_model

    pp, tg = (resolve(r, Conditions(model="llama-3-8b")) for r in read_results(BENCH / "llama-bench.json"))
    preset = load_preset("llama.cpp")
    model, hw = load_model("llama-3-8b"), load_hardware("rtx-4090").with_engine(preset)
    dt = Dtypes.resolve(model, "int4", "fp16", None, 32)  # GGUF blocks: 32 weights per scale
    eff = Efficiency.of(hw)
    assert pp.attention == tg.attention == "unfused"  # the file's flash_attn 0
    prefill, _ = prefill_cost(model, hw, 1, 512, dt, eff, "unfused")  # pp512: one pass of n_ubatch = 512
    assert predict(pp, preset)["prefill_tokens_per_s"] == pytest.approx(512 / float(prefill.time_s), rel=1e-12)
    steps = decode_cost(model, hw, 1, np.arange(512, dtype=float), dt, eff, "unfused").time_s  # tg512: contexts 0..511
    assert predict(tg, preset)["decode_tokens_per_s"] == pytest.approx(512 / float(np.sum(steps)), rel=1e-12)
    # the published rows these avg_ts came from, as `roofline accuracy` predicts them at their build
    # (a May 2024 one: dequantise + cuBLAS, where the fixture's b7000 runs MMQ; its decode averages
    # 511 steps at contexts 1..511: within a fraction of a percent)
    rows = {r.id: r for r in load_rows()[0]}
    row_pp, row_tg = rows["xd-rtx-4090-8b-q4_k_m-pp512"], rows["xd-rtx-4090-8b-q4_k_m-tg512"]
    then = Conditions(model="llama-3-8b", engine_version=row_pp.engine_version)
    pp_then, tg_then = (resolve(r, then) for r in read_results(BENCH / "llama-bench.json"))
    assert predict(pp_then, preset)["prefill_tokens_per_s"] == pytest.approx(predict_row(row_pp, preset), rel=1e-12)
    assert predict(pp_then, preset)["prefill_tokens_per_s"] < predict(pp, preset)["prefill_tokens_per_s"]
    assert predict(tg_then, preset)["decode_tokens_per_s"] == pytest.approx(predict_row(row_tg, preset), rel=5e-3)


@pytest.mark.parametrize("value,kernel", [(False, "unfused"), (True, "fused"), (0, "unfused"), (1, "fused"),
                                          (-1, "fused"), ("0", "unfused"), ("-1", "fused"), (None, None)])
def test_llamabench_flash_attn_names_the_attention_kernel(value, kernel):
    # builds of 2024 write a BOOL (JSON false/true, CSV "0"/"1"); later an INT, -1 = auto (on where
    # the backend supports it, as CUDA does); absent: the preset's kernel
    (pp, _) = read_results(BENCH / "llama-bench.json")
    cond = {k: v for k, v in pp.conditions.items() if k != "attention"}
    raw = json.loads((BENCH / "llama-bench.json").read_text())[0]
    raw.pop("flash_attn")
    if value is not None:
        raw["flash_attn"] = value
    (run,) = read_llamabench([raw], "lb.json")
    assert run.conditions.get("attention") == kernel
    assert {k: v for k, v in run.conditions.items() if k != "attention"} == cond
    sc = resolve(run, Conditions(model="llama-3-8b"))
    assert sc.attention == kernel


def test_llamabench_flash_attn_on_is_faster_at_a_long_prompt():
    # pp4096 in one 4096-token pass: unfused attention writes and reads the scores (32 heads x 4096^2
    # per layer), the fused kernel does not; the other operators are the same in both
    raw = json.loads((BENCH / "llama-bench.json").read_text())[0]
    raw.update(n_prompt=4096, n_ubatch=4096)
    preset = load_preset("llama.cpp")
    rate = {fa: predict(resolve(read_llamabench([dict(raw, flash_attn=fa)], "lb.json")[0],
                                Conditions(model="llama-3-8b")), preset)["prefill_tokens_per_s"] for fa in (0, 1)}
    assert rate[1] > rate[0]


def test_llamabench_flash_attn_must_be_a_flag():
    raw = json.loads((BENCH / "llama-bench.json").read_text())[0]
    with pytest.raises(SpecError, match="flash_attn"):
        read_llamabench([dict(raw, flash_attn="sometimes")], "lb.json")


def test_prompt_longer_than_ubatch_is_several_passes():
    (pp, _) = read_results(BENCH / "llama-bench.json")
    preset = load_preset("llama.cpp")
    one = predict(resolve(replace(pp, ubatch=512), Conditions(model="llama-3-8b")), preset)["prefill_tokens_per_s"]
    two = predict(resolve(replace(pp, ubatch=256), Conditions(model="llama-3-8b")), preset)["prefill_tokens_per_s"]
    assert two < one  # two passes: weights read twice, a second step overhead


def test_client_side_times_carry_the_request_overhead():
    run = read_results(BENCH / "vllm-serve-concurrency16.json")[0]
    sc = resolve(run, Conditions(hardware="h100-sxm"))
    sc = replace(sc, serving=sc.serving.model_copy(update={"api_servers": None}))  # overheads that overlap
    base = load_preset("vllm")
    a = predict(sc, base.model_copy(update={"request_overhead_us": 0.0}))
    b = predict(sc, base.model_copy(update={"request_overhead_us": 8000.0}))
    assert b["ttft_mean_s"] - a["ttft_mean_s"] == pytest.approx(8e-3)  # 8000 us, TTFT is client-side
    assert b["tpot_mean_s"] == a["tpot_mean_s"]  # token gaps are not
    assert math.isnan(a["itl_p99_s"])  # per-token gaps are not simulated
    assert a["itl_mean_s"] > 0 and a["output_tokens_per_s"] > 0


def test_an_in_process_benchmark_carries_no_request_overhead():
    """vllm bench latency drives LLM.generate in process: no server between, so its e2e holds no
    request_overhead_us (the per-pass fit once read it as if it did: SOURCES.md, timing)."""
    run = read_results(BENCH / "published" / "vllmbk9515-llama-3.1-8b-h200-tp1.json")[0]
    assert run.format == "vllm-latency" and not run.served
    sc = resolve(run, Conditions())
    base = load_preset("vllm")
    a = predict(sc, base.model_copy(update={"request_overhead_us": 0.0}))
    b = predict(sc, base.model_copy(update={"request_overhead_us": 8000.0}))
    assert b["e2e_mean_s"] == a["e2e_mean_s"]
    assert read_results(BENCH / "vllm-serve-concurrency16.json")[0].served  # a client through the server


def test_rate_run_is_simulated_at_its_rate():
    run = read_results(BENCH / "vllm-serve-rate4-detailed.json")[0]
    sc = resolve(run, Conditions(hardware="h100-sxm"))
    from calc.serving.sim.simulate import arrival_gaps

    p = predict(sc, load_preset("vllm"))
    # the tools divide by first send to last completion: at least the span of the 12 Poisson
    # arrivals at 4/s (the simulator's seed-0 gaps), at most that plus one short request (< 1 s)
    span = float(np.sum(arrival_gaps(12, "poisson", 1.0, 0)[1:])) / 4.0
    assert 12 / (span + 1.0) < p["requests_per_s"] <= 12 / span
    assert p["output_tokens_per_s"] == pytest.approx(p["requests_per_s"] * np.mean(run.output_lens))


def test_a_run_over_two_replicas_gives_each_half_the_rate(simulate_calls):
    """Two GPUs of TP 1 are two replicas behind the server: one is simulated with every second
    request at half the rate, and the run's rates are twice that replica's (as `plan` splits a load)."""
    from calc.serving.sim.simulate import arrival_gaps

    run = read_results(BENCH / "vllm-serve-rate4-detailed.json")[0]
    p = predict(resolve(run, Conditions(hardware="h100-sxm", gpus=2)), load_preset("vllm"))
    assert simulate_calls["rate_per_s"] == 4.0 / 2
    # the replica's 6 requests (12 / 2) arrive over the span of its seed-0 gaps at 2/s; the run
    # finishes 2 x 6 requests in that span plus at most one short request (< 1 s)
    span = float(np.sum(arrival_gaps(6, "poisson", 1.0, 0)[1:])) / 2.0
    assert 2 * 6 / (span + 1.0) < p["requests_per_s"] <= 2 * 6 / span


@pytest.mark.parametrize("split", [{"gpus": 2}, {"pp": 2}])
def test_a_closed_loop_over_two_engines_gives_each_half_the_clients(simulate_calls, split):
    """16 clients over two replicas (or a replica's two PP micro-batch engines) are 8 on each:
    the simulated engine runs 8 clients, and the run's throughput is twice one engine's at 8."""
    run = read_results(BENCH / "vllm-serve-concurrency16.json")[0]
    vllm = load_preset("vllm")
    two = predict(resolve(run, Conditions(hardware="h100-sxm", **split)), vllm)
    assert simulate_calls["concurrency"] == 16 // 2
    if "gpus" in split:  # the same replica as a one-GPU run of 8 clients
        eight = predict(resolve(replace(run, concurrency=8), Conditions(hardware="h100-sxm")), vllm)
        assert two["output_tokens_per_s"] == pytest.approx(2 * eight["output_tokens_per_s"])


def test_compare_files_keeps_going_after_a_bad_file():
    files = [BENCH / "unknown.json", BENCH / "vllm-latency.json", BENCH / "truncated.json"]
    results, failures, presets = compare_files(files, Conditions(model="llama-3.1-8b", hardware="h100-sxm"))
    assert [r.scenario.run.format for r in results] == ["vllm-latency"]
    assert [Path(f).name for f, _ in failures] == ["unknown.json", "truncated.json"]
    assert set(presets) == {"vllm"}


def test_burstiness_is_the_gamma_shape(simulate_calls):
    """vLLM draws gaps from gamma(shape = burstiness, mean 1 / rate): cv = 1 / sqrt(shape)."""
    seen = simulate_calls
    run = read_results(BENCH / "vllm-serve-rate4-detailed.json")[0]
    predict(resolve(replace(run, burstiness=0.25), Conditions(hardware="h100-sxm")), load_preset("vllm"))
    assert (seen["process"], seen["cv"], seen["rate_per_s"]) == ("gamma", 2.0, 4.0)
    predict(resolve(run, Conditions(hardware="h100-sxm")), load_preset("vllm"))
    assert seen["process"] == "poisson"


def _burst_run(tmp_path):
    d = json.loads((BENCH / "vllm-serve-concurrency16.json").read_text())
    d["max_concurrency"] = None  # request_rate inf and no limit: all 40 requests sent at t = 0
    p = tmp_path / "burst.json"
    p.write_text(json.dumps(d))
    (run,) = read_results(p)
    return run


def test_everything_at_once_is_capped_by_max_num_seqs(tmp_path):
    run = _burst_run(tmp_path)
    assert (run.load, run.concurrency) == ("burst", 40)
    sc = resolve(run, Conditions(hardware="h100-sxm"))
    # vLLM's own default on a GPU of >= 70 GiB that is not an A100 (EngineArgs.get_batch_defaults): 1024
    assert sc.max_num_seqs == 1024 and any("up to 1024 running" in a for a in sc.assumed)
    p40 = predict(sc, load_preset("vllm"))
    sc8 = resolve(run, Conditions(hardware="h100-sxm", engine_args={"max_num_seqs": 8}))
    assert sc8.max_num_seqs == 8 and sc8.serving.max_num_seqs == 8
    p8 = predict(sc8, load_preset("vllm"))
    assert p8["ttft_p99_s"] > p40["ttft_p99_s"]  # 8 running at a time: the last ones queue
    assert p8["output_tokens_per_s"] < p40["output_tokens_per_s"]


def test_a_model_that_does_not_fit_is_said_so(tmp_path):
    # Llama 3.1 405B in bf16 (~810 GB) on one 80 GB GPU: no KV pages at all
    results, failures, _ = compare_files([BENCH / "vllm-serve-concurrency16.json"],
                                         Conditions(hardware="h100-sxm", model="llama-3.1-405b"))
    assert not failures
    (r,) = results
    assert all(math.isnan(m.predicted) for m in r.metrics) and "do not fit" in r.notes[0]


def test_lengths_beyond_the_context_name_the_file(tmp_path):
    p = tmp_path / "long.json"
    p.write_text((BENCH / "vllm-latency.json").read_text())
    (tmp_path / "long.roofline.yaml").write_text("batch: 1\nprompt_len: 200000\noutput_len: 10\n")
    _, failures, _ = compare_files([p], Conditions(model="llama-3.1-8b", hardware="h100-sxm"))
    ((f, msg),) = failures
    assert msg.startswith(str(p)) and "max context" in msg


def test_cached_requests_compute_only_their_last_prompt_token(tmp_path, monkeypatch):
    """A burst whose first N prompts the server had cached (an earlier run of the same prompts):
    those N requests prefill one token each, attending to the T - 1 cached ones; the rest prefill whole."""
    from calc.serving.sim import simulate as sim_mod

    run = _burst_run(tmp_path)
    seen = {}
    real = sim_mod.simulate

    def spy(rep, T, G, **kw):
        seen["T"], seen["prefix"] = np.asarray(T), kw.get("prefix")
        return real(rep, T, G, **kw)

    monkeypatch.setattr(sim_mod, "simulate", spy)
    none = predict(resolve(run, Conditions(hardware="h100-sxm")), load_preset("vllm"))
    assert seen["prefix"] is None
    sc = resolve(run, Conditions(hardware="h100-sxm", cached_requests=25))
    assert sc.cached_requests == 25 and any("first 25 requests' prompts" in n for n in sc.notes)
    some = predict(sc, load_preset("vllm"))
    T, cached = seen["T"], seen["prefix"].cached
    assert cached.size == T.size == 40
    assert np.array_equal(cached[:25], T[:25] - 1) and not cached[25:].any()  # by hand: 25 of 40, all but one token
    assert some["ttft_mean_s"] < none["ttft_mean_s"]  # less prefill work ahead of every request's first token
    allc = predict(resolve(run, Conditions(hardware="h100-sxm", cached_requests=40)), load_preset("vllm"))
    assert allc["ttft_mean_s"] < some["ttft_mean_s"]


def test_cached_requests_beyond_the_run_or_on_a_closed_loop_are_refused(tmp_path):
    run = _burst_run(tmp_path)
    with pytest.raises(SpecError, match="41 cached of 40 requests"):
        resolve(run, Conditions(hardware="h100-sxm", cached_requests=41))
    (loop,) = read_results(BENCH / "vllm-serve-concurrency16.json")
    with pytest.raises(SpecError, match="bursts and open-loop runs, not a concurrency load"):
        resolve(loop, Conditions(hardware="h100-sxm", cached_requests=4))
