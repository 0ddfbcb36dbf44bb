"""Charts: every kind renders headless (Agg) to a valid image of the expected size, the plotted
points sit where the estimators put them (read back from the figure, not the pixels), the
gallery matches the code, and `roofline plot` turns bad input into one line and exit 2."""

import json
import struct
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

import calc
from calc.cli.app import app
from calc.cost.breakdown import ops_records
from calc.cost.setup import Setup
from calc.plot import charts as plot
from calc.plot import gallery

runner = CliRunner()
WIDTH, HEIGHT = 900, 550  # FIGSIZE_IN (9, 5.5) x 100 dpi

# Small grids keep the whole file fast; every kind is covered.
SMALL = {
    "roofline": dict(batch=[2], prompt_len=[256], context=[1024]),
    "ttft": dict(prompt_len=[128, 1024]),
    "tpot-batch": dict(batch=[1, 16], prompt_len=[256], output_len=[16]),
    "tpot-context": dict(context=[1024, 8192]),
    "throughput": dict(batch=[1, 8, 64], prompt_len=[256], output_len=[16]),
    "kv-memory": dict(context=[1024, 4096], batch=[4]),
    "breakdown": dict(batch=[2], prompt_len=[256], context=[1024]),
    "tp": dict(tp=[1, 2], prompt_len=[256], output_len=[16]),
}


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def series(fig, gid):
    s = plot.plotted_data(fig)["axes"][0]["series"][gid]
    return np.array(s["x"], float), np.array(s["y"], float)


@pytest.mark.parametrize("kind", plot.KINDS)
def test_every_kind_renders_a_png_of_the_expected_size(tmp_path, kind):
    out = tmp_path / f"{kind}.png"
    fig = plot.make_chart(kind, "llama-3.1-8b", "h100-sxm,l4", out=out, **SMALL[kind])
    assert png_size(out) == (WIDTH, HEIGHT)
    assert plot.plotted_data(fig)["axes"][0]["series"], "no data read back"
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # the temp file was renamed, not left behind


def test_svg_by_suffix(tmp_path):
    out = tmp_path / "r.svg"
    plot.make_chart("roofline", "llama-3.1-8b", "h100-sxm", out=out, **SMALL["roofline"])
    text = out.read_text()
    assert text.startswith("<?xml") and "<svg" in text
    assert 'width="648pt" height="396pt"' in text  # 9 x 5.5 inches at 72 pt


