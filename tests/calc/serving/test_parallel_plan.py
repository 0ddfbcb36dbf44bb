"""PP and EP in the planner's search; replicas that span nodes communicate over the network."""

import math

import numpy as np
import pytest

from calc.cost.dtypes import Dtypes
from calc.cost.opcost import Pass
from calc.cost.operators import comm_ops
from calc.cost.parallel import link
from calc.serving.planner.plan import plan
from calc.serving.replica.capacity import Replica, across_nodes
from calc.spec.catalog import load_hardware, load_model
from calc.spec.workload import Cluster, Serving, load_workload

H100 = load_hardware("h100-sxm")
L70 = load_model("llama-3.1-70b")


def test_a_replica_across_nodes_uses_the_network():
    hw = across_nodes(H100, Cluster(gpus_per_node=8, network_gb_s=50, network_latency_us=10))
    rep = Replica(L70, hw, 8, 16, Dtypes.resolve(L70), Serving(), pp=2, nodes=2)
    net = link(rep.hw, rep.par)
    assert (net.bandwidth_bytes_per_s, net.hop_s) == pytest.approx((50e9, 10e-6))
    assert net.collectives is None  # the profile's NVLink-fitted collective costs do not apply
    nv = link(H100, rep.par)  # inside a node: NVLink 4, 450 GB/s each way, 2.1 us
    assert (nv.bandwidth_bytes_per_s, nv.hop_s) == pytest.approx((450e9, 2.1e-6))
    # one decode token of 8 sequences: the TP all-reduce sends 2 (8-1)/8 of x[8, 8192] at bf16 per GPU
    ps = Pass(np.float64(8.0), np.float64(1.0), np.float64(1000.0), "decode")
    ar = next(op for op in comm_ops(L70, ps, rep.dt, rep.par) if op.name == "tp.allreduce")
    assert float(ar.comm_bytes) == pytest.approx(2 * 7 / 8 * 8 * 8192 * 2)
    assert ar.comm_hops == 2 * 7
    assert rep.gpus == 16 and rep.split == "TP8 PP2 (2 nodes)"


def test_pp_engines_split_the_pages():
    dt = Dtypes.resolve(L70)
    one = Replica(L70, H100, 4, 16, dt, Serving())
    two = Replica(L70, H100, 4, 16, dt, Serving(), pp=2)
    # per GPU per position: 40 of 80 layers x K and V x 8 KV heads / TP4 x head dim 128 x 2 bytes
    assert two.kv.kv_bytes_per_token == 40 * 2 * (8 // 4) * 128 * 2
    assert one.kv.kv_bytes_per_token == 80 * 2 * (8 // 4) * 128 * 2
    # each of the two engines holds half of the GPU's pages
    assert two.kv.pages == math.floor(two.kv.kv_bytes / (16 * two.kv.kv_bytes_per_token)) // 2


WL = """\
name: t
model: {model}
hardware: [h100-sxm]
arrival: {{rate_per_s: 2}}
prompt_len: {{dist: fixed, value: 500}}
output_len: {{dist: fixed, value: 50}}
slo: {{ttft_p99_s: 5.0}}
max_gpus: 16
tp: [4, 8]
pp: [1, 2]
ep: [1, 4]
max_batch: [32]
requests: 60
"""


def test_search_covers_pp_and_ep(tmp_path):
    w = tmp_path / "w.yaml"
    w.write_text(WL.format(model="mixtral-8x7b"))
    p = plan(load_workload(w))
    splits = {(o.tp, o.pp, o.ep) for o in p.options}
    assert {(4, 1, 1), (4, 2, 1), (4, 1, 4), (8, 2, 4)} <= splits
    # a PP2 engine is simulated at 1 / (R x 2) of the load; the trial counts R x 2 engines
    t = next(t for o in p.options if o.pp == 2 for t in o.trials)
    assert t.sim.offered_per_s == pytest.approx(2 / (t.replicas * 2))
    assert t.output_tokens_per_s == pytest.approx(t.replicas * 2 * t.sim.output_tokens_per_s)
    assert t.gpus == t.replicas * t.replica.tp * 2
    # TP8 PP2 = 16 GPUs: two nodes of 8
    assert any(o.nodes == 2 and o.tp == 8 and o.pp == 2 for o in p.options)


def test_dense_model_skips_ep(tmp_path):
    w = tmp_path / "w.yaml"
    w.write_text(WL.format(model="llama-3.1-8b"))
    p = plan(load_workload(w))
    assert {o.ep for o in p.options} == {1}


def test_report_says_how_cross_node_replicas_are_priced(tmp_path):
    from calc.render.plan_notes import assumptions

    w = tmp_path / "w.yaml"
    w.write_text(WL.format(model="mixtral-8x7b"))
    notes = " ".join(assumptions(plan(load_workload(w))))
    assert "h100-sxm TP8 PP2 (2 nodes)" in notes and "over the network, 50 GB/s per GPU" in notes
