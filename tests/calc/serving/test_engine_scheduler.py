"""The simulator runs each engine's scheduler: prefill policies, whole vs chunked prompts, the
running cap, reservation vs preemption, the KV share's formula and the CUDA-graph cap's cost.
Expected times come from the cost model (calc.cost.latency.mixed_step_cost), the arithmetic
written here."""

import numpy as np
import pytest

from calc.core.errors import SpecError
from calc.cost.dtypes import Dtypes
from calc.cost.latency import mixed_step_cost
from calc.serving.replica.capacity import Replica
from calc.serving.replica.kvbudget import kv_budget
from calc.serving.sim.simulate import simulate
from calc.spec.catalog import load_hardware, load_model
from calc.spec.scheduler import Serving

MODEL = load_model("llama-3.1-8b")
DT = Dtypes.resolve(MODEL)


def _rep(serving: Serving, engine: str = "vllm", mb: int = 64) -> Replica:
    return Replica(MODEL, load_hardware("h100-sxm").with_engine(engine), 1, mb, DT, serving)


def _prefill_s(rep: Replica, *prompts: int) -> float:
    """One step prefilling these whole prompts from nothing cached: the cost model's time."""
    new = np.asarray(prompts, float)
    return float(mixed_step_cost(MODEL, rep.hw, new, np.zeros_like(new), DT, rep.eff, "fused",
                                 rep.par, phase="prefill").time_s)


def test_one_prompt_at_a_time_gives_ttft_i_times_the_prefill():
    """N = 5 equal prompts of 2048 tokens at t = 0, G = 1: one prompt per step, so request i's
    first token comes after i prefills: TTFT_i = i x t_prefill(2048)."""
    rep = _rep(Serving(prefill="one_at_a_time", max_batched_tokens=8192))
    sim = simulate(rep, np.full(5, 2048), np.ones(5, np.int64), burst=True)
    t1 = _prefill_s(rep, 2048)
    assert np.sort(sim.ttft_s) == pytest.approx(t1 * np.arange(1, 6), rel=1e-9)


def _decode_s(rep: Replica, *contexts: int) -> float:
    """One step decoding one token for each request at these contexts: the cost model's time."""
    past = np.asarray(contexts, float)
    return float(mixed_step_cost(MODEL, rep.hw, np.ones_like(past), past, DT, rep.eff, "fused", rep.par).time_s)


def test_batched_iteration_samples_first_tokens_after_every_prefill():
    """TurboMind before v0.1.0: an iteration prefills every waiting prompt but its last token, in
    sub-batches of the budget, then one decode step takes the last prompt tokens and samples all
    their first tokens. A burst of 4 prompts of 2048 tokens, budget 4096: two sub-batches of two
    2047-token prefills, then a decode step of 4 at context 2047, so every
    TTFT = 2 x t(2047 + 2047) + t_decode(4 x 2047); G = 2: the next decode step finishes them."""
    rep = _rep(Serving(prefill="batched", max_batched_tokens=4096, chunked_prefill=False))
    sim = simulate(rep, np.full(4, 2048), np.full(4, 2), burst=True)
    ttft = 2 * _prefill_s(rep, 2047, 2047) + _decode_s(rep, 2047, 2047, 2047, 2047)
    assert sim.ttft_s == pytest.approx([ttft] * 4, rel=1e-9)
    assert sim.e2e_s == pytest.approx([ttft + _decode_s(rep, 2048, 2048, 2048, 2048)] * 4, rel=1e-9)


def test_batched_iteration_leaves_the_last_prompt_token_to_the_decode_step():
    """TurboMind v0.1.0a1's ContextDecode prefills a prompt's first N - 1 tokens ("skip last input
    token (will process with decoder later)"): a 128-token prompt alone has
    TTFT = t(prefill 127) + t_decode(context 127), and a one-token prompt no prefill at all,
    TTFT = t_decode(context 0) (before: a 1-token prefill, then a decode step at context 1)."""
    rep = _rep(Serving(prefill="batched", max_batched_tokens=4096, chunked_prefill=False))
    for T, ttft in ((128, _prefill_s(rep, 127) + _decode_s(rep, 127)), (1, _decode_s(rep, 0))):
        sim = simulate(rep, np.array([T]), np.array([3]), concurrency=1)
        assert sim.ttft_s == pytest.approx([ttft], rel=1e-9), T
        assert sim.e2e_s == pytest.approx([ttft + _decode_s(rep, T) + _decode_s(rep, T + 1)], rel=1e-9), T


