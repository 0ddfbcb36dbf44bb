"""`roofline compare` through CliRunner: every format end to end, JSON/CSV, --out, --fit, exit 2."""

import csv
import io
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from calc.cli.app import app

BENCH = Path(__file__).resolve().parents[2] / "fixtures" / "bench"
runner = CliRunner()


def run(*args):
    return runner.invoke(app, ["compare", *[str(a) for a in args]])


@pytest.mark.parametrize("files, options", [
    (["vllm-serve-concurrency16.json", "vllm-serve-rate4-detailed.json"], ["--hardware", "h100-sxm"]),
    (["vllm-latency.json"], ["--hardware", "h100-sxm", "--model", "llama-3.1-8b"]),
    (["sglang.jsonl"], ["--hardware", "h100-sxm", "--model", "llama-3.1-8b"]),
    (["guidellm.json"], ["--hardware", "h100-sxm"]),
    (["llama-bench.json", "llama-bench.csv"], ["--model", "llama-3-8b"]),
    (["genai-perf.json", "genai-perf.csv"], ["--hardware", "h100-sxm"]),
    (["trtllm-bench.json", "vllm-serve-ramp.json"], ["--hardware", "h100-sxm"]),
    (["lmdeploy-restful.csv", "lmdeploy-throughput.csv"], ["--hardware", "h100-sxm", "--model", "llama-3.1-8b"]),
])
def test_each_format_end_to_end(files, options):
    r = run(*[BENCH / f for f in files], *options)
    assert r.exit_code == 0, r.output
    assert "measured" in r.stdout and "predicted" in r.stdout and "median |error|" in r.stdout
    assert "Traceback" not in r.output


def test_json_and_csv():
    args = [BENCH / "vllm-serve-concurrency16.json", "--hardware", "h100-sxm"]
    d = json.loads(run(*args, "--format", "json").stdout)
    (r,) = d["runs"]
    assert (r["format"], r["load"], r["concurrency"], r["model"], r["engine"]) == (
        "vllm-serve", "concurrency", 16, "llama-3.1-8b", "vllm")
    m = {x["metric"]: x for x in r["metrics"]}
    src = json.loads((BENCH / "vllm-serve-concurrency16.json").read_text())
    assert m["ttft_mean_s"]["measured"] == pytest.approx(src["mean_ttft_ms"] / 1000)
    assert m["itl_p99_s"]["predicted"] is None  # not modelled: null, never a made-up number
    e = m["output_tokens_per_s"]
    assert e["error"] == pytest.approx(e["predicted"] / e["measured"] - 1)
    assert d["summary"]["runs"] == 1 and d["errors"] == []
    rows = list(csv.DictReader(io.StringIO(run(*args, "--format", "csv").stdout)))
    assert {"file", "run", "metric", "measured", "predicted", "error"} <= set(rows[0])
    assert len(rows) == len(r["metrics"])


def test_bad_files_exit_2_and_the_others_are_still_compared():
    r = run(BENCH / "unknown.json", BENCH / "vllm-latency.json", BENCH / "truncated.json",
            BENCH / "vllm-latency-nolengths.json", "--model", "llama-3.1-8b", "--hardware", "h100-sxm")
    assert r.exit_code == 2
    errors = r.stderr.strip().splitlines()
    assert len(errors) == 3  # one line per file that failed
    assert "unknown.json" in errors[0] and "unknown format" in errors[0]
    assert "truncated.json" in errors[1] and "truncated" in errors[1]
    assert "vllm-latency-nolengths.json" in errors[2] and "prompt_len" in errors[2]
    assert "vllm-latency.json" in r.stdout and "3 file(s) not read" in r.stdout
    assert "Traceback" not in r.output


def test_bad_option_is_exit_2_before_reading():
    r = run(BENCH / "vllm-latency.json", "--engine", "vlm")
    assert r.exit_code == 2 and "did you mean vllm" in r.output


