"""Issue 20's modelling slips, each by hand: a prompt chunk in a ragged step runs the prefill
attention kernel; a speculative step pays the engine's step overhead once; MoE under EP reads
the busiest GPU's experts and --imbalance applies; a plan runs the preset's attention kernel and
logits policy. (Disaggregation's overlap: tests/calc/serving/test_disagg.py.)"""

import numpy as np
import pytest

from calc.cost.dtypes import Dtypes
from calc.cost.efficiency import Efficiency
from calc.cost.latency import decode_cost, estimate, mixed_step_cost
from calc.cost.parallel import Parallel
from calc.cost.setup import Setup
from calc.cost.speculative import SpecConfig, speculative
from calc.serving.replica.capacity import Replica
from calc.spec.catalog import load_hardware, load_model
from calc.spec.workload import Serving

H100 = load_hardware("h100-sxm")


def test_a_chunk_in_a_ragged_step_runs_the_prefill_kernel():
    """Llama-3.1-8B on H100, a 2,048-token chunk after 6,000 cached positions beside one decode
    token: the chunk's attention is the prefill curve's (it was timed with the decode curve, one
    query row per sequence: 12.6 ms instead of 18.0 ms)."""
    m = load_model("llama-3.1-8b")
    dt, eff = Dtypes.resolve(m), Efficiency.of(H100)
    step = mixed_step_cost(m, H100, [2048.0, 1.0], [6000.0, 3000.0], dt, eff, phase="prefill")
    chunk = next(t for t in step.ops if t.op.name == "attention.chunks")
    pre = H100.efficiency.kernels.prefill_attention
    T, S, Hq, Hkv, D, L = 2048, 6000, 32, 8, 128, 32
    pairs = T * S + T * (T + 1) / 2
    flops = 4 * Hq * D * pairs + 5 * Hq * pairs  # QK^T and PV, softmax
    compute = flops / (H100.peak_flops_per_s("bf16") * pre.compute * T / (T + pre.tokens_half))
    kv = (S + T) * 2 * Hkv * D * 2 + T * 2 * Hkv * D * 2  # read S + T positions, write T
    act = T * (Hq * D + 2 * Hkv * D) * 2 + T * Hq * D * 2
    memory = (kv + act) / (H100.memory_bandwidth_bytes_per_s * pre.memory)
    launch = 2 * eff.kernel_overhead_s  # cache write + attention kernel
    want = max(compute, memory) + pre.fixed_us * 1e-6 + launch
    assert float(chunk.time_s) == pytest.approx(want, rel=1e-9)
    assert float(chunk.total_time_s) == pytest.approx(want * L, rel=1e-9)
    assert 17.5e-3 < want * L < 18.5e-3  # the 18.0 ms
    # the decode token keeps the decode kernel
    dec = next(t for t in step.ops if t.op.name == "attention")
    assert float(dec.op.rows) == 1 and float(dec.op.sequences) == 1


def test_speculative_step_pays_the_engine_step_overhead_once():
    """vLLM preset, Llama-3.1-8B with a Llama-3.2-1B draft, k = 4, B = 1, T = 512: one step is the
    verification (its pass carries the engine's step overhead) + 4 draft passes without it. Before,
    each draft pass paid it too: 4 x 714 us more per step, the speedup 1.25x instead of ~1.5x."""
    hw = H100.with_engine("vllm")
    m, d = load_model("llama-3.1-8b"), load_model("llama-3.2-1b")
    est = estimate(m, hw, 1, 512, 256, Setup())
    sp = speculative(est, SpecConfig(4, 0.8, draft=d))
    eff = Efficiency.of(hw)
    assert eff.step_overhead_s == pytest.approx(714e-6)
    ddt = Dtypes.resolve(d, est.dtypes.weight, est.dtypes.kv, est.dtypes.compute)
    draft_pass = decode_cost(d, hw, 1, 512, ddt, eff, "fused")
    assert float(sp.draft_step_s) == pytest.approx(4 * (float(draft_pass.time_s) - 714e-6), rel=1e-9)
    assert float(sp.speedup) > 1.4


def _experts_op(model, par, tokens=1.0):
    from calc.cost.opcost import Pass
    from calc.cost.operators import pass_ops
    dt = Dtypes.resolve(model)
    ops = pass_ops(model, Pass(np.float64(1), np.float64(tokens), np.float64(1000.0), "decode"), dt, "fused", par)
    return next(o for o in ops if o.name == "moe.experts"), dt


def test_moe_under_ep_reads_the_busiest_gpus_experts():
    """Mixtral (E 8, k 2) at TP2 EP2, one decode token: GPU 1 holds experts 0-3; of the C(8, 2) = 28
    expert pairs, C(4, 2) = 6 put both on GPU 1, 6 both on GPU 2, 16 one on each: the busiest GPU
    reads E[max] = (2 x 12 + 1 x 16) / 28 = 1.4286 experts' weights (the mean is 1)."""
    m = load_model("mixtral-8x7b")
    op, dt = _experts_op(m, Parallel(2, 1, 2))
    per_expert = m.mlp_params(m.moe.expert_intermediate_size) * dt.weight_bytes_per_param()  # expert TP = 1
    assert float(op.weight_bytes) == pytest.approx((2 * 12 + 1 * 16) / 28 * per_expert)
    # --imbalance 2 at EP2: every token's experts on the busiest GPU, min(1, 2 x 2 / 8) = 1/2 of its
    # 4 experts each: 4 x (1 - (1 - 1/2)) = 2 experts
    op2, _ = _experts_op(m, Parallel(2, 1, 2, 2.0))
    assert float(op2.weight_bytes) == pytest.approx(2 * per_expert)
    # and the decode step gets slower with it (it did not change: 6.90 vs 6.91 ms)
    dt = Dtypes.resolve(m)
    eff = Efficiency.of(H100)
    one = float(decode_cost(m, H100, 1, 1000, dt, eff, par=Parallel(2, 1, 2)).time_s)
    two = float(decode_cost(m, H100, 1, 1000, dt, eff, par=Parallel(2, 1, 2, 2.0)).time_s)
    assert two > one * 1.1


def test_a_plan_runs_the_presets_attention_and_logits():
    """`engine: hf` (transformers: unfused attention, logits for every prompt position) in a
    workload reaches the replica the planner builds: its KV budget, step model and timer."""
    m = load_model("llama-3.1-8b")
    hw = H100.with_engine("hf")
    rep = Replica(m, hw, 1, 8, Dtypes.resolve(m), Serving())
    assert rep.attention == "unfused" and rep.logits == m.max_context
    assert Replica(m, H100, 1, 8, Dtypes.resolve(m), Serving()).attention == "fused"
    # a 512-token chunk: all 512 positions reach lm_head, attention unfused
    t, _ = rep.timer.one(np.zeros(0), [512.0], [0.0])
    exact = mixed_step_cost(m, hw, [512.0], [0.0], rep.dt, rep.eff, "unfused", rep.par, "prefill", m.max_context)
    assert t == pytest.approx(float(exact.time_s), rel=1e-9)
    head = next(o for o in exact.ops if o.op.name == "lm_head")
    assert float(head.op.linear_flops) == 2 * 512 * 4096 * 128256