def test_import_plot_is_light():
    code = ("import sys, calc.plot.charts, calc.plot.gallery; "
            "print(' '.join(m for m in ('matplotlib', 'pandas', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# --------------------------------------------------------------------------- the roofline chart


def test_roofline_roofs_are_the_profile_numbers():
    fig = plot.roofline_chart("llama-3.1-8b", "h100-sxm", batch=1, prompt_len=512)
    # H100 SXM: 3.35 TB/s x 0.89 memory efficiency; bf16 989.4 TFLOP/s x 0.80 compute efficiency.
    ridge = 989.4e12 * 0.80 / (3.35e12 * 0.89)
    x, y = series(fig, "roof:h100-sxm:memory")
    assert y / x == pytest.approx([3.35 * 0.89] * 2, rel=1e-5)  # TFLOP/s per FLOP/B = TB/s
    assert x[-1] == pytest.approx(ridge, rel=1e-5)
    x, y = series(fig, "roof:h100-sxm:bf16")
    assert y == pytest.approx([989.4 * 0.80] * 2, rel=1e-5)
    x, _ = series(fig, "ridge:h100-sxm:bf16")
    assert x[0] == pytest.approx(ridge, rel=1e-5)
    _, y = series(fig, "datasheet:h100-sxm:bf16")
    assert y == pytest.approx([989.4] * 2, rel=1e-5)


def test_roofline_points_sit_where_the_estimators_say():
    B, T, S = 2, 256, 1024
    fig = plot.roofline_chart("llama-3.1-8b", "h100-sxm", batch=B, prompt_len=T, context=S)
    pre = calc.estimate("llama-3.1-8b", "h100-sxm", B, T, 1)
    dec = calc.estimate("llama-3.1-8b", "h100-sxm", B, S, 2)  # decode block: the step at context S
    for phase, cost in (("prefill", pre.prefill), ("decode", dec.decode)):
        x, y = series(fig, f"phase:h100-sxm:{phase}")
        assert x[0] == pytest.approx(float(cost.intensity), rel=1e-5)
        assert y[0] * 1e12 == pytest.approx(float(cost.flops / cost.time_s), rel=1e-5)
        recs, _ = ops_records(calc.load_model("llama-3.1-8b"), calc.load_hardware("h100-sxm"), phase, B,
                              T if phase == "prefill" else S)
        shown = [r for r in recs if r["flops"] > 0]  # the embedding (0 FLOPs) is left out
        data = plot.plotted_data(fig)["axes"][0]["series"][f"ops:h100-sxm:{phase}"]
        got = sorted(zip(data["x"], data["y"], data["size"], strict=True))
        want = sorted((r["intensity"], r["flops"] / r["time_s"] / 1e12, 12 + 600 * r["share"]) for r in shown)
        assert np.array(got) == pytest.approx(np.array(want), rel=1e-5)


def test_roofline_leaves_communication_out_and_says_so():
    fig = plot.roofline_chart("llama-3.1-70b", "h100-sxm", batch=1, prompt_len=512, tp=4, phases=("decode",))
    recs, _ = ops_records(calc.load_model("llama-3.1-70b"), calc.load_hardware("h100-sxm"), "decode", 1, 512, Setup.of(tp=4))
    comm = [r for r in recs if r["kind"] == "comm"]
    assert comm
    data = plot.plotted_data(fig)["axes"][0]["series"]
    assert "ops:h100-sxm:prefill" not in data
    assert len(data["ops:h100-sxm:decode"]["x"]) == len([r for r in recs if r["kind"] != "comm" and r["flops"] > 0])
    note = " ".join(t.get_text() for t in fig.texts)
    assert "tp.allreduce" in note and "no arithmetic intensity" in note


# --------------------------------------------------------------------------- sweep charts


def test_sweep_chart_points_match_estimate():
    m, hw = "llama-3.1-8b", "h100-sxm"
    fig = plot.make_chart("ttft", m, hw, prompt_len=[128, 1024])
    x, y = series(fig, f"series:{m} on {hw}")
    assert list(x) == [128, 1024]
    assert y[1] == pytest.approx(float(calc.estimate(m, hw, 1, 1024, 1).ttft_s) * 1e3, rel=1e-5)

    fig = plot.make_chart("tpot-batch", m, hw, batch=[1, 16], prompt_len=[256], output_len=[16])
    x, y = series(fig, f"series:{m} on {hw}")
    assert y[1] == pytest.approx(float(calc.estimate(m, hw, 16, 256, 16).tpot_s) * 1e3, rel=1e-5)

    fig = plot.make_chart("tpot-context", m, hw, context=[1024, 8192])
    x, y = series(fig, f"series:{m} on {hw}")
    assert y[1] == pytest.approx(float(calc.estimate(m, hw, 1, 8192, 2).decode.time_s) * 1e3, rel=1e-5)

    fig = plot.make_chart("throughput", m, "h100-sxm,l4", batch=[1, 8], prompt_len=[256], output_len=[16], tp=[2])
    x, y = series(fig, "series:l4")
    est = calc.estimate(m, "l4", 8, 256, 16, tp=2)
    assert (x[1], y[1]) == pytest.approx((float(est.tpot_s) * 1e3, float(est.output_tokens_per_s) / 2), rel=1e-5)

    fig = plot.make_chart("kv-memory", "llama-3.1-70b", hw, context=[1024, 4096], batch=[4], tp=[4])
    x, y = series(fig, "series:llama-3.1-70b on h100-sxm")
    # 80 layers x 2 (K, V) x 8 KV heads x 128 x 2 bytes per position; TP 4 keeps 2 of the 8 heads per GPU.
    assert y[1] * 1e9 == pytest.approx(4 * 4096 * 80 * 2 * 8 * 128 * 2 / 4, rel=1e-5)
    x, y = series(fig, "kv_model:llama-3.1-70b on h100-sxm")
    assert y[1] * 1e9 == pytest.approx(4 * 4096 * 80 * 2 * 8 * 128 * 2, rel=1e-5)
    _, y = series(fig, "capacity:h100-sxm")
    assert y[0] == pytest.approx(81_090 * 2**20 / 1e9)  # the 81,090 MiB CUDA gives a process (vLLM logs 79.19 GiB), in GB

    fig = plot.make_chart("tp", "llama-3.1-70b", hw, tp=[2, 4], batch=[1, 8], prompt_len=[256], output_len=[16])
    x, y = series(fig, "series:B=8")
    assert list(x) == [2, 4]
    assert y[1] == pytest.approx(float(calc.estimate("llama-3.1-70b", hw, 8, 256, 16, tp=4).tpot_s) * 1e3, rel=1e-5)
    _, ideal = series(fig, "ideal:B=8")
    assert ideal[1] == pytest.approx(y[0] / 2, rel=1e-5)


def test_points_that_do_not_fit_are_crossed_out():
    fig = plot.make_chart("tpot-batch", "llama-3.1-8b", "l4", batch=[1, 512], prompt_len=[2048], output_len=[16])
    x, _ = series(fig, "series:llama-3.1-8b on l4")
    bad, _ = series(fig, "nofit:llama-3.1-8b on l4")
    assert list(bad) == [512]


def test_pareto_frontier():
    pts = [(1, 10), (2, 30), (3, 20), (4, 40), (2, 5)]
    assert plot.pareto(pts) == [(1, 10), (2, 30), (4, 40)]
    fig = plot.make_chart("throughput", "llama-3.1-8b", "h100-sxm,l4", batch=[1, 8, 64], prompt_len=[256],
                          output_len=[16])
    fx, fy = series(fig, "frontier")
    assert np.all(np.diff(fx) > 0) and np.all(np.diff(fy) > 0)


def test_breakdown_shares():
    fig = plot.breakdown_chart("llama-3.1-8b", "h100-sxm", batch=2, prompt_len=256, context=1024)
    data = plot.plotted_data(fig)["axes"][0]
    assert data["xticklabels"] == ["prefill", "decode"]
    bars = {k.removeprefix("bars:"): v["y"] for k, v in data["series"].items()}
    assert np.sum(list(bars.values()), axis=0) == pytest.approx([100, 100], rel=1e-5)
    recs, _ = ops_records(calc.load_model("llama-3.1-8b"), calc.load_hardware("h100-sxm"), "decode", 2, 1024)
    att = sum(r["share"] for r in recs if r["kind"] == "attention")
    assert bars["attention (QK^T, PV)"][1] == pytest.approx(100 * att, rel=1e-5)


# --------------------------------------------------------------------------- gallery


def test_gallery_is_committed_and_up_to_date():
    readme = (gallery.GALLERY_DIR / "README.md").read_text()
    assert gallery.COMMAND in readme
    for c in gallery.CHARTS:
        assert png_size(gallery.GALLERY_DIR / f"{c.name}.png") == (WIDTH, HEIGHT)
        assert f"({c.name}.png)" in readme
        assert len(c.caption().splitlines()) == 2
    assert (gallery.GALLERY_DIR / "tpot_vs_tp.png").is_file()
    for c in gallery.CHARTS:  # every chart has its data beside it (values are the calculator's)
        committed = json.loads((gallery.GALLERY_DIR / f"{c.name}.json").read_text())
        assert committed["data"]["axes"], c.name


# --------------------------------------------------------------------------- CLI


def run(*args):
    return runner.invoke(app, ["plot", *map(str, args)])


def test_cli_writes_png_and_svg(tmp_path):
    r = run("ttft", "--hardware", "h100-sxm,l4", "--prompt-len", "128,1024", "--out", tmp_path / "t.png")
    assert r.exit_code == 0, r.output
    assert png_size(tmp_path / "t.png") == (WIDTH, HEIGHT)
    r = run("roofline", "--seq-len", 2048, "--phase", "decode", "--out", tmp_path / "r.svg")
    assert r.exit_code == 0, r.output
    assert "<svg" in (tmp_path / "r.svg").read_text()


@pytest.mark.parametrize("args, where", [
    (["bogus", "--out", "{d}/x.png"], "KIND"),
    (["ttft", "--out", "{d}/x.jpg"], "--out"),
    (["ttft", "--out", "{d}/missing/x.png"], "--out"),
    (["ttft", "--out", "{d}/file.txt/x.png"], "--out"),
    (["ttft"], "--out"),
    (["ttft", "--batch", "", "--out", "{d}/x.png"], "--batch"),
    (["ttft", "--model", ",", "--out", "{d}/x.png"], "--model"),
    (["ttft", "--prompt-len", "9:1", "--out", "{d}/x.png"], "--prompt-len"),
    (["roofline", "--batch", "1,2", "--out", "{d}/x.png"], "--batch"),
    (["tpot-batch", "--context", "5", "--out", "{d}/x.png"], "--context"),
    (["kv-memory", "--context", "999999", "--out", "{d}/x.png"], "--context"),
    (["breakdown", "--phase", "decode", "--out", "{d}/x.png"], "--phase"),
])
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, args, where):
    (tmp_path / "file.txt").write_text("not a folder")
    r = run(*[a.format(d=tmp_path) for a in args])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("roofline: error: ") and where in lines[0], r.output
    assert not list(tmp_path.glob("*.png"))
