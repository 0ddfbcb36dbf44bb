"""`roofline compare` on bad result files (issue 25, items 3 and 4): each is one line on stderr
naming the file and the field, exit 2, no traceback, no hang; good files beside a bad one are
still compared."""

import json
import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from calc.cli.app import app

BENCH = Path(__file__).resolve().parents[2] / "fixtures" / "bench"
runner = CliRunner()
MODEL = ["--hardware", "h100-sxm", "--model", "llama-3.1-8b"]


def run(*args, env=None):
    return runner.invoke(app, ["compare", *[str(a) for a in args]], env=env)


def doc(name):
    return json.loads((BENCH / name).read_text())


def edited(name, **changes):
    d = doc(name)
    for k, v in changes.items():
        if v is DELETE:
            del d[k]
        else:
            d[k] = v
    return json.dumps(d)


DELETE = object()
SERVE, LAT = "vllm-serve-concurrency16.json", "vllm-latency.json"


def llama(**changes):
    rows = doc("llama-bench.json")
    rows[0].update(changes)
    return json.dumps(rows[:1])


def guidellm(strategy):
    d = doc("guidellm.json")
    d["benchmarks"][1]["args"]["strategy"] = strategy
    return json.dumps(d)


def long_digits():
    return json.dumps(doc(SERVE)).replace('"completed": 40', '"completed": ' + "9" * 4400)


