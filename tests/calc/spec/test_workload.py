"""Workload YAML: schema, sampling, traces, and the one-line errors (exit 2) of bad input."""

import numpy as np
import pytest
from typer.testing import CliRunner

from calc.cli.app import app
from calc.core.errors import SpecError
from calc.spec.workload import Workload, load_workload, read_trace

BASE = """\
name: t
model: llama-3.1-8b
hardware: [h100-sxm]
arrival: {rate_per_s: 2}
"""


def write(tmp_path, text, name="w.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_fixed_lengths_and_defaults(tmp_path):
    wl = load_workload(write(tmp_path, BASE + "prompt_len: {dist: fixed, value: 1536}\n"
                                              "output_len: {dist: fixed, value: 513}\nrequests: 50\n"))
    assert wl.n == 50 and set(wl.prompt_len) == {1536} and set(wl.output_len) == {513}
    s = wl.spec
    assert (s.serving.gpu_memory_utilization, s.serving.block_size, s.serving.max_batched_tokens) == (0.9, 16, 2048)
    assert s.arrival.process == "poisson" and s.slo.targets() == {}
    assert wl.price_per_gpu_hour(wl.hardware[0]) == wl.hardware[0].price.usd_per_hour


def test_distributions_are_seeded_and_clipped(tmp_path):
    text = BASE + ("prompt_len: {dist: lognormal, median: 1000, sigma: 0.8, min: 16, max: 4000}\n"
                   "output_len: {dist: uniform, low: 10, high: 20}\nrequests: 4000\nseed: 7\n")
    a, b = load_workload(write(tmp_path, text)), load_workload(write(tmp_path, text, "again.yaml"))
    assert np.array_equal(a.prompt_len, b.prompt_len) and np.array_equal(a.output_len, b.output_len)
    assert a.prompt_len.min() >= 16 and a.prompt_len.max() <= 4000
    assert 900 < np.median(a.prompt_len) < 1100  # lognormal median
    assert set(np.unique(a.output_len)) == set(range(10, 21))  # both ends included
    c = load_workload(write(tmp_path, text.replace("seed: 7", "seed: 8"), "other.yaml"))
    assert not np.array_equal(a.prompt_len, c.prompt_len)


def test_normal_and_price_override(tmp_path):
    wl = load_workload(write(tmp_path, BASE + "prompt_len: {dist: normal, mean: 500, std: 50}\n"
                                              "output_len: {dist: fixed, value: 10}\nprices: {h100-sxm: 2.5}\n"))
    assert 480 < wl.prompt_len.mean() < 520
    assert wl.price_per_gpu_hour(wl.hardware[0]) == 2.5


def test_trace_relative_to_the_workload_file(tmp_path):
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "t.csv").write_text("prompt_len,output_len,extra\n100,5,x\n200,7,y\n\n")
    wl = load_workload(write(tmp_path, BASE + "trace: traces/t.csv\nrequests: 30\n"))
    assert set(zip(wl.prompt_len.tolist(), wl.output_len.tolist(), strict=True)) <= {(100, 5), (200, 7)}
    assert wl.trace_rows == 2


@pytest.mark.parametrize("body, problem", [
    ("prompt_len,output_len\n100,x\n", "line 2: output_len 'x' is not a number"),
    ("prompt_len,output_len\n100,5\n100\n", "line 3: expected 2 columns"),
    ("prompt,output\n1,2\n", "line 1: header lacks prompt_len, output_len"),
    ("prompt_len,output_len\n", "has a header but no rows"),
    ("", "empty trace"),
    ("prompt_len,output_len\n0,5\n", "whole number >= 1"),
    ("prompt_len,output_len\n1.5,5\n", "whole number >= 1"),
])
def test_malformed_trace(tmp_path, body, problem):
    p = tmp_path / "bad.csv"
    p.write_text(body)
    with pytest.raises(SpecError) as e:
        read_trace(p)
    assert problem in str(e.value) and str(p) in str(e.value)


@pytest.mark.parametrize("extra, where", [
    ("prompt_len: {dist: fixed, value: 10}\noutput_len: {dist: fixed, value: 10}\ntypo: 1\n", "typo: unknown key"),
    ("output_len: {dist: fixed, value: 10}\n", "give prompt_len and output_len distributions, or a trace"),
    ("prompt_len: {dist: zipf, value: 10}\noutput_len: {dist: fixed, value: 10}\n", "prompt_len"),
    ("prompt_len: {dist: uniform, low: 10, high: 5}\noutput_len: {dist: fixed, value: 10}\n", "high (5) is below low"),
    ("prompt_len: {dist: fixed, value: 100000}\noutput_len: {dist: fixed, value: 40000}\n", "max context 131072"),
    ("prompt_len: {dist: fixed, value: 10}\noutput_len: {dist: fixed, value: 10}\nprices: {l4: 1}\n",
     "not in hardware"),
    ("trace: missing.csv\n", "trace: no such file"),
])
def test_bad_workloads_name_file_and_field(tmp_path, extra, where):
    p = write(tmp_path, BASE + extra)
    with pytest.raises(SpecError) as e:
        load_workload(p)
    assert where in str(e.value) and str(p) in str(e.value)


