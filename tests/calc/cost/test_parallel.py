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
    # without fitted collectives, a ring: 2(N-1)/N * M / link + 2(N-1) hops of latency, on
    # NVLink 450 GB/s per direction
    plain = h100.model_copy(update={"collectives": None})
    link = h100.interconnect
    expected = 2 * (N - 1) / N * message / (link.bandwidth_gb_s_per_direction * 1e9) + 2 * (N - 1) * link.latency_us * 1e-6
    [t] = [t for t in estimate(l70, plain, 1, 1024, 2, Setup.of(tp=N)).decode.ops if t.op.name == "tp.allreduce"]
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


@pytest.mark.parametrize("kw,field", [(dict(tp=3), "tp"), (dict(tp=16, ep=3), "ep"), (dict(pp=81), "pp"),
                                      (dict(ep=2, tp=2), "ep"), (dict(imbalance=0.5), "imbalance")])
def test_bad_splits(l70, h100, kw, field):
    # the cost layer names the field as a workload spells it (the CLI maps it to its option)
    with pytest.raises(SpecError) as err:
        estimate(l70, h100, setup=Setup.of(**kw))
    assert err.value.path == field


@pytest.mark.parametrize("args,needle", [
    (["--tp", "3"], "does not divide"), (["--pp", "100"], "exceed"), (["--ep", "2", "--tp", "2"], "MoE"),
])
def test_bad_splits_exit_2(args, needle):
    r = CliRunner().invoke(app, ["estimate", "-m", "llama-3.1-70b", "--hardware", "h100-sxm", *args])
    assert r.exit_code == 2 and needle in r.output
    assert r.output.startswith(f"roofline: error: {args[0]}: ")  # the option typed, not the field


def test_split_on_hardware_without_a_link_is_an_error():
    m = load_model("llama-3.1-8b")
    cpu = load_hardware("cpu-generic-2core")
    with pytest.raises(SpecError, match="interconnect"):
        estimate(m, cpu, setup=Setup.of(tp=2))


def test_small_allreduce_takes_the_one_shot_custom_kernel():
    from calc.cost.parallel import Link, collective_time, fastest_allreduce
    from calc.spec.kernels import Collectives

    c = Collectives(source="hand", one_shot_us=3.0, two_shot_us=25.0, custom_fraction=0.5, ring_us=6.0,
                    ring_hop_us=1.0, ring_fraction=0.5, all_to_all_us=10.0, all_to_all_fraction=0.5,
                    send_us=6.0, send_fraction=0.5)
    lk = Link(400e9, 2e-6, c)
    # TP=8 decode of a 4096-wide bf16 token: 8 KB. one-shot: 3 us + 7 x 8192 / 200e9 = 3.29 us;
    # two-shot: 25 us + 2 x 7/8 x 8192 / 200e9; ring: 6 + 14 x 1 = 20 us + 2 x 7/8 x 8192 / 200e9
    m = 4096 * 2
    t = collective_time("allreduce", m, 8, 2 * 7 / 8 * m, 14, lk)
    assert float(t) == pytest.approx(3e-6 + 7 * m / 200e9)
    assert fastest_allreduce(m, 8, lk) == "one_shot"
    # without a custom all-reduce (NCCL only): the ring, 20 us + 2 x 7/8 x M / 200e9
    ring = collective_time("allreduce", m, 8, 2 * 7 / 8 * m, 14, lk, custom_allreduce=False)
    assert float(ring) == pytest.approx(20e-6 + 2 * 7 / 8 * m / 200e9)
    # 64 MB: one-shot moves 7 M, two-shot and ring 1.75 M; two-shot's 25 us beats the ring's 20 + ...? no:
    # two-shot = 25 us + 1.75 M / 200e9, ring = 20 us + 1.75 M / 200e9: the ring wins at large M
    big = 64e6
    assert fastest_allreduce(big, 8, lk) == "ring"
    # all-to-all and a PP send
    assert float(collective_time("all_to_all", 1e6, 4, 0.75e6, 3, lk)) == pytest.approx(10e-6 + 0.75e6 / 200e9)
    assert float(collective_time("send", 1e6, 2, 1e6, 1, lk)) == pytest.approx(6e-6 + 1e6 / 200e9)
    # no fitted collectives: bytes sent / bandwidth + hops x hop latency, as before
    plain = Link(400e9, 2e-6)
    assert float(collective_time("allreduce", m, 8, 2 * 7 / 8 * m, 14, plain)) == pytest.approx(
        2 * 7 / 8 * m / 400e9 + 14 * 2e-6)