BAD = [  # (case, file text, stem of the sidecar text or None, options, what the one line says)
    ("input_lens 1e400", json.dumps(doc(SERVE)).replace('"completed": 40', '"input_lens": [1e400], "completed": 40'),
     None, MODEL, "input_lens[0]: must be a whole number of tokens"),
    ("model_id 42", edited(SERVE, model_id=42), None, ["--hardware", "h100-sxm"], "model_id: must be a string"),
    ("model_id 300 characters", edited(SERVE, model_id="x" * 300), None, ["--hardware", "h100-sxm"],
     "no model: the result does not name one"),
    ("model_id 5000 characters", edited(SERVE, model_id="x" * 5000), None, ["--hardware", "h100-sxm"],
     "model_id: 5,000 characters"),
    ("percentiles 5", edited(LAT, percentiles=5), "batch: 1\nprompt_len: 8\noutput_len: 8\n", MODEL,
     "percentiles: must be an object"),
    ("avg_latency 0", edited(LAT, avg_latency=0), "batch: 1\nprompt_len: 8\noutput_len: 8\n", MODEL,
     "avg_latency: must be a time of more than 0 s"),
    ("total_input_tokens 1e300", edited(SERVE, total_input_tokens=1e300), None, MODEL,
     "total_input_tokens: 1e+300 is out of range"),
    ("total_input_tokens per request", edited(SERVE, total_input_tokens=1e16), None, MODEL,
     "tokens over 40 requests is more than"),
    ("max_concurrency -1", edited(SERVE, max_concurrency=-1), None, MODEL, "max_concurrency: -1 is out of range"),
    ("max_concurrency 1e9", edited(SERVE, max_concurrency=1e9), None, MODEL, "max_concurrency: 1e+09 is out of range"),
    ("burstiness -1", edited(SERVE, burstiness=-1), None, MODEL, "burstiness: -1 is out of range"),
    ("burstiness 0", edited(SERVE, burstiness=0), None, MODEL, "burstiness: must be more than 0"),
    ("request_rate -2", edited(SERVE, request_rate=-2), None, MODEL, "request_rate: -2 is out of range"),
    ("request_rate 0", edited(SERVE, request_rate=0), None, MODEL, "request_rate: must be more than 0"),
    ("completed -3", edited(SERVE, completed=-3), None, MODEL, "completed: -3 is out of range"),
    ("completed 2.5", edited(SERVE, completed=2.5), None, MODEL, "completed: must be a whole number"),
    ("completed true", edited(SERVE, completed=True), None, MODEL, "completed: must be a number, got true/false"),
    ("negative TTFT", edited(SERVE, mean_ttft_ms=-5.0), None, MODEL, "mean_ttft_ms: -5 is out of range"),
    ("negative p99 TPOT", edited(SERVE, p99_tpot_ms=-0.1), None, MODEL, "p99_tpot_ms: -0.1 is out of range"),
    ("negative throughput", edited(SERVE, output_throughput=-1.0), None, MODEL, "output_throughput: -1 is out of"),
    ("negative requests/s", edited(SERVE, request_throughput=-1.0), None, MODEL, "request_throughput: -1 is out"),
    ("TTFT as text", edited(SERVE, mean_ttft_ms="fast"), None, MODEL, "mean_ttft_ms: must be a number, got str"),
    ("4,400-digit integer", long_digits(), None, MODEL, "an integer of more than 4,300 digits"),
    ("deep JSON", "[" * 100000 + "]" * 100000, None, MODEL, "nested too deep"),
    ("GuideLLM concurrent without streams", guidellm({"type_": "concurrent"}), None, ["--hardware", "h100-sxm"],
     "args.strategy.streams: missing"),
    ("GuideLLM poisson without rate", guidellm({"type_": "poisson"}), None, ["--hardware", "h100-sxm"],
     "args.strategy.rate: missing"),
    ("GuideLLM constant without rate", guidellm({"type_": "constant"}), None, ["--hardware", "h100-sxm"],
     "args.strategy.rate: missing"),
    ("GuideLLM negative rate", guidellm({"type_": "poisson", "rate": -1}), None, ["--hardware", "h100-sxm"],
     "args.strategy.rate: -1 is out of range"),
    ("sidecar prompt_len .inf", json.dumps(doc(LAT)), "batch: 1\nprompt_len: .inf\noutput_len: 8\n",
     MODEL, "prompt_len: Input should be a finite number"),
    ("sidecar batch true", json.dumps(doc(LAT)), "batch: true\nprompt_len: 8\noutput_len: 8\n", MODEL,
     "batch: Input should be a valid integer"),
    ("sidecar concurrency 1e9", json.dumps(doc(LAT)), "concurrency: 1000000000\n", MODEL,
     "concurrency: Input should be less than or equal to"),
    ("llama-bench n_prompt 0, n_gen 0", llama(n_prompt=0, n_gen=0), None, ["--model", "llama-3-8b"],
     "n_prompt, n_gen: both 0"),
    ("llama-bench negative n_prompt", llama(n_prompt=-512), None, ["--model", "llama-3-8b"],
     "n_prompt: -512 is out of range"),
    ("llama-bench CSV n_prompt -", (BENCH / "llama-bench.csv").read_text().replace('"512","0","0"', '"-","0","0"', 1),
     None, ["--model", "llama-3-8b"], "n_prompt: missing"),
    ("llama-bench n_ubatch -1", llama(n_ubatch=-1), None, ["--model", "llama-3-8b"], "n_ubatch: -1 is out of range"),
    ("llama-bench n_ubatch 0", llama(n_ubatch=0), None, ["--model", "llama-3-8b"], "n_ubatch: 0 is out of range"),
    ("llama-bench avg_ts 0", llama(avg_ts=0.0), None, ["--model", "llama-3-8b"], "avg_ts: must be more than 0"),
    ("llama-bench avg_ts negative", llama(avg_ts=-7.0), None, ["--model", "llama-3-8b"], "avg_ts: -7 is out of range"),
    ("llama-bench n_gen 1e9", llama(n_prompt=0, n_gen=1e9), None, ["--model", "llama-3-8b"],
     "positions exceed llama-3-8b's max context 8,192"),
    ("llama-bench n_prompt 1e12", llama(n_prompt=1e12), None, ["--model", "llama-3-8b"], "n_prompt: 1e+12 is out"),
    ("llama-bench n_prompt 100000 n_ubatch 1", llama(n_prompt=100000, n_ubatch=1), None, ["--model", "llama-3-8b"],
     "100,000 positions exceed llama-3-8b's max context"),
    ("output beyond the context", edited("vllm-serve-rate4-detailed.json", output_lens=[10**9] * 12), None,
     ["--hardware", "h100-sxm"],  # the longest prompt, 373 tokens, + 1e9 outputs - 1
     "prompt + output - 1: 1,000,000,372 positions exceed llama-3.1-8b's max context"),
    ("lists of different lengths", edited("vllm-serve-rate4-detailed.json", output_lens=[9]), None,
     ["--hardware", "h100-sxm"], "input_lens, output_lens: 12 and 1 entries"),
    ("tp 3 on 32 heads", json.dumps(doc(SERVE)), None, [*MODEL, "--tp", "3"], "tp: 3 does not divide"),
    ("unknown CSV", "a,b\n1,2\n", None, MODEL, "unknown format: a CSV without"),
    ("CSV row cut short", (BENCH / "lmdeploy-throughput.csv").read_text().rsplit(",", 3)[0], None, MODEL,
     "line 2: 16 values for 19 columns"),
    ("GenAI-Perf CSV without a load", (BENCH / "genai-perf.csv").read_text(), None, MODEL,
     "load: a genai-perf file does not record its load"),
    ("trtllm quantization 5", json.dumps({**doc("trtllm-bench.json"), "engine": {"quantization": 5}}), None, MODEL,
     "engine.quantization: must be a string"),
]