def test_batched_iteration_admits_only_the_prompts_waiting_at_its_start():
    """Two requests: the first at t = 0, the second arriving while the first prefills. The first
    iteration prefills only the first prompt (less its last token, t1 = t(2047)), then its decode
    step samples its token; the second waits for the next iteration: TTFT_2 counts from its
    arrival to the end of t1 + t_decode(2047) + t1 + t_decode(2048, 2047)."""
    rep = _rep(Serving(prefill="batched", max_batched_tokens=4096, chunked_prefill=False))
    t1 = _prefill_s(rep, 2047)
    arrive = np.array([0.0, t1 / 2])
    sim = simulate(rep, np.full(2, 2048), np.full(2, 3), rate_per_s=1.0, gaps=arrive)
    first_1 = t1 + _decode_s(rep, 2047)
    assert sim.first_token_s[0] == pytest.approx(first_1, rel=1e-9)
    assert sim.first_token_s[1] == pytest.approx(first_1 + t1 + _decode_s(rep, 2048, 2047), rel=1e-9)


def test_chunked_mixed_packs_four_prompts_per_step():
    """The same burst, mixed and chunked at 8192 tokens: four 2048-token prompts fill the first
    step (TTFT = t(4 x 2048)); the fifth follows in the second step."""
    rep = _rep(Serving(prefill="mixed", max_batched_tokens=8192))
    sim = simulate(rep, np.full(5, 2048), np.ones(5, np.int64), burst=True)
    t4, t1 = _prefill_s(rep, 2048, 2048, 2048, 2048), _prefill_s(rep, 2048)
    assert np.sort(sim.ttft_s) == pytest.approx([t4] * 4 + [t4 + t1], rel=1e-9)


def test_whole_prompts_wait_for_a_step_with_room():
    """Three 3000-token prompts, budget 8192. Whole prompts: two fit (6000), the third waits for the
    next step, alone. Chunked: the third's first 2192 tokens join the first step."""
    T, G = np.full(3, 3000), np.ones(3, np.int64)
    whole = _rep(Serving(max_batched_tokens=8192, chunked_prefill=False))
    sim = simulate(whole, T, G, burst=True)
    t2, t1 = _prefill_s(whole, 3000, 3000), _prefill_s(whole, 3000)
    assert np.sort(sim.ttft_s) == pytest.approx([t2, t2, t2 + t1], rel=1e-9)
    chunked = simulate(_rep(Serving(max_batched_tokens=8192)), T, G, burst=True)
    assert np.sort(chunked.ttft_s)[:2] == pytest.approx([_prefill_s(whole, 3000, 3000, 2192)] * 2, rel=1e-9)


def test_prefill_first_pauses_decodes():
    """Prefill-first: while a request waits that can be admitted, steps carry no decodes, so a
    running request's tokens stop; mixed steps keep decoding. A burst of 2 with budget 16
    tokens and 64-token prompts: under prefill-first the first request decodes nothing until the
    second's four chunks are done (its first token waits for them)."""
    T, G = np.array([16, 64]), np.array([8, 2])
    pf = simulate(_rep(Serving(prefill="prefill_first", max_batched_tokens=16), mb=2), T, G, burst=True)
    mx = simulate(_rep(Serving(prefill="mixed", max_batched_tokens=16), mb=2), T, G, burst=True)
    # prefill-first finishes request 1 after request 2's prefill; mixed finishes it sooner
    assert pf.finish_s[0] > pf.first_token_s[1] and mx.finish_s[0] < pf.finish_s[0]


