"""Bands in estimate and sweep: beside each time and rate, from the shipped table, off with --no-bands."""

import io
import json
import math

import pandas as pd
import pytest
from typer.testing import CliRunner

from calc.cli.app import app
from calc.spec.bands import load_bands, metric_family

runner = CliRunner()
ARGS = ["--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--batch", "4", "--prompt-len", "1024",
        "--output-len", "64"]


def run(*args):
    r = runner.invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r.output


def widened(table, group: str, key: str) -> tuple[float, float]:
    """(log_lo, log_hi) of a stored group widened by the table's factor for the group, else for ``key``
    (family/load level, else "all"): the half-width about the centre times the factor."""
    b = table.groups[group]
    f = table.widen_groups.get(group) or table.widen.get(key, table.widen.get("all", 1.0))
    mid, half = (b.log_lo + b.log_hi) / 2, (b.log_hi - b.log_lo) / 2
    return mid - f * half, mid + f * half


def test_estimate_json_carries_bands_by_the_stated_arithmetic():
    d = json.loads(run("estimate", *ARGS, "--format", "json"))
    table = load_bands()
    band = d["band"]
    assert band["coverage"] == 0.8 and band["quantiles"] == [0.1, 0.9]
    for name, key, family in (("ttft_s", "ttft_band_s", "ttft"), ("tpot_s", "tpot_band_s", "decode"),
                              ("e2e_s", "e2e_band_s", "e2e")):
        group = band["by_prediction"][name]["group"]
        lo, hi = widened(table, group, f"{family}/pass")  # one pass at a fixed batch
        # a time: measured = predicted / e^r, r between the widened log_lo and log_hi
        assert d[key] == pytest.approx([d[name] * math.exp(-hi), d[name] * math.exp(-lo)])
        assert band["by_prediction"][name]["rows"] == table.groups[group].rows >= table.min_rows
    lo, hi = widened(table, band["by_prediction"]["output_tokens_per_s"]["group"], "throughput/pass")
    x = d["output_tokens_per_s"]
    assert d["output_tokens_band_per_s"] == pytest.approx([x * math.exp(lo), x * math.exp(hi)])
    assert d["prefill"]["time_band_s"] == d["ttft_band_s"]  # TTFT is the prefill time (no sampling term here)
    assert band["rows"] == min(v["rows"] for v in band["by_prediction"].values())
    assert band["group"] in table.groups


def test_the_band_group_is_the_regimes_most_specific_stored_one():
    d = json.loads(run("estimate", *ARGS, "--engine", "trtllm", "--weight-dtype", "fp8", "--format", "json"))
    table = load_bands()
    g = d["band"]["by_prediction"]["tpot_s"]["group"]
    chain = ["decode/pass/dense/trtllm/fp8/hopper", "decode/pass/dense/trtllm/fp8", "decode/pass/dense/trtllm",
             "decode/pass/dense", "decode/pass", "decode", "all"]  # ARGS: a dense model
    assert g == next(c for c in chain if c in table.groups)


def test_no_bands_leaves_the_contract_as_it_was():
    with_bands = json.loads(run("estimate", *ARGS, "--format", "json"))
    d = json.loads(run("estimate", *ARGS, "--format", "json", "--no-bands"))
    assert not [k for k in d if "band" in k] and "time_band_s" not in d["prefill"]
    assert {k: v for k, v in with_bands.items() if "band" not in k and k not in ("prefill", "decode")} == \
        {k: v for k, v in d.items() if k not in ("prefill", "decode")}
    assert "bands" not in run("estimate", *ARGS, "--no-bands")


def test_table_shows_the_ranges_and_their_groups():
    out = run("estimate", *ARGS)
    assert "bands  in brackets, where 80% of held-out measurements fell" in out and "ttft/" in out


def test_ideal_and_cpu_get_no_band_and_say_why():
    d = json.loads(run("estimate", *ARGS, "--ideal", "--format", "json"))
    assert d["band"] is None and "ideal" in d["band_note"]
    cpu = ["--model", "tiny-decoder", "--hardware", "cpu-generic-2core", "--format", "json"]
    d = json.loads(run("estimate", *cpu))
    assert d["band"] is None and "without bands of its own" in d["band_note"]


def test_sweep_band_columns_match_estimate():
    frame = pd.read_csv(io.StringIO(run("sweep", *ARGS)))
    d = json.loads(run("estimate", *ARGS, "--format", "json"))
    row = frame.iloc[0]
    assert [row["ttft_band_lo_s"], row["ttft_band_hi_s"]] == pytest.approx(d["ttft_band_s"])
    assert [row["tpot_band_lo_s"], row["tpot_band_hi_s"]] == pytest.approx(d["tpot_band_s"])
    assert [row["output_tokens_band_lo_per_s"], row["output_tokens_band_hi_per_s"]] == \
        pytest.approx(d["output_tokens_band_per_s"])
    plain = pd.read_csv(io.StringIO(run("sweep", *ARGS, "--no-bands")))
    assert not [c for c in plain.columns if "band" in c]


def test_compare_says_whether_each_measurement_falls_inside_its_band():
    from pathlib import Path

    bench = Path(__file__).resolve().parents[2] / "fixtures" / "bench"
    d = json.loads(run("compare", bench / "vllm-serve-concurrency16.json", "--hardware", "h100-sxm", "--format", "json"))
    table = load_bands()
    inside = []
    for m in d["runs"][0]["metrics"]:
        if m["predicted"] is None:
            assert m["band"] is None and m["inside"] is None
            continue
        # 16 clients in flight: load level medium (4 < 16 <= 32)
        r_lo, r_hi = widened(table, m["band_group"], f"{metric_family(m['metric'])}/medium")
        x = m["predicted"]
        lo, hi = ((x * math.exp(r_lo), x * math.exp(r_hi)) if "_per_s" in m["metric"]
                  else (x * math.exp(-r_hi), x * math.exp(-r_lo)))
        assert m["band"] == pytest.approx([lo, hi]) and m["band_rows"] == table.groups[m["band_group"]].rows
        assert m["inside"] == (lo <= m["measured"] <= hi)
        inside.append(m["inside"])
    assert d["summary"]["banded"] == len(inside) and d["summary"]["inside_band"] == pytest.approx(
        sum(inside) / len(inside))
    text = run("compare", bench / "vllm-serve-concurrency16.json", "--hardware", "h100-sxm")
    assert "80% band" in text and "inside their 80% band" in text


def test_compare_load_levels_of_a_run():
    from types import SimpleNamespace as NS

    import numpy as np

    from calc.accuracy.compare_bands import _load

    def sc(**run):
        base = dict(format="vllm-serve", load="rate", concurrency=None, rate_per_s=None, num_requests=None)
        return NS(run=NS(**{**base, **run}), max_num_seqs=256, output_lens=np.array([11.0]))

    assert _load(sc(load="batch"), {}) == "pass" and _load(sc(format="llama-bench", load="concurrency"), {}) == "pass"
    assert _load(sc(load="concurrency", concurrency=16), {}) == "medium"
    # Little's law: 4 req/s x 2 s in flight = 8 (medium); without e2e, TTFT + (G - 1) TPOT = 0.1 + 10 x 0.01 = 0.2 s
    assert _load(sc(rate_per_s=4.0), {"e2e_mean_s": 2.0}) == "medium"
    assert _load(sc(rate_per_s=4.0), {"ttft_mean_s": 0.1, "tpot_mean_s": 0.01}) == "low"  # 0.8 in flight
    assert _load(sc(load="burst", num_requests=1000), {}) == "high"  # 256 running at most