@pytest.mark.parametrize("case, text, sidecar, options, needle", BAD, ids=[b[0] for b in BAD])
def test_bad_file_is_one_line_exit_2(tmp_path, case, text, sidecar, options, needle):
    p = tmp_path / "result.json"
    p.write_text(text)
    if sidecar is not None:
        (tmp_path / "result.roofline.yaml").write_text(sidecar)
    t0 = time.perf_counter()
    r = run(p, *options)
    assert time.perf_counter() - t0 < 30  # no hang (seconds even on a loaded machine)
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"roofline: error: {p}") and needle in line, line


def test_a_bom_json_is_read_as_json(tmp_path):
    p = tmp_path / "bom.json"
    p.write_bytes(b"\xef\xbb\xbf" + (BENCH / SERVE).read_bytes())
    r = run(p, "--hardware", "h100-sxm")
    assert r.exit_code == 0, r.output
    assert "bom.json [vllm-serve]" in r.stdout


def test_fifo_and_device_beside_good_files(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    t0 = time.perf_counter()
    r = run(BENCH / SERVE, fifo, "/dev/zero", BENCH / "sglang.jsonl", *MODEL)
    assert time.perf_counter() - t0 < 60  # opening a FIFO would block forever; reading /dev/zero never ends
    assert r.exit_code == 2
    errors = r.stderr.strip().splitlines()
    assert len(errors) == 2 and all("not a regular file" in e for e in errors)
    assert str(fifo) in errors[0] and "/dev/zero" in errors[1]
    assert "3 runs in 2 files" in r.stdout  # the good ones compared


def test_file_over_the_size_cap(tmp_path):
    p = tmp_path / "big.json"
    d = doc(SERVE)
    d["generated_texts"] = ["x" * 1000] * 1500  # 1.5 MB
    p.write_text(json.dumps(d))
    r = run(p, *MODEL, env={"ROOFLINE_MAX_FILE_MB": "1"})
    assert r.exit_code == 2 and "exceeds the limit of 1,000,000" in r.stderr and "ROOFLINE_MAX_FILE_MB" in r.stderr


@pytest.mark.parametrize("option, value, limits", [("--tp", 100_000, "1 to 65,536"), ("--gpus", 70_000, "1 to 65,536"),
                                                    ("--cached-requests", 2**40, "0 to 16,777,216")])
def test_an_option_past_its_range_is_one_line_naming_it(option, value, limits):
    r = run(BENCH / SERVE, *MODEL, option, value)
    assert r.exit_code == 2 and "Traceback" not in r.output
    line = r.stderr.strip()
    assert line.startswith(f"roofline: error: {option}: ") and line.endswith(f" is out of range ({limits})")
    assert "\n" not in line


def test_fit_out_an_existing_file(tmp_path):
    existing = tmp_path / "report"
    existing.write_text("mine")
    r = run(BENCH / SERVE, "--hardware", "h100-sxm", "--fit", "--out", existing)
    assert r.exit_code == 2 and "exists and is not a folder" in r.stderr and "Traceback" not in r.output
    assert existing.read_text() == "mine"


def test_5000_line_sglang_jsonl_is_fast(tmp_path):
    """A file repeating one run is predicted once; 5,000 lines in seconds (the issue's case took minutes)."""
    line = (BENCH / "sglang.jsonl").read_text().splitlines()[0]
    p = tmp_path / "many.jsonl"
    p.write_text((line + "\n") * 5000)
    t0 = time.perf_counter()
    r = run(p, *MODEL)
    elapsed = time.perf_counter() - t0
    assert r.exit_code == 0 and "5000 runs in 1 files" in r.stdout
    assert elapsed < 30, elapsed  # 1.8 CPU-s measured; generous for a shared CI machine


def test_work_over_the_simulation_cap_is_refused_before_it_starts(tmp_path):
    r = run(BENCH / "sglang.jsonl", *MODEL, env={"ROOFLINE_MAX_SIMULATED": "100"})
    # two runs of 64 requests each: 128 > 100
    assert r.exit_code == 2 and "128 simulated requests (over all runs) exceeds the limit of 100" in r.stderr


def test_long_prompt_in_one_token_passes_is_bounded():
    """n_prompt 100,000 in passes of 1 token (within Llama 3.1's 131,072 context): the passes are
    costed at 4,096 evenly spaced points, so this takes a moment, not 100,000 cost-model calls."""
    from calc.accuracy.benchmarks import read_results
    from calc.accuracy.compare import load_preset, predict
    from calc.accuracy.scenario import Conditions, resolve

    (pp, _) = read_results(BENCH / "llama-bench.json")
    from dataclasses import replace

    run = replace(pp, prompt_len=100000.0, ubatch=1)
    t0 = time.perf_counter()
    p = predict(resolve(run, Conditions(model="llama-3.1-8b")), load_preset("llama.cpp"))
    assert time.perf_counter() - t0 < 20
    assert 0 < p["prefill_tokens_per_s"] < float("inf")