def test_whole_prompts_run_prefill_first_where_the_engine_says_so():
    """unchunked_prefill: the policy for whole prompts (vLLM V0 before 0.8.0: prefill-first; V1 mixes
    them). A burst of two 64-token prompts, outputs 4 and 2, budget 100: step 1 prefills request 0
    (request 1 does not fit beside it). Under V0, step 2 prefills request 1 alone (request 0's
    decode waits) and its first token comes at 2 x t(prefill 64); then 3 decode steps finish
    request 0: 5 steps. Mixed, step 2 carries request 0's decode and request 1's prompt: 4 steps."""
    T, G = np.array([64, 64]), np.array([4, 2])
    base = dict(prefill="mixed", chunked_prefill=False, max_batched_tokens=100)
    v0 = _rep(Serving(**base, unchunked_prefill="prefill_first"), mb=2)
    s0 = simulate(v0, T, G, burst=True)
    s1 = simulate(_rep(Serving(**base), mb=2), T, G, burst=True)
    assert (s0.steps, s1.steps) == (5, 4)
    assert float(s0.first_token_s[1]) == pytest.approx(2 * _prefill_s(v0, 64), rel=0.01)
    # chunked prompts keep the prefill policy itself: the same burst chunked is mixed either way
    chunked = dict(base, chunked_prefill=True)
    assert Serving(**chunked, unchunked_prefill="prefill_first").policy == "mixed"
    assert Serving(**base, unchunked_prefill="prefill_first").policy == "prefill_first"


def test_running_cap_and_reservation():
    """Preemption "none" (TensorRT-LLM's GUARANTEED_NO_EVICT, TGI): a request is admitted only with
    pages for its whole final context, so nothing is ever preempted and at most
    floor((pages - watermark) / pages per request) run at once."""
    probe = _rep(Serving())
    kv = probe.kv
    page = 16 * MODEL.kv_bytes_per_token(DT.kv)
    # a share that leaves about 300 pages: (share x capacity - weights - workspace) / page, the H100's
    # capacity as CUDA gives it a process (81,090 MiB = 85,029,027,840 B)
    share = (kv.weights_bytes + kv.workspace_bytes + 300.5 * page) / (81_090 * 2**20)
    T, G = np.full(40, 512), np.full(40, 513)  # 1024 positions at the end: 64 pages each
    res = simulate(_rep(Serving(gpu_memory_utilization=share, preemption="none"), mb=64), T, G, burst=True)
    pages = 300
    wm = int(np.ceil(0.01 * pages))
    assert res.pages == pages
    assert res.preemptions.sum() == 0
    assert res.timeline["running"].max() == (pages - wm) // 64 == 4
    rec = simulate(_rep(Serving(gpu_memory_utilization=share), mb=64), T, G, burst=True)
    assert rec.preemptions.sum() > 0  # admitted by prompt pages (32), evicted as they grow


def test_kv_share_formulas():
    """Llama-3.1-8B bf16 on an 80 GB H100 (81,090 MiB = C = 85,029,027,840 B as CUDA gives it a process),
    budget 2048 tokens: weights 16,060,522,496 B, workspace 192,937,984 B (tests/calc/serving/test_plan.py),
    page 16 x 131072 B. At a share of 0.5:
    total  floor((0.5 C - 16,060,522,496 - 192,937,984) / 2,097,152)
    static floor((0.5 C - 16,060,522,496) / 2,097,152)
    free   floor((C - 16,060,522,496 - 192,937,984) x 0.5 / 2,097,152)"""
    w, ws, page, C = 16_060_522_496, 192_937_984, 16 * 131072, 81_090 * 2**20
    hw = load_hardware("h100-sxm")
    got = {of: kv_budget(MODEL, hw, DT, Replica(MODEL, hw, 1, 1, DT, Serving()).par,
                         Serving(gpu_memory_utilization=0.5, kv_share_of=of)).pages for of in ("total", "static", "free")}
    assert got["total"] == (0.5 * C - w - ws) // page == 12_522
    assert got["static"] == (0.5 * C - w) // page == 12_614
    assert got["free"] == (C - w - ws) * 0.5 // page == 16_397
    # and a share of 0.9 against 0.45: the pages of the "free" formula halve exactly (to a page)
    half = kv_budget(MODEL, hw, DT, Replica(MODEL, hw, 1, 1, DT, Serving()).par,
                     Serving(gpu_memory_utilization=0.45, kv_share_of="free")).pages
    full = kv_budget(MODEL, hw, DT, Replica(MODEL, hw, 1, 1, DT, Serving()).par,
                     Serving(gpu_memory_utilization=0.9, kv_share_of="free")).pages
    assert abs(full - 2 * half) <= 1


