"""`roofline profile`, `validate` and `calibrate` end to end, and their exit-2 paths."""

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

torch = pytest.importorskip("torch")

from calc.cli.app import app  # noqa: E402
from calc.spec.catalog import load_hardware  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_validate_package_is_ours():
    import validate

    assert Path(validate.__file__).resolve().parent == ROOT / "validate"


def test_import_validate_is_light():
    code = "import sys, validate, validate.calibrate, validate.measurements; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


TINY_GRIDS = {  # the smallest grid of every table: seconds, not minutes
    "matmul": {"M": [1, 16], "K": [64, 256], "N": [64, 512]},
    "attention_prefill": {"B": [1, 2], "T": [16, 64], "Hq": [4], "Hkv": [2, 4], "D": [32]},
    "attention_decode": {"B": [1, 2], "S": [16, 64], "Hq": [4], "Hkv": [2, 4], "D": [32]},
    "stream": {"bytes": [4096.0, 262144.0]},
    "embedding": {"rows": [1, 64]},
    "sample": {"rows": [1, 4]},
}


@pytest.fixture(scope="module")
def profile_dir(tmp_path_factory):
    """`roofline profile` with the grids cut to TINY_GRIDS."""
    from validate import kernels

    out = tmp_path_factory.mktemp("p") / "prof"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kernels, "grids", lambda quick, cuda, exclude: TINY_GRIDS)
        r = runner.invoke(app, ["profile", "--device", "cpu", "--quick", "--out", str(out)])
    assert r.exit_code == 0, r.output
    return out


