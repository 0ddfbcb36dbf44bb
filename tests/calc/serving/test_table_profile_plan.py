"""`roofline plan` on a profile whose kernels are measured tables (roofline validate's calibrated.yaml):
its steps are timed from the tables, exactly as the cost model times them, dense and MoE alike."""

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from calc.cli.app import app
from calc.cost.dtypes import Dtypes
from calc.cost.latency import mixed_step_cost
from calc.serving.replica.capacity import Replica
from calc.serving.steps.decodeline import decode_line
from calc.spec.catalog import load_hardware, load_model
from calc.spec.workload import Serving

runner = CliRunner()
TABLES = Path(__file__).parents[3] / "reports" / "validation" / "h200-serving-confirm" / "calibrated.yaml"

WORKLOAD = """\
name: tables
model: {model}
hardware: [{hw}]
arrival: {{rate_per_s: {rate}}}
prompt_len: {{dist: fixed, value: 1024}}
output_len: {{dist: fixed, value: 64}}
slo: {{ttft_p99_s: 1.0, tpot_p99_s: 0.05}}
tp: [1]
max_batch: [32]
max_gpus: 1
requests: 100
"""


def test_a_table_profile_plans_and_its_decode_runs_take_no_line():
    m = load_model("llama-3.1-8b")
    rep = Replica(m, load_hardware(str(TABLES)), 1, 32, Dtypes.resolve(m), Serving())
    assert decode_line(rep.steps, 8) is None  # table times are not piecewise linear in the context
    kv = np.array([900.0, 1500.0, 3000.0])
    got, _ = rep.timer.decode_run(kv, np.arange(3.0))
    want = [float(mixed_step_cost(m, rep.hw, np.ones(3), kv + a, rep.dt, rep.eff, rep.attention, rep.par).time_s)
            for a in range(3)]
    np.testing.assert_allclose(got, want, rtol=1e-9)


def test_plan_on_a_table_profile_answers(tmp_path):
    w = tmp_path / "w.yaml"
    w.write_text(WORKLOAD.format(model="llama-3.1-8b", hw=TABLES, rate=4))
    r = runner.invoke(app, ["plan", str(w), "--format", "json", "-q"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    (row,) = out["ranked"]  # one configuration: TP 1, max batch 32, one replica
    assert row["hardware"] == "profile-cuda" and row["tp"] == 1 and row["max_batch"] == 32
    # 4 requests/s of 1024 + 64 tokens on an H200 (a 64-step answer at a few ms a step) meets both SLOs
    assert row["meets_slos"] is True


def test_moe_on_a_table_profile_plans_too(tmp_path):
    """An expert's matmul reads the table at its own rows (the routed rows over the experts hit): not
    affine in a step's features, but its total over the calls is."""
    w = tmp_path / "w.yaml"
    # the reference MoE the tables were measured on loops over its experts: 0.5 requests/s, not 4
    w.write_text(WORKLOAD.format(model="qwen3-30b-a3b", hw=TABLES, rate=0.5))
    r = runner.invoke(app, ["plan", str(w), "--format", "json", "-q"])
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.stdout)["ranked"]
    assert row["hardware"] == "profile-cuda" and row["meets_slos"] is True
