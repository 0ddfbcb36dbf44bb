"""Dtypes and engines as lists: one plan searches them together, each configuration says which
it ran, and the answer's dtypes and engine are the ones reported."""

import json

from typer.testing import CliRunner

from calc.cli.app import app
from calc.serving.planner.plan import plan
from calc.spec.workload import load_workload

BASE = """name: choices
model: llama-3.1-8b
hardware: [h100-sxm]
arrival: {rate_per_s: 2, process: poisson}
prompt_len: {dist: fixed, value: 512}
output_len: {dist: fixed, value: 64}
slo: {ttft_p99_s: 2.0, tpot_p99_s: 0.05}
max_gpus: 2
tp: [1]
max_batch: [32]
requests: 200
"""


def test_dtypes_and_engines_searched_together(tmp_path):
    w = tmp_path / "w.yaml"
    w.write_text(BASE + "dtypes: [{weight: fp8, kv: fp8}, {weight: bf16}]\nengine: [vllm, sglang]\n")
    wl = load_workload(w)
    assert [e.name for e in wl.engines] == ["vllm", "sglang"]
    p = plan(wl)
    labels = {o.label for o in p.options}
    # 2 dtypes x 2 engines, each named in its label
    for eng in ("vllm", "sglang"):
        for dt in ("fp8 weights, fp8 KV", "bf16 weights, bf16 KV"):
            assert any(f", {eng}, {dt}" in lab for lab in labels), (eng, dt, labels)
    for t in p.trials:  # each trial ran its own dtypes and engine
        assert t.replica.dt.weight in t.label and t.replica.hw.preset.name in t.label
    a = p.chosen
    assert p.dtypes == a.replica.dt  # the report's dtypes are the answer's
    out = CliRunner().invoke(app, ["plan", str(w), "--format", "json"]).output
    rec, _ = json.JSONDecoder().raw_decode(out)  # the JSON, then the timing line
    assert rec["dtypes"]["weight"] == a.replica.dt.weight


def test_engine_args_need_one_engine(tmp_path):
    w = tmp_path / "w.yaml"
    w.write_text(BASE + "engine: [vllm, sglang]\nengine_args: {max_num_seqs: 8}\n")
    r = CliRunner().invoke(app, ["plan", str(w)])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1
    assert "engine_args" in r.output and "serving:" in r.output


def test_too_many_choices_is_one_line(tmp_path):
    w = tmp_path / "w.yaml"
    w.write_text(BASE + "engine: [" + ", ".join(["vllm"] * 9) + "]\n")
    r = CliRunner().invoke(app, ["plan", str(w)])
    assert r.exit_code == 2 and "engine: give 1 to 8 of them, got 9" in r.output


def test_an_engine_of_matrix_vector_kernels_is_refused_in_one_line(tmp_path):
    """llama.cpp switches to its matrix-vector kernels at 8 tokens a step (gemv_max_rows), which the
    step timer does not model (its fit to the exact cost failed with a traceback): a workload naming
    it is refused, naming the file and the engine entry, with exit 2."""
    w = tmp_path / "w.yaml"
    w.write_text(BASE + "engine: [vllm, llama.cpp]\n")
    r = CliRunner().invoke(app, ["plan", str(w)])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1
    assert "engine.1" in r.output and "llama.cpp" in r.output and str(w) in r.output