def test_tp8_decode_allreduce_uses_the_fitted_one_shot(h100):
    from calc import load_model
    from calc.cost.latency import estimate

    est = estimate(load_model("llama-2-7b"), h100, 1, 512, 2, Setup.of(tp=8))
    [ar] = [t for t in est.decode.ops if t.op.name == "tp.allreduce"]
    c = h100.collectives
    m = 4096 * 2  # one token x H = 4096 at bf16
    assert float(ar.comm_s) == pytest.approx(c.one_shot_us * 1e-6 + 7 * m / (450e9 * c.custom_fraction))
    assert float(ar.comm_s) < 10e-6  # a few-KB one-shot on NVLink, not 2(N-1) ring hops


def test_link_units_come_from_the_spec():
    from calc.cost.parallel import Parallel, link

    h = load_hardware("h100-sxm")
    ic = h.interconnect
    got = link(h, Parallel(tp=2))
    assert got.bandwidth_bytes_per_s == ic.bandwidth_gb_s_per_direction * 1e9  # GB = 1e9 bytes
    assert got.hop_s == ic.latency_us * 1e-6


@pytest.mark.parametrize("engine", ["lmdeploy", "tgi"])
def test_engines_that_all_reduce_through_nccl_pay_the_ring(engine):
    # LMDeploy (TurboMind enable_custom_all_reduce 0, communicator 'nccl'; the PyTorch engine's
    # torch.distributed.all_reduce) and TGI (TensorParallelRowLinear: torch.distributed.all_reduce)
    # have no one-/two-shot kernel: a TP4 decode step of Llama-2-70B on A100s pays NCCL's ring for
    # each of its 80 x 2 + 1 all-reduces (two per layer, one after the vocab-parallel embedding) of
    # one 8192-wide bf16 token (16,384 B), where vLLM's custom
    # kernel would take the one-shot: per all-reduce, by the profile's fitted collectives,
    #   ring     = (ring_us + 2 x 3 x ring_hop_us) us + 2 x 3/4 x 16384 / (bw x ring_fraction)
    #   one-shot = one_shot_us us + 3 x 16384 / (bw x custom_fraction)
    from calc.cost.dtypes import Dtypes
    from calc.cost.efficiency import Efficiency
    from calc.cost.latency import decode_cost
    from calc.cost.parallel import Parallel, link
    from calc.spec.engine import engines

    preset = engines()[engine]
    assert preset.custom_allreduce is False
    model = load_model("llama-2-70b")
    par = Parallel(4)
    dt = Dtypes("bf16", "bf16", "bf16")
    hw = load_hardware("a100-80gb-sxm").with_engine(preset)
    with_custom = load_hardware("a100-80gb-sxm").with_engine(preset.model_copy(update={"custom_allreduce": True}))
    t_nccl = float(decode_cost(model, hw, 1, 1024.0, dt, Efficiency.of(hw), par=par).time_s)
    t_custom = float(decode_cost(model, with_custom, 1, 1024.0, dt, Efficiency.of(with_custom), par=par).time_s)
    lk = link(hw, par)
    c, bw, m = lk.collectives, lk.bandwidth_bytes_per_s, 8192 * 2
    ring = (c.ring_us + 2 * 3 * c.ring_hop_us) * 1e-6 + 2 * 3 / 4 * m / (bw * c.ring_fraction)
    one_shot = c.one_shot_us * 1e-6 + 3 * m / (bw * c.custom_fraction)
    assert one_shot < ring
    assert t_nccl - t_custom == pytest.approx((80 * 2 + 1) * (ring - one_shot), rel=1e-6)
