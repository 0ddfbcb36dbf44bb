"""Sweeps and plan tables as CSV, Parquet and JSON lines; `plan --format json` on stdout; no progress when piped."""

import json

import pandas as pd
from typer.testing import CliRunner

from calc.cli.app import app

runner = CliRunner()

WORKLOAD = """\
name: tiny
model: llama-3.1-8b
hardware: [h100-sxm]
arrival: {rate_per_s: 2}
prompt_len: {dist: fixed, value: 512}
output_len: {dist: fixed, value: 65}
slo: {tpot_p99_s: 0.1}
tp: [1]
max_batch: [64]
max_gpus: 1
requests: 50
"""


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_sweep_writes_each_format_with_the_same_rows(tmp_path):
    frames = {}
    for suffix, read in ((".csv", pd.read_csv), (".parquet", pd.read_parquet),
                         (".jsonl", lambda p: pd.read_json(p, lines=True, precise_float=True))):
        r = run("sweep", "--batch", "1,8", "--prompt-len", "128,1024", "--out", tmp_path / f"g{suffix}")
        assert r.exit_code == 0, r.output
        assert r.stdout == ""  # the "wrote" line is on stderr, and no bar when piped
        frames[suffix] = read(tmp_path / f"g{suffix}")
    for f in frames.values():
        assert len(f) == 4 and "ttft_s" in f.columns and "decode_bytes" in f.columns
        assert f["ttft_s"].tolist() == frames[".csv"]["ttft_s"].tolist()


def test_sweep_csv_on_stdout_and_quiet():
    r = run("sweep", "--batch", "1,2", "--columns", "ttft_s", "--quiet")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].endswith(",batch,prompt_len,output_len,ttft_s") and len(lines) == 3


def test_sweep_unknown_suffix_exits_2(tmp_path):
    r = run("sweep", "--out", tmp_path / "g.txt")
    assert r.exit_code == 2 and "parquet" in r.stderr


def test_plan_table_and_json(tmp_path):
    w = tmp_path / "w.yaml"
    w.write_text(WORKLOAD)
    r = run("plan", w, "--format", "json", "--table", tmp_path / "plan.parquet")
    assert r.exit_code == 0, r.output
    chosen = json.loads(r.stdout)["chosen"]
    table = pd.read_parquet(tmp_path / "plan.parquet")
    assert table["config"].iloc[0] == chosen["config"]
    assert table["tpot_p99_s"].iloc[0] == chosen["latency_s"]["tpot_p99"]
    assert table["per_replica_kv_pages"].iloc[0] == chosen["per_replica"]["kv_pages"]


def test_plan_table_bad_suffix_exits_2(tmp_path):
    w = tmp_path / "w.yaml"
    w.write_text(WORKLOAD)
    r = run("plan", w, "--table", tmp_path / "plan.xlsx")
    assert r.exit_code == 2 and "--table" in r.stderr


def test_a_run_builds_only_its_command_and_answers_the_same():
    from calc.cli.app import _only

    args = ["estimate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--format", "json"]
    one = runner.invoke(_only("estimate"), args)
    assert one.exit_code == 0 and one.stdout == run(*args).stdout
    bad = runner.invoke(_only("estimate"), ["estimate", "--model", "nope", "--hardware", "h100-sxm"])
    assert bad.exit_code == 2 and "unknown model" in bad.stderr
    assert _only("--help") is app and _only("estimat") is app


def test_plan_table_uses_the_estimate_column_stems(tmp_path):
    # plan --table: a replica's memory per GPU under estimate's names (memory_weights_bytes...),
    # none of the old per-command spellings.
    table = tmp_path / "plan.csv"
    r = run("plan", "reports/plans/workloads/chat-llama-3.1-8b.yaml", "--requests", "200", "--table", str(table), "-q")
    assert r.exit_code == 0, r.output
    head = table.read_text().splitlines()[0].replace('"', "").split(",")
    assert {"per_replica_memory_weights_bytes", "per_replica_memory_kv_cache_bytes", "usd_per_hour"} <= set(head)
    assert not [c for c in head if c.endswith("_bytes_per_gpu") or c in ("prompt_tokens", "output_tokens")]