def test_rate_xor_concurrency():
    kw = dict(name="t", model="m", hardware=["h"], trace="x.csv")
    with pytest.raises(ValueError, match="exactly one"):
        Workload(**kw, arrival={"rate_per_s": 1, "concurrency": 4})
    with pytest.raises(ValueError, match="exactly one"):
        Workload(**kw, arrival={})
    assert Workload(**kw, arrival={"concurrency": 4}).arrival.concurrency == 4
    with pytest.raises(ValueError, match="cv applies"):
        Workload(**kw, arrival={"rate_per_s": 1, "cv": 2})


def test_cli_bad_input_exits_2(tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["plan", str(tmp_path / "nope.yaml")])
    assert r.exit_code == 2 and "no such file" in r.output
    (tmp_path / "t.csv").write_text("prompt_len,output_len\n10,ten\n")
    p = write(tmp_path, BASE + "trace: t.csv\n")
    r = runner.invoke(app, ["plan", str(p)])
    assert r.exit_code == 2 and "line 2" in r.output and "Traceback" not in r.output
    p = write(tmp_path, BASE.replace("h100-sxm", "h100-sxn") + "trace: t.csv\n", "hw.yaml")
    r = runner.invoke(app, ["plan", str(p)])
    assert r.exit_code == 2 and "hardware.0" in r.output and "did you mean" in r.output


def test_workload_engine_preset_applies_to_every_candidate(tmp_path):
    from calc.spec.workload import load_workload

    p = tmp_path / "w.yaml"
    p.write_text("name: w\nmodel: llama-3.1-8b\nhardware: [h100-sxm, l4]\nengine: trtllm\n"
                 "arrival: {rate_per_s: 1}\nprompt_len: {dist: fixed, value: 128}\n"
                 "output_len: {dist: fixed, value: 16}\n")
    wl = load_workload(p)
    assert [h.efficiency.engine for h in wl.hardware] == ["trtllm", "trtllm"]
    p.write_text(p.read_text().replace("trtllm", "trt"))
    import pytest as _pytest

    from calc.core.errors import SpecError

    with _pytest.raises(SpecError, match="engine.*unknown engine"):
        load_workload(p)


def test_slo_keys_parse_once_into_typed_targets():
    from calc.spec.workload import SLO, Target

    slo = SLO(ttft_p99_s=1.0, tpot_p50_s=0.05)
    assert slo.parsed() == (Target("ttft", 99, 1.0), Target("tpot", 50, 0.05))
    assert slo.targets() == {"ttft_p99": 1.0, "tpot_p50": 0.05}
    assert [t.label for t in slo.parsed()] == ["TTFT p99", "TPOT p50"]
    assert Target.of("e2e_p99", 3.0).label == "e2e p99"


def test_every_problem_at_once_and_the_valid_keys(tmp_path):
    # The first try of a new user (issue 24): a flat arrival_rate, so `arrival` is missing and
    # `arrival_rate` unknown: both are said, and the unknown key lists the valid ones.
    p = tmp_path / "w.yaml"
    p.write_text("name: t\nmodel: llama-3.1-8b\nhardware: [h100-sxm]\narrival_rate: 10\n"
                 "prompt_len: {dist: fixed, value: 3000}\noutput_len: {dist: fixed, value: 400}\n"
                 "slo: {ttft_p99_s: 2, tpot_p99_s: 0.04}\n")
    with pytest.raises(SpecError) as e:
        load_workload(p)
    msg = str(e.value)
    assert "arrival: Field required" in msg and "arrival_rate: unknown key" in msg
    assert "valid keys: arrival, chunk_tokens," in msg and "more problem" not in msg
    # a nested unknown key lists that mapping's keys
    p.write_text(p.read_text().replace("arrival_rate: 10", "arrival: {rate: 10}"))
    with pytest.raises(SpecError) as e:
        load_workload(p)
    assert "arrival.rate: unknown key (a typo? valid keys: concurrency, cv, kind, process, rate_per_s)" in str(e.value)