@pytest.fixture(scope="module")
def quick_run(profile_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("v") / "tiny"
    r = runner.invoke(app, ["validate", "--device", "cpu", "--model", "tiny-decoder", "--quick", "--budget", "4",
                            "--profile", str(profile_dir / "profile.yaml"), "--out", str(out)])
    return r, out


def test_profile_writes_tables_and_a_profile_within_the_measured_roofs(profile_dir):
    hw = load_hardware(str(profile_dir / "profile.yaml"))
    names = sorted(p.name for p in (profile_dir / "kernels").iterdir())
    assert len(names) == len(hw.kernel_tables) == len(hw.kernel_set) == 2 * 9  # 9 tables (4 streams) per dtype
    assert "matmul-fp32.yaml" in names and "stream-norm-bf16.yaml" in names
    assert hw.threads == torch.get_num_threads()
    probes = hw.calibration["probes"]
    assert hw.memory_bandwidth_tb_s * 1e12 >= max(probes["copy_bytes_per_s"], probes["read_bytes_per_s"]) * 0.999
    for e in [hw.efficiency, *hw.efficiency.by_dtype.values()]:
        for v in (e.compute, e.memory, e.attention):
            assert v is None or 0 < v <= 1
    t = hw.kernel_set.find("matmul", "fp32")
    assert t.provenance.software["torch"] == torch.__version__ and t.provenance.threads == hw.threads
    r = runner.invoke(app, ["estimate", "-m", "tiny-decoder", "--hardware", str(profile_dir / "profile.yaml"),
                            "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["kernel_tables"] == 18 and d["threads"] == hw.threads and d["decode"]["bound"] == "measured"


def test_calibrate_refits_curves_from_a_kernel_folder(profile_dir, tmp_path):
    target = tmp_path / "sub" / "refit.yaml"
    target.parent.mkdir()
    r = runner.invoke(app, ["calibrate", "--kernels", str(profile_dir), "--hardware", "cpu-generic-2core",
                            "--out", str(target)])
    assert r.exit_code == 0, r.output
    hw = load_hardware(str(target))
    assert hw.name == "cpu-generic-2core-kernels" and len(hw.kernel_set) == 18
    # tables outside the profile's folder are copied beside it (a profile's tables resolve inside its folder)
    assert all(k.startswith("refit-kernels/") for k in hw.kernel_tables), hw.kernel_tables
    assert sorted(p.name for p in (target.parent / "refit-kernels").iterdir()) == \
        sorted(p.name for p in (profile_dir / "kernels").glob("*.yaml"))
    assert hw.memory_bandwidth_tb_s >= 0.02 and hw.peak_tflops["fp32"] >= 0.16  # never below the base's roofs


def test_calibrate_without_tables_exits_2(tmp_path):
    r = runner.invoke(app, ["calibrate", "--kernels", str(tmp_path), "--hardware", "cpu-generic-2core",
                            "--out", str(tmp_path / "p.yaml")])
    assert r.exit_code == 2 and "no kernel tables" in r.output


@pytest.mark.parametrize("cmd", [["calibrate", "--hardware", "cpu-generic-2core", "--out", "{tmp}/p.yaml", "--kernels"],
                                 ["validate-comm", "--world-size", "2", "--quick", "--out"]])
@pytest.mark.parametrize("name, problem", [("k" * 300, "a name in the path is longer than 255 bytes"),
                                           ("loop/x", "cannot look it up (Too many levels of symbolic links)")])
def test_unlookupable_folders_are_one_line(tmp_path, cmd, name, problem):
    """ENAMETOOLONG and ELOOP escaped calibrate --kernels and validate-comm --out as tracebacks (fuzz, issue 25)."""
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    r = runner.invoke(app, [a.replace("{tmp}", str(tmp_path)) for a in cmd] + [str(tmp_path / name)])
    assert r.exit_code == 2, (r.output, r.exception)
    option = cmd[-1]
    [line] = r.output.strip().splitlines()
    assert line.startswith(f"roofline: error: {option}: ") and line.endswith(problem), line


def test_quick_validate_writes_everything(quick_run):
    r, out = quick_run
    assert r.exit_code == 0, r.output
    for name in ("measurements.csv", "counts.json", "calibrated.yaml", "report.md", "scatter.png"):
        assert (out / name).is_file(), name
    rows = list(csv.DictReader((out / "measurements.csv").open()))
    assert {r["dtype"] for r in rows} == {"fp32", "bf16"}
    ok = [r for r in rows if r["status"] == "ok"]
    assert ok and all(float(r["measured_s"]) > 0 and r["predicted_calibrated_s"] and r["predicted_default_s"]
                      for r in ok)
    assert {r["split"] for r in ok} == {"held-out"}
    assert json.loads((out / "counts.json").read_text())["ok"] is True
    hw = load_hardware(str(out / "calibrated.yaml"))
    assert len(hw.kernel_set) == 18
    report = (out / "report.md").read_text()
    assert "| measured ms | predicted base ms | predicted kernels ms |" in report
    assert "TTFT (prefill) on held-out models" in r.output and "counts: ok" in r.output and "load average" in r.output
    # where the time went: each part of the run, in the last line and the report (the profile came with --profile)
    m = re.search(r" in (\d+) s \(model builds (\d+) s, FLOP and KV checks (\d+) s, held-out passes (\d+) s, "
                  r"the rest (\d+) s\)", r.output)
    assert m, r.output[-400:]
    total, *parts = (int(x) for x in m.groups())
    assert abs(sum(parts) - total) <= 3  # whole seconds, each rounded
    assert "held-out passes" in report
    # and the passes' own split, in the output and the report
    m = re.search(r"held-out passes (\d+) s: samples kept (\d+) s, samples taken again \(descheduled\) (\d+) s, "
                  r"warm-up calls and cap checks (\d+) s, the rest (\d+) s", r.output)
    assert m and m.group(0) in report, r.output[-600:]
    passes, *split = (int(x) for x in m.groups())
    assert passes == parts[2] and abs(sum(split) - passes) <= 3


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_no_cuda_exits_2(tmp_path):
    r = runner.invoke(app, ["validate", "--device", "cuda", "--model", "tiny-decoder", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "CUDA is not available" in r.output


@pytest.mark.parametrize("model, layers", [("llama-3.1-70b", 80), ("llama-3.1-405b", 126)])
def test_model_too_big_suggests_layers(tmp_path, model, layers):
    r = runner.invoke(app, ["validate", "--model", model, "--layers", str(layers), "--out", str(tmp_path / "x")])
    assert r.exit_code == 2, r.output
    assert "--layers" in r.output and "GB" in r.output and len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()  # refused before anything ran


@pytest.mark.parametrize("args, text", [(["--layers", "5"], "between 1 and 1"), (["--dtype", "int4"], "--dtype"),
                                        (["--device", "tpu"], "cpu or cuda"),
                                        (["--grid", "huge"], "expected one of default, quick, serving"),
                                        (["--grid", ""], "expected one of default, quick, serving")])
def test_bad_options_exit_2(tmp_path, args, text):
    r = runner.invoke(app, ["validate", "--model", "tiny-decoder", "--out", str(tmp_path / "x"), *args])
    assert r.exit_code == 2 and text in r.output, r.output


def test_oom_at_a_point_is_skipped_and_said(profile_dir, tmp_path, monkeypatch):
    from validate import runner as run_mod
    from validate import timing
    from validate.grid import GRIDS

    real = timing.prefill_fn
    longest = max(GRIDS["quick"][1])

    def flaky(model, batch, prompt_len, vocab, device):
        if batch == 4 and prompt_len == longest:
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory")
        return real(model, batch, prompt_len, vocab, device)

    monkeypatch.setattr(timing, "prefill_fn", flaky)
    lines = []
    res = run_mod.run(run_mod.Options(("tiny-decoder",), tmp_path / "o", dtypes=("fp32",), quick=True, budget_s=3,
                                      profile=str(profile_dir / "profile.yaml")), say=lines.append)
    status = {(r.point.phase, r.point.batch, r.point.size): r.status for r in res.rows}
    assert status[("prefill", 4, longest)] == "oom"
    assert sum(s == "ok" for s in status.values()) == len(status) - 1
    assert (tmp_path / "o" / "calibrated.yaml").is_file()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_quick_validate_on_cuda(tmp_path):
    r = runner.invoke(app, ["validate", "--device", "cuda", "--model", "tiny-decoder", "--quick", "--dtype",
                            "bf16", "--out", str(tmp_path / "g")])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "g" / "counts.json").read_text())["ok"] is True
    assert "--cuda-graphs times them" in (tmp_path / "g" / "report.md").read_text()  # eager: said so


TINY_LLAMA = """\
name: tiny-llama
num_layers: 2
hidden_size: 128
vocab_size: 512
max_context: 1024
dtype: float32
attention: {num_heads: 4, num_kv_heads: 2, head_dim: 32}
mlp: {kind: gated, intermediate_size: 256, activation: silu}
"""


def test_hf_llama_through_the_same_harness(profile_dir, tmp_path):
    pytest.importorskip("transformers")
    spec = tmp_path / "tiny-llama.yaml"
    spec.write_text(TINY_LLAMA)
    out = tmp_path / "hf"
    r = runner.invoke(app, ["validate", "--model", str(spec), "--impl", "hf", "--quick", "--dtype", "fp32",
                            "--budget", "3", "--profile", str(profile_dir / "profile.yaml"), "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader((out / "measurements.csv").open()))
    assert sum(r["status"] == "ok" for r in rows) == len(rows)
    assert "transformers" in (out / "report.md").read_text()
    # transformers' model is timed, not counted: the checks say so rather than "ok" over none
    counts = json.loads((out / "counts.json").read_text())
    assert counts["checks"] == [] and counts["ok"] is None


def test_hf_refuses_non_llama_models(tmp_path):
    pytest.importorskip("transformers")
    r = runner.invoke(app, ["validate", "--model", "tiny-decoder", "--impl", "hf", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "Llama-style" in r.output


@pytest.mark.parametrize("command", ["validate", "profile"])
def test_cuda_graphs_on_cpu_exits_2(tmp_path, command):
    r = runner.invoke(app, [command, "--device", "cpu", "--cuda-graphs", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2, r.output
    assert "--cuda-graphs" in r.output and "--device cuda" in r.output
    assert not (tmp_path / "x").exists()


def test_graph_calls_fill_a_millisecond_up_to_the_cap():
    from validate.timing import GRAPH_TARGET_S, MAX_GRAPH_CALLS, graph_calls

    assert GRAPH_TARGET_S == 1e-3 and MAX_GRAPH_CALLS == 256
    assert graph_calls(0.25e-3) == 4  # 1 ms / 0.25 ms
    assert graph_calls(0.3e-3) == 4  # ceil(3.33)
    assert graph_calls(2e-3) == 1  # a call longer than the target: one
    assert graph_calls(1e-6) == 256  # 1000 calls of 1 us, capped


def test_per_call_divides_each_replay_by_its_calls():
    from validate.timing import Timing, per_call

    t = per_call(Timing((4e-3, 8e-3), inner=3, contended=1), 4)
    assert t.samples_s == (1e-3, 2e-3) and t.inner == 3 and t.contended == 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_graph_replays_every_captured_call():
    from validate.timing import graph_replay

    x = torch.zeros(4, device="cuda")
    replay = graph_replay(lambda: x.add_(1), calls=3)  # 2 warm-up calls run; the 3 captured do not
    assert x.sum().item() == 4 * 2
    replay()
    replay()
    assert x.sum().item() == 4 * (2 + 2 * 3)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_quick_validate_with_cuda_graphs(tmp_path):
    r = runner.invoke(app, ["validate", "--device", "cuda", "--model", "tiny-decoder", "--quick", "--dtype",
                            "bf16", "--cuda-graphs", "--out", str(tmp_path / "g")])
    assert r.exit_code == 0, r.output
    assert "CUDA graph" in (tmp_path / "g" / "report.md").read_text()
