"""Plans at the pessimistic edge of their bands: the edge arithmetic by hand, fragile configurations,
--robust (every configuration listed meets the real SLOs at its edge), and the JSON carrying both."""

import json
import math
from types import SimpleNamespace as NS

import numpy as np
import pytest
from typer.testing import CliRunner

from calc.cli.app import app
from calc.cost.dtypes import Dtypes
from calc.serving.planner.bands import PlanBands, edge, load_of, robust_targets
from calc.spec.bands import Band, BandTable
from calc.spec.catalog import load_hardware, load_model

runner = CliRunner()
H100 = load_hardware("h100-sxm")
DT = Dtypes.resolve(load_model("llama-3.1-8b"), None, None, None)
# TTFT residuals at the 10% point -0.5 (measured up to e^0.5 = 1.65x the prediction), decode -0.1
TABLE = BandTable(groups={"ttft": Band(rows=30, log_lo=-0.5, log_hi=0.2), "decode": Band(rows=25, log_lo=-0.1,
                                                                                         log_hi=0.3)})


def _trial(ttft_p99, tpot_p99, rate=10.0, e2e=0.2, meets=True):
    sim = NS(requests_per_s=rate, e2e_s=np.full(5, e2e))
    return NS(stats={"ttft_p99": ttft_p99, "tpot_p99": tpot_p99, "e2e_p99": 1.0}, sim=sim, meets=meets,
              replica=NS(hw=H100, dt=DT, model=load_model("llama-3.1-8b")), label=f"trial {ttft_p99}")


def test_the_edge_is_the_slow_end_of_the_band_by_hand():
    t = _trial(0.5, 0.030)
    e = edge(t, TABLE, {"ttft_p99": 1.0, "tpot_p99": 0.032})
    assert e.latency_s["ttft_p99"] == pytest.approx(0.5 * math.exp(0.5))  # 0.824 s <= 1 s
    assert e.latency_s["tpot_p99"] == pytest.approx(0.030 * math.exp(0.1))  # 33.2 ms > 32 ms
    assert e.band_s["ttft_p99"] == pytest.approx((0.5 * math.exp(-0.2), 0.5 * math.exp(0.5)))
    assert e.groups["ttft_p99"] == ("ttft", 30)
    assert "e2e_p99" not in e.latency_s  # no e2e group and no "all": no band
    assert not e.meets and [k for k, *_ in e.misses] == ["tpot_p99"]
    # Little's law: 10 req/s x 0.2 s = 2 in flight (low); 10 x 4 s = 40 (high)
    assert load_of(t) == "low" and load_of(_trial(0.5, 0.03, e2e=4.0)) == "high"


def test_fragile_means_nominally_met_and_missed_at_the_edge():
    pb = PlanBands(TABLE, "test", {"ttft_p99": 1.0, "tpot_p99": 0.032})
    safe, fragile, failing = _trial(0.5, 0.020), _trial(0.5, 0.030), _trial(2.0, 0.030, meets=False)
    assert pb.fragile([safe, fragile, failing]) == [fragile]


def test_robust_targets_divide_by_the_widest_edge_factor():
    got = robust_targets({"ttft_p99": 1.0, "tpot_p99": 0.04, "e2e_p99": 5.0}, TABLE, [H100], DT, load_model("llama-3.1-8b"))
    assert got == pytest.approx({"ttft_p99": 1.0 / math.exp(0.5), "tpot_p99": 0.04 / math.exp(0.1), "e2e_p99": 5.0})


WL = """\
name: small-chat
model: llama-3.1-8b
hardware: [h100-sxm, a100-80gb-sxm]
arrival: {rate_per_s: 8}
prompt_len: {dist: lognormal, median: 600, sigma: 0.7, min: 16, max: 4096}
output_len: {dist: lognormal, median: 150, sigma: 0.6, min: 4, max: 1024}
slo: {ttft_p99_s: 1.0, tpot_p99_s: 0.05}
tp: [1, 2]
max_batch: [32, 128]
max_gpus: 4
requests: 200
"""


def _plan(tmp_path, *args):
    p = tmp_path / "w.yaml"
    p.write_text(WL)
    r = runner.invoke(app, ["plan", str(p), "--format", "json", "-q", *args])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_plan_json_carries_nominal_and_edge_and_robust_meets_at_the_edge(tmp_path):
    d = _plan(tmp_path)
    assert d["bands"]["slo_s"] == {"ttft_p99": 1.0, "tpot_p99": 0.05} and not d["bands"]["robust"]
    for t in d["ranked"]:
        e = t["edge"]
        assert t["meets_slos"] and set(e) >= {"latency_s", "band_s", "meets_slos", "load", "groups"}
        for k, v in e["latency_s"].items():
            assert v == pytest.approx(e["band_s"][k][1]) and v >= t["latency_s"][k]  # the slow end
        at_edge = all(e["latency_s"][k] <= lim for k, lim in d["bands"]["slo_s"].items())
        assert e["meets_slos"] == at_edge
        assert (t["config"] in d["bands"]["fragile"]) == (not at_edge)
    robust = _plan(tmp_path, "--robust")
    assert robust["bands"]["robust"] and robust["ranked"]
    assert all(v < d["bands"]["slo_s"][k] for k, v in robust["bands"]["searched_slo_s"].items())
    assert all(t["edge"]["meets_slos"] for t in robust["ranked"]) and not robust["bands"]["fragile"]
    assert "bands" not in _plan(tmp_path, "--no-bands")
