"""Every subcommand through CliRunner, including the exit-2 paths."""

import json
import re

import pytest
from typer.testing import CliRunner

from calc.cli.app import app

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


CONTRACT = {"model", "hardware", "batch", "prompt_len", "output_len", "weight_bytes", "kv_cache_bytes",
            "prefill", "decode", "ttft_s", "tpot_s", "e2e_s", "output_tokens_per_s", "memory"}
PHASE = {"flops", "linear_flops", "attention_flops", "bytes", "intensity", "time_s", "bound"}
MEMORY = {"weights_bytes", "kv_cache_bytes", "activation_bytes", "total_bytes", "capacity_bytes", "fits"}


def test_estimate_json_contract():
    r = run("estimate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--batch", 2,
            "--prompt-len", 1000, "--output-len", 50, "--format", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert CONTRACT <= set(d)
    assert PHASE <= set(d["prefill"])
    assert PHASE | {"context"} <= set(d["decode"])
    assert MEMORY <= set(d["memory"])
    assert (d["batch"], d["prompt_len"], d["output_len"], d["decode"]["context"]) == (2, 1000, 50, 1000)
    # KV held at the end: 2 sequences x (1000 + 50 - 1) positions x 131072 B
    assert d["kv_cache_bytes"] == 2 * 1049 * 131072
    assert d["weight_bytes"] == 8030261248 * 2
    assert d["e2e_s"] == pytest.approx(d["ttft_s"] + 49 * d["tpot_s"])


def test_estimate_table_and_several_values():
    r = run("estimate", "-m", "llama-3.1-8b", "--hardware", "h100-sxm")
    assert r.exit_code == 0 and "TTFT" in r.output and "fits" in r.output
    r = run("estimate", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", "--batch", "1,8,64", "-f", "json")
    assert [d["batch"] for d in json.loads(r.output)] == [1, 8, 64]
    r = run("estimate", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", "--prompt-len", "128:512:128", "-f", "csv")
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 + 4 and "prefill_time_s" in lines[0]


def test_estimate_one_output_token_has_null_tpot():
    r = run("estimate", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", "-g", 1, "-f", "json")
    d = json.loads(r.output)
    assert d["tpot_s"] is None and d["e2e_s"] == d["ttft_s"]


def test_model_that_does_not_fit_says_by_how_much():
    r = run("estimate", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", "--batch", 512, "-t", 8192, "-g", 8192)
    assert r.exit_code == 0
    assert "DOES NOT FIT" in r.output and "short by" in r.output


def test_ops_sorted_with_shares():
    r = run("ops", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", "--phase", "decode", "--seq-len", 2048,
            "-f", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    times = [o["total_time_s"] for o in d["ops"]]
    assert times == sorted(times, reverse=True)
    assert sum(o["share"] for o in d["ops"]) == pytest.approx(1.0)
    assert d["bound"] == "memory"
    r = run("ops", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", "--phase", "prefill")
    assert r.exit_code == 0 and "mlp.gate_up_proj" in r.output


def test_intensity_table():
    r = run("intensity", "-m", "llama-3.1-8b", "-s", "128,1024")
    assert r.exit_code == 0 and "1st-order" in r.output


def test_models_hardware_show():
    r = run("models", "-f", "json")
    names = [d["name"] for d in json.loads(r.output)]
    assert "llama-3.1-8b" in names
    r = run("hardware", "-f", "json")
    assert "h100-sxm" in [d["name"] for d in json.loads(r.output)]
    r = run("show", "llama-3.1-8b", "-f", "json")
    d = json.loads(r.output)
    assert {"name", "params_total", "params_active", "kv_bytes_per_token", "weight_bytes"} <= set(d)
    assert d["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 2
    r = run("show", "h100-sxm")  # the table names the entry and its data-sheet values
    assert r.exit_code == 0 and re.search(r"^memory_gb\s+80\.0$", r.output, re.M), r.output
    assert re.search(r"^memory_bandwidth_tb_s\s+3\.35$", r.output, re.M)
    # the rates the GEMM classes price: H100 SXM's stated INT32 33.5 TOPS, the 81,559 MiB nvidia-smi
    # reports; a GeForce card's fp16-accumulate rate (RTX 4090: 2 x its 165.2 bf16)
    assert re.search(r"^int32_tops\s+33\.5$", r.output, re.M) and re.search(r"^memory_reported_mib\s+81559", r.output, re.M)
    assert re.search(r"^fp16_accumulate_tflops\s+330\.3$", run("show", "rtx-4090").output, re.M)
    # where a profile states no figure, the rate that stands in for it, never null (a fuzz campaign's
    # "silent nonsense"): H100's fp16 peak 989.4 (FP16 accumulate runs no faster there); MI300X
    # publishes no INT32 rate: half its 163.4 FP32 TFLOP/s
    h100 = json.loads(run("show", "h100-sxm", "-f", "json").output)
    assert h100["fp16_accumulate_tflops"] == pytest.approx(989.4)
    assert json.loads(run("show", "mi300x", "-f", "json").output)["int32_tops"] == pytest.approx(163.4 / 2)
    r = run("models")
    assert r.exit_code == 0 and re.search(r"^llama-3\.1-8b\s+8\.03 B\s+8\.03 B\s+32\s+4096\s+gqa", r.output, re.M), r.output
    r = run("hardware")
    assert r.exit_code == 0 and re.search(r"^h100-sxm\s+gpu\s+80\s+3\.35\s+989\.4", r.output, re.M), r.output


@pytest.mark.parametrize("args,needle", [
    (["estimate", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", "--batch", 0], "--batch"),
    (["estimate", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", "--prompt-len", -3], "--prompt-len"),
    (["estimate", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", "--kv-dtype", "fp7"], "--kv-dtype"),
    (["estimate", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", "--weight-dtype", "int3"], "--weight-dtype"),
    (["estimate", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", "-t", 131072, "-g", 10], "max context"),
    (["estimate", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", "--batch", "1,x"], "--batch"),
    (["estimate", "-m", "lama-3.1-8b", "--hardware", "h100-sxm"], "did you mean llama-3.1-8b"),
    (["estimate", "-m", "llama-3.1-8b", "--hardware", "h100sxm"], "did you mean h100-sxm"),
    (["estimate", "-m", "nowhere/model.yaml", "--hardware", "h100-sxm"], "no such file"),
    (["ops", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", "--seq-len", 200000], "--seq-len"),
    (["show", "nonexistent-thing"], "unknown model or hardware"),
])
def test_bad_input_exits_2_with_one_line(args, needle):
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert needle in r.output
    assert "Traceback" not in r.output


def test_bad_yaml_file_names_file_and_field(tmp_path):
    p = tmp_path / "m.yaml"
    p.write_text("name: m\nnum_layers: -1\nhidden_size: 64\nvocab_size: 10\nmax_context: 10\n"
                 "attention: {num_heads: 4, num_kv_heads: 2}\nmlp: {kind: none}\n")
    r = run("show", str(p))
    assert r.exit_code == 2
    assert str(p) in r.output and "num_layers" in r.output
