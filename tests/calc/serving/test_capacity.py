"""The serving model: KV pages by hand, the step model against mixed_step_cost, the closed form."""

import math

import numpy as np
import pytest

from calc.cost.dtypes import Dtypes
from calc.cost.latency import mixed_step_cost
from calc.cost.parallel import Parallel
from calc.serving.replica.capacity import Replica, steady_state, validate_split
from calc.serving.replica.kvbudget import kv_budget
from calc.serving.steps.stepfit import check_step_model
from calc.spec.catalog import load_hardware, load_model
from calc.spec.workload import Serving


def replica(model="llama-3.1-8b", hw="h100-sxm", tp=1, mb=64, serving=None, **dtypes):
    m = load_model(model)
    return Replica(m, load_hardware(hw), tp, mb, Dtypes.resolve(m, dtypes.get("weight"), dtypes.get("kv")), serving or Serving())


def test_the_workspace_is_the_whole_token_budget_in_one_pass():
    """An engine sizes its KV cache after a profiling pass at its whole token budget (vLLM's
    profile_run): at a 32768-token budget the workspace is that pass's peak, not an
    8192-token chunk's (what a long prompt's pass in `estimate` is capped at)."""
    kv = replica(serving=Serving(max_batched_tokens=32768)).kv
    n = 32768  # residual x[n, 4096] + SiLU-and-multiply reading [n, 2 x 14336], writing [n, 14336], bf16
    assert kv.workspace_bytes == n * 4096 * 2 + n * 2 * 14336 * 2 + n * 14336 * 2 == 3_087_007_744


def test_kv_pages_llama_8b_on_one_80gb_gpu_by_hand():
    """Llama-3.1-8B bf16 on one 80 GB GPU (h100-sxm), 2k contexts, vLLM's defaults. CUDA gives a
    process 81,090 MiB of it (79.19 GiB, vLLM's logged total_memory; nvidia-smi reports 81,559 MiB),
    and vLLM's utilisation share is of that total."""
    kv = replica().kv
    weights = 8_030_261_248 * 2  # every parameter at 2 bytes: 16.06e9
    # workspace: the activation peak of one step at the 2048-token budget = the residual
    # x[2048, 4096] plus the largest operator, SiLU-and-multiply reading [2048, 2 x 14336]
    # and writing [2048, 14336], all bf16
    workspace = 2048 * 4096 * 2 + 2048 * 2 * 14336 * 2 + 2048 * 14336 * 2  # = 192,937,984
    assert kv.workspace_bytes == workspace == 192_937_984  # the code's figure, not only ours
    per_token = 32 * 2 * 8 * 128 * 2  # L x (K, V) x Hkv x D x bf16 = 131072 B
    capacity = 81_090 * 2**20  # = 85,029,027,840 bytes
    pages = math.floor((capacity * 0.9 - weights - workspace) / (16 * per_token))
    assert (kv.weights_bytes, kv.workspace_bytes, kv.kv_bytes_per_token) == (weights, workspace, per_token)
    assert kv.pages == pages == 28_740
    # 2k contexts: 2048 positions = 128 pages of 16 each, so floor(28740 / 128) sequences;
    # without pages (85.03e9 x 0.9 - 16.06e9 - workspace) / (2048 x 131072) = 224.5
    assert kv.capacity_bytes == capacity and kv.kv_bytes == capacity * 0.9 - weights - workspace
    assert kv.kv_bytes / (2048 * kv.kv_bytes_per_token) == pytest.approx(224.5, abs=0.05)
    assert kv.max_sequences(2048) == pages // 128 == 224
    # the closed form of a 2k workload (T + G - 1 = 2048) says the same
    ss = steady_state(replica(mb=512), np.full(100, 1536), np.full(100, 513))
    assert ss.kv_sequences_longest == 224 and ss.kv_concurrency_full == pytest.approx(pages / 128)


def test_kv_pages_shard_under_tp_and_halve_with_fp8():
    one, two = replica().kv, replica(tp=2).kv
    assert two.kv_bytes_per_token == one.kv_bytes_per_token / 2  # 8 KV heads over 2 GPUs
    assert two.weights_bytes < one.weights_bytes / 2 + 1.1e9  # the rest, sharded (embeddings too)
    assert replica(kv="fp8").kv.kv_bytes_per_token == one.kv_bytes_per_token / 2


def test_model_that_does_not_fit_has_no_pages():
    kv = replica("llama-3.1-70b", "h100-sxm").kv
    assert not kv.fits and kv.pages == 0 and kv.kv_bytes < 0


@pytest.mark.parametrize("model, hw, tp", [
    ("llama-3.1-8b", "h100-sxm", 1),  # dense GQA
    ("mixtral-8x7b", "h100-sxm", 2),  # MoE (experts touched), TP all-reduces
    ("gemma-2-9b", "a100-80gb-sxm", 1),  # sliding-window layers
    ("deepseek-v2-lite", "h100-sxm", 1),  # MLA: prefill and decode forms
])
def test_step_model_reproduces_mixed_step_cost(model, hw, tp):
    rep = replica(model, hw, tp)
    sm = rep.steps
    assert sm.max_fit_error < 1e-9
    worst = check_step_model(sm, rep.hw, rep.dt, rep.eff, "fused", rep.par, steps=40, seed=3)
    assert worst < 1e-9  # exact up to rounding: every operator term is affine in the features


