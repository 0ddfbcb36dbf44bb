"""The estimate header says the compute dtype that runs, not one the chip lacks."""

from typer.testing import CliRunner

from calc.cli.app import app
from calc.spec.catalog import load_hardware

runner = CliRunner()
ARGS = ["estimate", "--model", "llama-3.1-70b", "--weight-dtype", "fp8", "--tp", "4"]


def test_a100_has_no_fp8_so_fp8_weights_run_bf16_matmuls():
    a100 = load_hardware("a100-80gb-sxm")
    assert "fp8" not in a100.peak_tflops and a100.runs_as("fp8") == "bf16"
    r = runner.invoke(app, [*ARGS, "--hardware", "a100-80gb-sxm"])
    assert r.exit_code == 0, r.output
    head = r.stdout.splitlines()[0]
    assert "compute bf16 (no fp8 on a100-80gb-sxm)" in head and "compute fp8" not in head
    # 312 TFLOP/s bf16 dense / 2.039 TB/s (the data sheet) = 153 FLOP/B, at bf16
    assert "(ridge point 153 FLOP/B at bf16)" in r.stdout


def test_h100_runs_fp8_as_asked():
    r = runner.invoke(app, [*ARGS, "--hardware", "h100-sxm", "--format", "json"])
    assert r.exit_code == 0 and '"compute_runs_as": "fp8"' in r.stdout
    r = runner.invoke(app, [*ARGS, "--hardware", "h100-sxm"])
    assert "compute fp8, attention" in r.stdout.splitlines()[0]