def test_a_kv_token_cap_keeps_the_smaller_cache():
    """kv_tokens (SGLang --max-total-tokens, TensorRT-LLM kv_cache_config max_tokens): the engine keeps
    the smaller of the cap and what the share leaves. The share of 0.5 of total memory above leaves
    12,522 pages of 16 tokens; a cap of 100,000 tokens is floor(100,000 / 16) = 6,250 pages; a cap of
    10^9 tokens leaves the share's 12,522. SGLang's own name reaches the field."""
    hw = load_hardware("h100-sxm")
    par = Replica(MODEL, hw, 1, 1, DT, Serving()).par

    def pages(cap):
        return kv_budget(MODEL, hw, DT, par, Serving(gpu_memory_utilization=0.5, kv_tokens=cap)).pages

    assert (pages(None), pages(100_000), pages(10**9)) == (12_522, 100_000 // 16, 12_522)
    from calc.spec.engine import engines
    from calc.spec.scheduler import resolve_serving

    sv = resolve_serving(engines()["sglang"], hw.name, hw.memory_gb, engine_args={"max_total_tokens": 100_000})
    assert sv.kv_tokens == 100_000


def test_steps_past_the_graph_cap_pay_eager_launches():
    """vLLM's Llama kernel set: per layer 2 norms, 1 QKV GEMM, RoPE, 2 attention kernels, o_proj,
    gate_up, act_mul, down (10), x 32 layers, + embedding, final norm, lm_head, sampler = 324
    kernels. A burst of 8 prompts of 128 tokens, G = 33: one prefill step of 1024 tokens, then 32
    decode steps of 8. Cap 4: all 33 steps pay 324 x 10 us; cap 8: only the prefill step does."""
    base = _rep(Serving())
    assert base.kernels_per_step == 32 * 10 + 4
    T, G = np.full(8, 128), np.full(8, 33)
    t0 = simulate(base, T, G, burst=True).finish_s.max()
    t4 = simulate(_rep(Serving(graph_max_batch=4, eager_launch_us=10)), T, G, burst=True).finish_s.max()
    t8 = simulate(_rep(Serving(graph_max_batch=8, eager_launch_us=10)), T, G, burst=True).finish_s.max()
    assert t4 - t0 == pytest.approx(33 * 324 * 10e-6, rel=1e-9)
    assert t8 - t0 == pytest.approx(1 * 324 * 10e-6, rel=1e-9)


def test_a_burst_arrives_at_zero():
    sim = simulate(_rep(Serving()), np.full(6, 100), np.full(6, 5), burst=True)
    assert (sim.arrive_s == 0).all() and sim.offered_per_s is None
    with pytest.raises(ValueError, match="exactly one"):
        simulate(_rep(Serving()), np.full(6, 100), np.full(6, 5), burst=True, rate_per_s=1.0)


PLAN = """\
name: t
model: llama-3.1-8b
hardware: [h100-sxm]
prompt_len: {dist: fixed, value: 1536}
output_len: {dist: fixed, value: 513}
slo: {tpot_p99_s: 0.2}
tp: [1]
max_batch: [64, 128]
max_gpus: 2
requests: 60
engine: vllm
"""


def test_plan_runs_the_engine_args_and_exposes_them(tmp_path):
    """engine_args {gpu_memory_utilization: 0.5, max_num_batched_tokens: 2048}: the pages follow
    vLLM's total-memory formula (test_kv_share_formulas), floor((0.5 x C - weights - workspace) /
    page), the workspace now what vLLM 0.19's profile counts for a launch with max_num_seqs = the
    chosen max batch mb: the larger of the pass at 2048 tokens (192,937,984 B) and the dummy
    sampler's 15.8 B x mb x 128,256 logits, plus 0.25 GiB outside torch (at mb 64: 12,394 pages);
    and the plan states the scheduler in vLLM's names."""
    from calc.serving.planner.plan import plan
    from calc.spec.workload import load_workload

    p = tmp_path / "w.yaml"
    p.write_text(PLAN + "arrival: {rate_per_s: 1}\n"
                        "engine_args: {gpu_memory_utilization: 0.5, max_num_batched_tokens: 2048}\n")
    res = plan(load_workload(p))
    t = res.chosen
    assert t is not None
    w, page, C, mb = 16_060_522_496, 16 * 131072, 81_090 * 2**20, t.replica.max_batch
    workspace = max(192_937_984, 15.8 * mb * 128_256) + 0.25 * 2**30
    assert t.replica.kv.pages == (0.5 * C - w - workspace) // page
    assert mb != 64 or t.replica.kv.pages == 12_394
    assert res.scheduler.gpu_memory_utilization == 0.5 and res.scheduler.max_batched_tokens == 2048
    args = res.engine_args
    assert args["gpu_memory_utilization"] == 0.5 and args["max_num_batched_tokens"] == 2048
    assert args["max_num_seqs"] == t.replica.max_batch


def test_a_set_max_num_seqs_is_the_only_cap_tried(tmp_path):
    from calc.serving.planner.plan import plan
    from calc.spec.workload import load_workload

    p = tmp_path / "w.yaml"
    p.write_text(PLAN + "arrival: {rate_per_s: 1}\nengine_args: {max_num_seqs: 96}\n")
    res = plan(load_workload(p))
    assert {t.replica.max_batch for t in res.trials} == {96}


def test_plan_of_a_burst(tmp_path):
    """A burst of 60 requests: each replica gets ceil(60 / R) at t = 0."""
    from calc.serving.planner.plan import plan
    from calc.spec.workload import load_workload

    p = tmp_path / "w.yaml"
    p.write_text(PLAN + "arrival: {kind: burst}\n")
    res = plan(load_workload(p))
    t = res.chosen
    assert t is not None
    assert t.sim.n == -(-60 // t.replicas) and (t.sim.arrive_s == 0).all()


def test_phases_split_warmup_steady_and_drain():
    """100 requests at 1 req/s (Poisson): the statistics leave out the first and last 5 by arrival
    (calc.serving.sim.simulate.WARMUP), so warm-up ends at the 6th arrival, the steady window runs to
    the 95th, and the drain from there to the last finish."""
    sim = simulate(_rep(Serving()), np.full(100, 200), np.full(100, 20), rate_per_s=1.0, seed=3)
    ph = sim.phases
    a = np.sort(sim.arrive_s)
    assert (ph.warmup_requests, ph.steady_requests, ph.drain_requests) == (5, 90, 5)
    assert ph.warmup_s == pytest.approx(a[5]) and ph.steady_s == pytest.approx(a[94] - a[5])
    assert ph.drain_s == pytest.approx(sim.finish_s.max() - a[94]) and ph.steady


def test_dp_attention_caches_each_ranks_requests_and_holds_the_attention_whole():
    """SGLang --enable-dp-attention (Serving.dp_attention; engines.yaml sglang, sglang_dp): each TP
    rank holds the attention, embedding and lm_head whole and caches its own requests' KV at every
    head, so the replica has TP x one rank's pages. Llama-3.1-8B (config.json: hidden 4096, 32 layers,
    32 query / 8 KV heads of 128, vocab 128256, untied embeddings) in bf16 at TP 2:
      attention matrices per layer: q, o 4096 x 4096 and k, v 4096 x 1024 = 41,943,040 params;
      the rank holds the other half of 32 layers' and of the two vocab matrices (2 x 128256 x 4096):
      (32 x 41,943,040 + 2 x 525,336,576) / 2 params x 2 bytes more;
      KV per token and rank: 2 (K, V) x 32 layers x 8 heads x 128 x 2 bytes = 131,072 (TP2: half)."""
    from calc.cost.parallel import Parallel
    from calc.serving.replica.kvbudget import kv_budget

    hw = load_hardware("h100-sxm").with_engine("sglang")
    base = dict(gpu_memory_utilization=0.85, kv_share_of="static", block_size=1, max_batched_tokens=8192)
    tp2 = kv_budget(MODEL, hw, DT, Parallel(2), Serving(**base))
    dp = kv_budget(MODEL, hw, DT, Parallel(2), Serving(**base, dp_attention=True))
    assert dp.weights_bytes - tp2.weights_bytes == pytest.approx((32 * 41_943_040 + 2 * 525_336_576) / 2 * 2)
    assert (tp2.kv_bytes_per_token, dp.kv_bytes_per_token) == (65_536, 131_072)
    assert dp.pages == 2 * int(dp.kv_bytes // 131_072)
    assert kv_budget(MODEL, hw, DT, Parallel(1), Serving(**base, dp_attention=True)).pages == \
        kv_budget(MODEL, hw, DT, Parallel(1), Serving(**base)).pages  # one rank: nothing changes


def test_dp_attention_is_sglangs_argument_and_its_launch_flag():
    from calc.spec.engine import engines
    from calc.spec.scheduler import engine_args_of, resolve_serving

    preset, hw = engines()["sglang"], load_hardware("h200")
    on = resolve_serving(preset, hw.name, hw.memory_gb, engine_args={"enable_dp_attention": "true"})
    off = resolve_serving(preset, hw.name, hw.memory_gb)
    assert (on.dp_attention, off.dp_attention) == (True, False)
    assert engine_args_of(preset, on)["enable_dp_attention"] is True
    assert engine_args_of(preset, off)["enable_dp_attention"] is False


def test_a_chunked_fused_moe_profiles_a_chunks_activations():
    """vLLM's fused_experts runs at most VLLM_FUSED_MOE_CHUNK_SIZE tokens at a time (engines.yaml
    vllm, vllm_moe_chunk: 32768 in 0.7.3 and 0.8.0), so the profiling pass that sizes the KV cache
    holds a chunk's expert activations. Mixtral-8x7B (config.json: hidden 4096, expert intermediate
    14336, top-2) at a 65,536-token budget: the routed experts move n x 2 x (4096 + 2 x 14336) bf16
    values in and n x 2 x (3 x 14336 + 4096) out, 65,536 x 2 x 79,872 x 2 B in all; chunked at
    32,768 half of that, and the workspace (residual + the largest operator, the experts either
    way) is that half smaller, the KV cache that much larger."""
    from calc.cost.parallel import Parallel
    from calc.serving.replica.kvbudget import kv_budget

    mixtral = load_model("mixtral-8x7b")
    dt = Dtypes.resolve(mixtral)
    hw = load_hardware("h200").with_engine("vllm")
    base = dict(max_batched_tokens=65_536, gpu_memory_utilization=0.9)
    whole = kv_budget(mixtral, hw, dt, Parallel(1), Serving(**base))
    chunked = kv_budget(mixtral, hw, dt, Parallel(1), Serving(**base, moe_chunk_tokens=32_768))
    experts = 65_536 * 2 * (2 * 4096 + 5 * 14336) * 2
    assert whole.workspace_bytes - chunked.workspace_bytes == pytest.approx(experts / 2, rel=1e-12)
    assert chunked.kv_bytes - whole.kv_bytes == pytest.approx(experts / 2, rel=1e-12)
    small = dict(max_batched_tokens=8192, gpu_memory_utilization=0.9)  # a budget under the chunk: no change
    assert kv_budget(mixtral, hw, dt, Parallel(1), Serving(**small, moe_chunk_tokens=32_768)).pages == \
        kv_budget(mixtral, hw, dt, Parallel(1), Serving(**small)).pages


def test_vllm_07_and_08_chunk_their_fused_moe():
    from calc.spec.engine import engines
    from calc.spec.scheduler import resolve_serving

    preset, hw = engines()["vllm"], load_hardware("h200")
    chunk = {v: resolve_serving(preset, hw.name, hw.memory_gb, version=v, tp=8).moe_chunk_tokens
             for v in ("0.7.3", "0.7.4.dev181", "0.8.0", "0.6.3", None)}
    assert chunk == {"0.7.3": 32_768, "0.7.4.dev181": 32_768, "0.8.0": 32_768, "0.6.3": None, None: None}


@pytest.mark.parametrize("policy", ["mixed", "prefill_first", "batched"])
def test_pages_never_overcommit_when_decodes_preempt(policy):
    """A KV cache of 1,500 tokens for 32 clients: decodes keep running out of pages and preempt.
    After every event the running requests' pages plus the free ones are all the pages, and none
    is free below zero: the decode tokens' pages are taken before admission, and a step that
    preempted admits nothing (before, the request preempted for the decodes was readmitted in the
    same step and free pages went to -2..-4)."""
    from calc.serving.sim.scheduler import Scheduler

    rep = _rep(Serving(prefill=policy, max_batched_tokens=2048, kv_tokens=1500, block_size=16, watermark=0.0,
                       chunked_prefill=policy != "batched"), mb=64)
    rng = np.random.default_rng(3)
    T, G = rng.integers(64, 400, 200), rng.integers(16, 300, 200)
    s = Scheduler(rep, T, G, None, 32)
    while s.completed < s.n:
        while s.incoming and s.arrive[s.incoming[0]] <= s.clock:
            s.waiting.append(s.incoming.popleft())
        if s.N == 0 and not s.waiting:
            s.clock = max(s.clock, float(s.arrive[s.incoming[0]]))
        elif not s.decode_run():
            s.step()
        held = int(s.r_pages[:s.N].sum())
        assert s.free >= 0 and held + s.free == s.total_pages, (s.free, held, s.total_pages)
    assert s.preempt.sum() > 0  # the run did preempt


def test_dp_attention_limits_are_a_ranks():
    """Under data-parallel attention a request's KV lives on one rank (at most its pages), and each
    rank replays graphs of its own share of the step: 1,024 decode tokens over 8 ranks are 128 a
    rank, under a graph cap of 160, so no eager launches; without DP the same step is past it.
    Engines without such an argument refuse the setting."""
    from calc.cost.parallel import Parallel
    from calc.serving.replica.kvbudget import kv_budget
    from calc.spec.engine import engines
    from calc.spec.scheduler import resolve_serving

    sv = Serving(gpu_memory_utilization=0.81, kv_share_of="static", block_size=1, graph_max_batch=160,
                 dp_attention=True)
    ds = load_model("deepseek-v3")
    kv = kv_budget(ds, load_hardware("h200").with_engine("sglang"), Dtypes.resolve(ds), Parallel(8), sv)
    assert kv.ranks == 8 and kv.rank_pages == kv.pages // 8
    assert kv.admits(kv.rank_pages, 0.0) and not kv.admits(kv.rank_pages + 1, 0.0)
    assert kv.max_sequences(4096) == 8 * (kv.rank_pages // 4096)
    assert not sv.eager(1024, False, ranks=8) and sv.eager(1024, False, ranks=1) and sv.eager(1288, False, ranks=8)
    hw = load_hardware("h200")
    with pytest.raises(SpecError, match="dp_attention.*vllm has no data-parallel attention"):
        resolve_serving(engines()["vllm"], hw.name, hw.memory_gb, block=Serving(dp_attention=True))


def test_a_workloads_moe_chunk_is_said_in_the_launch():
    from calc.serving.planner.launch import launch

    mixtral = load_model("mixtral-8x7b")
    hw = load_hardware("h100-sxm").with_engine("vllm")
    rep = Replica(mixtral, hw, 2, 64, Dtypes.resolve(mixtral), Serving(moe_chunk_tokens=16384))
    assert any("VLLM_FUSED_MOE_CHUNK_SIZE=16384" in n for n in launch(rep, 1, 4096).notes)


def _pp_rep(engine: str, version: str | None, mb: int) -> Replica:
    """Llama-3.1-8B TP1 PP2 on H100 under the engine preset's scheduler (at ``version``)."""
    from calc.spec.engine import load_engine
    from calc.spec.scheduler import resolve_serving

    hw = load_hardware("h100-sxm").with_engine(engine)
    serving = resolve_serving(load_engine(engine), hw.name, hw.memory_gb, version=version)
    return Replica(MODEL, hw, 1, mb, DT, serving, pp=2)


def test_pipeline_micro_batches_split_or_each_take_max_num_seqs():
    """Under PP the simulator runs one engine per micro-batch in flight (1/PP of the load and of the
    KV pages). vLLM's V1 engine has one scheduler for every batch in its queue and SGLang caps each
    micro-batch at max_running_requests // pp_size, so at PP2 a max batch of 8 is 8 // 2 = 4 per
    engine; vLLM's V0 engine (before 0.8.0) ran one scheduler per virtual engine and TensorRT-LLM
    holds max_batch_size per micro-batch: 8 each. A burst of 40 one-token prompts with 50 tokens to
    generate never runs more than that cap at once."""
    T, G = np.full(40, 16), np.full(40, 50)
    for engine, version, cap in (("vllm", None, 4), ("sglang", None, 4), ("vllm", "0.7.3", 8), ("trtllm", None, 8)):
        rep = _pp_rep(engine, version, 8)
        assert rep.engine_max_batch == cap, engine
        sim = simulate(rep, T, G, burst=True)
        assert sim.timeline["running"].max() == cap, (engine, version)
    assert _pp_rep("vllm", None, 1).engine_max_batch == 1  # never below one sequence


def test_closed_form_saturates_at_the_micro_batch_cap():
    """steady_state at saturation runs N = the engine's cap (max batch 8 at PP2 in vLLM: 4) when the
    KV pages hold more: its running batch and what limits it say so."""
    from calc.serving.replica.capacity import steady_state

    rep = _pp_rep("vllm", None, 8)
    ss = steady_state(rep, np.full(100, 512), np.full(100, 128))
    assert ss.batch == pytest.approx(4.0) and ss.limited_by == "max batch"
