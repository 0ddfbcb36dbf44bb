"""Tensor, pipeline and expert parallelism: hand-derived per-GPU memory and communication."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from calc import SpecError, load_hardware, load_model
from calc.cli.app import app
from calc.core.units import DTYPE_BYTES
from calc.cost.dtypes import Dtypes
from calc.cost.latency import estimate
from calc.cost.parallel import Parallel, sharded_weight_bytes
from calc.cost.setup import Setup
from calc.spec.catalog import model_catalog


@pytest.fixture(scope="module")
def l70():
    return load_model("llama-3.1-70b")


@pytest.fixture(scope="module")
def h100():
    return load_hardware("h100-sxm")


def test_tp8_weights_per_gpu(l70, h100):
    est = estimate(l70, h100, 1, 1024, 2, Setup.of(tp=8))
    # 70.6e9 parameters x 2 bytes / 8 GPUs (norms are replicated: a few MB more)
    assert est.memory.weights_bytes == pytest.approx(70.6e9 * 2 / 8, rel=5e-3)
    assert est.weight_bytes == l70.params_total * 2  # the top-level figure stays whole-model


def test_tp8_decode_allreduce_bytes(l70, h100):
    N, L, H, a = 8, 80, 8192, 2
    est = estimate(l70, h100, 1, 1024, 2, Setup.of(tp=N))
    [ar] = [t.op for t in est.decode.ops if t.op.name == "tp.allreduce"]
    # two all-reduces per layer (after attention, after the MLP) + one after the embedding
    assert ar.layers == 2 * L + 1
    message = 1 * 1 * H * a  # B x new tokens x H x bf16
    assert ar.comm_bytes == pytest.approx(2 * (N - 1) / N * message)
    per_layer_total = 2 * L * 8192 * 2  # the 2 all-reduces x 80 layers x 8192 x 2 B
    assert ar.comm_bytes * 2 * L == pytest.approx(2 * (N - 1) / N * per_layer_total)
    # ring: 2(N-1)/N * M / link + 2(N-1) hops of latency, on NVLink 450 GB/s per direction
    link = h100.interconnect
    expected = 2 * (N - 1) / N * message / (link.bandwidth_gb_s_per_direction * 1e9) + 2 * (N - 1) * link.latency_us * 1e-6
    [t] = [t for t in est.decode.ops if t.op.name == "tp.allreduce"]
    assert t.time_s == pytest.approx(expected)


def test_does_not_fit_at_tp1_fits_at_tp4(l70, h100):
    runner = CliRunner()
    one = runner.invoke(app, ["estimate", "-m", "llama-3.1-70b", "--hardware", "h100-sxm"])
    four = runner.invoke(app, ["estimate", "-m", "llama-3.1-70b", "--hardware", "h100-sxm", "--tp", "4"])
    assert one.exit_code == 0 and "DOES NOT FIT" in one.output
    assert four.exit_code == 0 and "fits:" in four.output and "DOES NOT FIT" not in four.output
    assert not estimate(l70, h100, setup=Setup.of(tp=1)).memory.fits and estimate(l70, h100, setup=Setup.of(tp=4)).memory.fits


def test_tpot_has_diminishing_returns_in_tp(l70, h100):
    tps = [1, 2, 4, 8]
    tpot = np.array([float(estimate(l70, h100, 1, 1024, 64, Setup.of(tp=n)).tpot_s) for n in tps])
    comm = np.array([float(estimate(l70, h100, 1, 1024, 64, Setup.of(tp=n)).decode.comm_s) for n in tps])
    speedup = tpot[0] / tpot
    assert np.all(np.diff(tpot) < 0)  # more GPUs still help here...
    assert np.all(np.diff(speedup / np.array(tps)) < 0)  # ...but each doubling buys less
    assert np.all(np.diff(comm) > 0)  # because communication grows


def test_json_carries_split_and_communication():
    r = CliRunner().invoke(app, ["estimate", "-m", "llama-3.1-70b", "--hardware", "h100-sxm", "--tp", "4",
                                 "--pp", "2", "-f", "json"])
    d = json.loads(r.output)
    assert (d["tp"], d["pp"], d["ep"], d["gpus"]) == (4, 2, 1, 8)
    assert d["communication"]["decode"]["bytes"] > 0 and d["communication"]["prefill"]["time_s"] > 0
    assert d["pipeline"]["output_tokens_per_s"] > d["output_tokens_per_s"]
    # memory is per GPU: 40 layers of 80 on the busiest stage, sharded 4 ways
    assert d["memory"]["weights_bytes"] < d["weight_bytes"] / 7


@pytest.mark.parametrize("name", sorted(model_catalog()))
def test_unsplit_sharded_weights_equal_the_model_weights(name):
    m = load_model(name)
    dt = Dtypes.resolve(m)
    got = sharded_weight_bytes(m, dt.weight_bytes_per_param(), DTYPE_BYTES[m.serving_dtype], Parallel())
    assert got == pytest.approx(m.weight_bytes(), rel=1e-9)


def test_kv_heads_replicate_beyond_hkv(h100):
    m = load_model("llama-3.1-70b")  # 8 KV heads
    full = estimate(m, h100, 1, 1024, 1)
    at16 = estimate(m, h100, 1, 1024, 1, Setup.of(tp=16))
    at8 = estimate(m, h100, 1, 1024, 1, Setup.of(tp=8))
    # TP 8: one KV head per GPU; TP 16: still one (replicated), so no further saving
    assert at8.memory.kv_cache_bytes == full.memory.kv_cache_bytes / 8
    assert at16.memory.kv_cache_bytes == at8.memory.kv_cache_bytes


def test_mla_latent_cache_is_replicated(h100):
    m = load_model("deepseek-v3")
    one = estimate(m, h100, 1, 1024, 1, Setup.of(tp=1))
    eight = estimate(m, h100, 1, 1024, 1, Setup.of(tp=8))
    assert eight.memory.kv_cache_bytes == one.memory.kv_cache_bytes


def test_expert_parallel_all_to_all(h100):
    m = load_model("mixtral-8x7b")  # 8 experts, top-2, H = 4096, 32 MoE layers
    est = estimate(m, h100, 4, 512, 2, Setup.of(tp=4, ep=4))
    [a2a] = [t.op for t in est.decode.ops if t.op.name == "ep.all_to_all"]
    assert a2a.layers == 2 * 32
    routed = 4 * 1 * 2 * 4096 * 2 / 4  # B x k x H x bf16, this GPU's quarter of the tokens
    assert a2a.comm_bytes == pytest.approx(3 / 4 * routed)
    skew = estimate(m, h100, 4, 512, 2, Setup.of(tp=4, ep=4, imbalance=1.5))
    assert skew.tpot_s > est.tpot_s


@pytest.mark.parametrize("kw,opt", [(dict(tp=3), "--tp"), (dict(tp=16, ep=3), "--ep"), (dict(pp=81), "--pp"),
                                    (dict(ep=2, tp=2), "--ep"), (dict(imbalance=0.5), "--imbalance")])
def test_bad_splits(l70, h100, kw, opt):
    with pytest.raises(SpecError, match=opt):
        estimate(l70, h100, setup=Setup.of(**kw))


@pytest.mark.parametrize("args,needle", [
    (["--tp", "3"], "does not divide"), (["--pp", "100"], "exceed"), (["--ep", "2", "--tp", "2"], "MoE"),
])
def test_bad_splits_exit_2(args, needle):
    r = CliRunner().invoke(app, ["estimate", "-m", "llama-3.1-70b", "--hardware", "h100-sxm", *args])
    assert r.exit_code == 2 and needle in r.output


def test_split_on_hardware_without_a_link_is_an_error():
    m = load_model("llama-3.1-8b")
    cpu = load_hardware("cpu-generic-2core")
    with pytest.raises(SpecError, match="interconnect"):
        estimate(m, cpu, setup=Setup.of(tp=2))