def test_out_writes_report_and_chart(tmp_path):
    r = run(BENCH / "sglang.jsonl", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--out", tmp_path)
    assert r.exit_code == 0, r.output
    assert {p.name for p in tmp_path.iterdir()} == {"README.md", "report.html", "compare.csv", "compare.json",
                                                    "compare.png"}
    png = (tmp_path / "compare.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    md, page = (tmp_path / "README.md").read_text(), (tmp_path / "report.html").read_text()
    assert "![predicted vs measured](compare.png)" in md
    import base64

    assert base64.b64encode(png).decode() in page  # self-contained: the same chart, embedded
    metrics = sum(len(r["metrics"]) for r in json.loads((tmp_path / "compare.json").read_text())["runs"])
    assert page.count("<tr>") == 1 + metrics  # the metric table: a header row, one row per (run, metric)
    assert "TTFT, TPOT and ITL" in md and "TTFT mean" in page and "TPOT mean" in page


@pytest.mark.parametrize("where, problem", [("missing/deeper/fit.yaml", "the folder {tmp}/missing/deeper does not exist"),
                                            ("fifo", "exists and is not a regular file")])
def test_an_unwritable_fit_out_is_refused_before_any_work(tmp_path, where, problem):
    """--fit-out used to be checked only when the refit wrote it: a run that refitted nothing
    printed a note and no error, and one that did failed after the work (fuzz, issue 25)."""
    import os

    os.mkfifo(tmp_path / "fifo")
    r = run(BENCH / "vllm-latency.json", "--fit", "--fit-out", tmp_path / where)
    assert r.exit_code == 2, r.output
    [line] = r.output.strip().splitlines()  # long paths are shortened in the middle of the line
    assert line.startswith("roofline: error: --fit-out: ") and problem.replace("{tmp}", str(tmp_path)) in line, line


def test_fit_writes_a_preset_that_compare_can_use(tmp_path):
    files = sorted((BENCH / "published").glob("vllmbk*.json"))
    out = tmp_path / "fit.yaml"
    r = run(*files, "--fit", "--fit-out", out)
    assert r.exit_code == 0, r.output
    assert "held-out before" in r.stdout and out.is_file()
    again = run(*files, "--engine", out, "--format", "json")
    assert again.exit_code == 0, again.output
    assert {x["engine"] for x in json.loads(again.stdout)["runs"]} == {"vllm-fit"}
    # the same file wherever an engine is named: estimate --engine, a workload's engine:
    est = runner.invoke(app, ["estimate", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", "--engine", str(out)])
    assert est.exit_code == 0, est.output
    wl = tmp_path / "w.yaml"
    wl.write_text(WORKLOAD.read_text() + "\nengine: fit.yaml\n")  # relative to the workload's folder
    plan = runner.invoke(app, ["plan", str(wl), "--requests", "100", "--format", "json", "-q"])
    assert plan.exit_code == 0, plan.output


WORKLOAD = Path(__file__).resolve().parents[3] / "reports" / "plans" / "workloads" / "chat-llama-3.1-8b.yaml"


def test_a_preset_file_is_an_engine_everywhere(tmp_path):
    # A file in engines.yaml's format: vllm's preset with 10 ms more per step. Each decode step
    # pays the step overhead once, so TPOT grows by exactly 10,000 us = 0.01 s.
    import yaml

    from calc.spec.engine import load_engine

    vllm = load_engine("vllm")
    body = vllm.model_dump(exclude={"name"})
    body["step_overhead_us"] = vllm.step_overhead_us + 10_000
    path = tmp_path / "slow.yaml"
    path.write_text(yaml.safe_dump({"vllm-slow": body}))
    args = ["estimate", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", "--format", "json"]
    base = json.loads(runner.invoke(app, [*args, "--engine", "vllm"]).stdout)
    for ref in (str(path), f"{path}:vllm-slow"):
        slow = runner.invoke(app, [*args, "--engine", ref])
        assert slow.exit_code == 0, slow.output
        assert json.loads(slow.stdout)["tpot_s"] - base["tpot_s"] == pytest.approx(0.01, rel=1e-9)
    bad = runner.invoke(app, [*args, "--engine", f"{path}:vllm-slwo"])
    assert bad.exit_code == 2 and "no preset 'vllm-slwo'" in bad.stderr and "did you mean vllm-slow" in bad.stderr
    two = tmp_path / "two.yaml"
    two.write_text(yaml.safe_dump({"a": body, "b": body}))
    amb = runner.invoke(app, [*args, "--engine", str(two)])
    assert amb.exit_code == 2 and "name one as" in amb.stderr


def test_a_folder_name_with_a_newline_is_said_on_one_line(tmp_path):
    out = tmp_path / "a\nb"
    r = run(BENCH / "vllm-latency.json", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--out", str(out))
    assert r.exit_code == 0, r.output
    wrote = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(wrote) == 1 and wrote[0].startswith("wrote ") and "a b" in wrote[0]
    assert (out / "README.md").exists() and (out / "report.html").exists()  # written where asked