def test_step_model_one_decode_step_by_hand():
    rep = replica()
    new, past = np.ones(8), np.full(8, 1000.0)
    ref = float(mixed_step_cost(rep.model, rep.hw, new, past, rep.dt, rep.eff).time_s)
    f = rep.steps.features(new, past)
    assert float(rep.steps.time(f)) == pytest.approx(ref, rel=1e-12)
    # 8 decode tokens at context 1000: each attends over 1001 positions
    assert (f.tokens, f.logit_rows, f.decode_seqs, f.decode_tokens, f.chunk_seqs) == (8, 8, 8, 8, 0)
    assert f.decode_pairs.tolist() == f.decode_read.tolist() == [8 * 1001.0]


def test_closed_form_limits():
    T, G = np.full(500, 128), np.full(500, 1024)
    ss = steady_state(replica(mb=64), T, G)
    assert ss.limited_by == "max batch" and ss.batch == 64
    # decode-dominated: ~1 prefill per 1024 steps, so throughput ~ 64 / decode step time
    assert ss.output_tokens_per_s == pytest.approx(64 / ss.decode_step_s, rel=0.1)
    small = steady_state(replica("llama-3.1-8b", "l40s", mb=512), np.full(500, 4000), np.full(500, 500))
    assert small.limited_by == "KV cache" and small.batch < 512


def test_validate_split():
    m = load_model("llama-3.1-8b")
    assert validate_split(m, load_hardware("h100-sxm"), 2) is None
    assert "does not divide" in validate_split(m, load_hardware("h100-sxm"), 3)
    cpu = load_hardware("cpu-generic-2core")
    assert "interconnect" in validate_split(m, cpu, 2) or "link" in validate_split(m, cpu, 2)


def test_kv_budget_function_matches_replica():
    m = load_model("llama-3.1-8b")
    kv = kv_budget(m, load_hardware("h100-sxm"), Dtypes.resolve(m), Parallel(), Serving(gpu_memory_utilization=0.5))
    assert kv.usable_bytes == 81_090 * 2**20 * 0.5 and kv.pages < replica().kv.pages


def test_a_refit_of_a_kept_configuration_equals_a_fresh_fit():
    # the sample steps and their operators are kept per (model, dtypes, kernel, split); a fit
    # under other engine values reuses them and gives what a fit from nothing gives, bit for bit
    import calc.serving.steps.stepfit as stepfit
    from calc.cost.efficiency import Efficiency
    from calc.spec.engine import engines

    rep = replica()
    vllm = engines()["vllm"]
    slower = vllm.model_copy(update={"kernel_overhead_us": 9.0, "step_overhead_us": 700.0, "attention": 0.4})

    def fit(preset):
        hw = rep.hw.with_engine(preset)
        return stepfit.step_model(rep.model, hw, rep.dt, Efficiency.of(hw), "fused", rep.par)

    first, kept = fit(vllm), fit(slower)
    stepfit._PREPARED.clear()
    fresh = fit(slower)
    assert np.array_equal(kept.coef["any"].S, fresh.coef["any"].S) and kept.max_fit_error == fresh.max_fit_error
    assert not np.array_equal(kept.coef["any"].S, first.coef["any"].S)  # the values did reach the fit


def test_a_replica_launched_with_a_smaller_max_batch_runs_a_smaller_dummy_sampler():
    """The KV budget's dummy sampler (Serving.sampler_bytes_per_logit) runs over the launched
    max_num_seqs: a plan's trial launches its max batch. At 1024 requests the sampler's
    15.8 x 1024 x 128,256 B = 2.075 GB outweighs the pass at 8192 tokens (x[8192, 4096] + SiLU-and-
    multiply reading [8192, 2 x 14336] and writing [8192, 14336], bf16: 771,751,936 B); at 256 its
    518.8 MB does not, so the pass is the workspace (each plus 0.25 GiB outside torch) and more
    pages are left. A benchmark's clients under the engine's own max_num_seqs leave the budget."""
    s = Serving(max_batched_tokens=8192, max_num_seqs=1024, sampler_bytes_per_logit=15.8, non_torch_gib=0.25)
    base = replica(mb=1024, serving=s)
    trial = base.with_max_batch(256, launched=True)
    assert trial.serving.max_num_seqs == 256 and base.serving.max_num_seqs == 1024
    assert base.kv.workspace_bytes == pytest.approx(15.8 * 1024 * 128_256 + 0.25 * 2**30)
    pass_bytes = 8192 * 4096 * 2 + 8192 * 2 * 14336 * 2 + 8192 * 14336 * 2
    assert pass_bytes == 771_751_936 > 15.8 * 256 * 128_256
    assert trial.kv.workspace_bytes == pytest.approx(pass_bytes + 0.25 * 2**30)
    assert trial.kv.pages > base.kv.pages
    clients = base.with_max_batch(256)  # the engine still launched with 1024
    assert clients.kv is base.kv and clients.serving.max_num_seqs == 1024
