"""A published row's metric from the calculator, for one engine preset (or the ideal roofline).

decode_tokens_per_s   1 / TPOT at the row's batch (1 if absent) over its lengths
prefill_tokens_per_s  B * T / TTFT
ttft_s, tpot_s, e2e_s  the request model's TTFT, TPOT, e2e at the row's batch; client-side
                      TTFT and e2e add the preset's per-request serving time
tpot_s, decode_tokens_per_s at a concurrency and no batch (N clients in a closed loop): the
                      continuous-batching steady state's mean step (below), which takes in the
                      steps that carry other requests' prefill, as a client's mean TPOT does
output_tokens_per_s   a fixed batch: B * G / e2e; a concurrency or "max load": the
                      continuous-batching steady state (calc.serving.replica.capacity) with that many
                      running requests, or as many as the KV cache holds; times
                      data-parallel replicas (GPUs / (TP x PP))
output_tokens_per_s_per_gpu  the same, over the row's GPUs
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from calc.accuracy.rows import PUBLISHED, TIMED, Row
from calc.core.errors import SpecError
from calc.core.units import DEFAULT_GROUP_SIZE
from calc.spec import catalog
from calc.spec.engine import EngineSpec, gemm_dtype_of

GROUP_SIZE = {"llama.cpp": 32}  # GGUF Q4_0/Q8_0 blocks: 32 weights per fp16 scale
# gpt-fast (README, quantize.py): int4 in groups of 32; int8 one scale per output channel (K >= 4096)
GROUP_BY_DTYPE = {("gpt-fast", "int4"): 32, ("gpt-fast", "int8"): 4096}
# NVFP4: one fp8 scale per 16 weights = 0.5 bit a weight, what the calculator's one fp16
# scale per 32 weights also counts.
FP4_GROUP = 32
MAX_LOAD_BATCH = 2048  # engines' running-batch cap when a row gives none (TRT-LLM's max_batch_size default)

# A fit predicts each row thousands of times; the catalog lists its folders on every lookup.
# Specs are frozen, so one copy per name serves every prediction.
load_model = lru_cache(maxsize=None)(catalog.load_model)
load_hardware = lru_cache(maxsize=None)(catalog.load_hardware)


SERVING_FIELD = "request_overhead_us"  # read by serving_time alone, never by model_metric


def predict(row: Row, preset: EngineSpec | None) -> float:
    """The row's metric from the calculator; preset None: the ideal roofline."""
    return model_metric(row, preset) + serving_time(row, preset)


def serving_time(row: Row, preset: EngineSpec | None) -> float:
    """The preset's per-request serving time (outside the model) a client-side TTFT or e2e adds:
    only where a client timed the request through the engine's server (``row.served``), never an
    offline benchmark's (vLLM's benchmark_latency), which has no server to pass."""
    if preset is None or row.metric not in TIMED or not row.served:
        return 0.0
    return preset.request_overhead_s  # reads SERVING_FIELD (0 for the ideal preset)


def model_metric(row: Row, preset: EngineSpec | None, memo: dict | None = None, across: dict | None = None) -> float:
    """The row's metric as the model gives it, without serving_time: it never reads the
    preset's SERVING_FIELD, so a fit that moves only that field reuses it. ``memo``: a dict
    kept by the caller across rows predicted with the same preset (same name and values, as
    calc.accuracy.fit.Predictor keys them): rows of one model, GPU, split and dtypes share
    one replica's step model and KV budget (neither depends on the row's load or lengths).
    ``across``: a dict kept across presets whatever their values: a row's steady-state means
    and step features, which depend on its lengths, the KV budget and the scheduler, never on
    step times (keyed on those)."""
    from calc.cost.latency import estimate
    from calc.cost.setup import Setup

    ideal = preset is None or preset.ideal
    if not ideal:
        preset = _at_version(preset, row, memo)
    # the "ideal" preset: peaks and data-sheet bandwidth, also inside calc.serving.replica.capacity
    hw = load_hardware(row.hardware).with_engine("ideal" if ideal else preset)
    model = load_model(row.model)
    attention = "fused" if ideal else preset.attention_kernel
    group = FP4_GROUP if row.weight_dtype == "fp4" else GROUP_BY_DTYPE.get(
        (row.engine, row.weight_dtype), GROUP_SIZE.get(row.engine, DEFAULT_GROUP_SIZE))
    kw = dict(weight_dtype=row.weight_dtype, kv_dtype=row.kv_dtype, compute_dtype=row.compute_dtype,
              group_size=group, attention=attention, ideal=ideal, tp=row.tp, pp=row.pp)
    replicas = max(row.gpus // (row.tp * row.pp), 1)
    T, G = row.prompt_len, row.output_len
    m = row.metric
    if m in ("output_tokens_per_s", "output_tokens_per_s_per_gpu") and row.batch is None:
        st = _steady(model, hw, row, kw, preset, memo, across)
        total = replicas * (st.output_tokens_per_s if st else float("nan"))
        return total / row.gpus if m.endswith("_per_gpu") else total
    if m in ("tpot_s", "decode_tokens_per_s") and row.batch is None and row.concurrency:
        st = _steady(model, hw, row, kw, preset, memo, across)
        step = st.step_s if st else float("nan")
        return float(step if m == "tpot_s" else 1.0 / step)
    B = row.batch or row.concurrency or 1
    est = estimate(model, hw, B, T, max(G, 2) if m in ("decode_tokens_per_s", "tpot_s") else G, Setup.of(**kw))
    if m == "decode_tokens_per_s":
        return float(1.0 / est.tpot_s)
    if m == "prefill_tokens_per_s":
        return float(B * T / est.ttft_s)
    if m == "ttft_s":
        return float(est.ttft_s)
    if m == "tpot_s":
        return float(est.tpot_s)
    if m == "e2e_s":
        return float(est.e2e_s)
    if m == "output_tokens_per_s":
        return replicas * float(est.output_tokens_per_s)
    if m == "output_tokens_per_s_per_gpu":
        return replicas * float(est.output_tokens_per_s) / row.gpus
    if m == "total_tokens_per_s":
        return replicas * float(est.total_tokens_per_s)
    raise SpecError(str(PUBLISHED), "metric", f"unknown metric {m!r} in row {row.id}")


def _at_version(preset: EngineSpec, row: Row, memo: dict | None) -> EngineSpec:
    """The preset as the row's engine version ran it: its scheduler resolved with the by_version
    rules that hold for the row (calc.spec.scheduler.resolve_serving; the kernel families and
    graph policy a rule sets reach a fixed-batch pass through it, the kernel families alone a
    max-load row's steady state, which keeps its own 8192-token steps); the preset itself without
    a version or rules. ``memo``: model_metric's (one preset's values), keeping one copy per
    version, GPU, TP."""
    if not preset.by_version or not row.engine_version:
        return preset
    from calc.spec.scheduler import resolve_serving

    key = ("at_version", row.engine_version, row.hardware, row.tp)
    hit = None if memo is None else memo.get(key)
    if hit is None:
        hw = load_hardware(row.hardware)
        serving = resolve_serving(preset, hw.name, hw.reported_memory_gb, version=row.engine_version, tp=row.tp)
        unversioned = resolve_serving(preset, hw.name, hw.reported_memory_gb, tp=row.tp)
        hit = preset if serving == unversioned else preset.model_copy(update={"scheduler": serving})
        if memo is not None:
            memo[key] = hit
    return hit


def _steady(model, hw, row: Row, kw: dict, preset: EngineSpec | None, memo: dict | None = None,
            across: dict | None = None):
    """The steady state (calc.serving.replica.capacity.SteadyState) of one replica under continuous
    batching at the row's concurrency (or as many running requests as the KV cache and the engine's
    cap allow); None when the KV cache does not fit. ``memo`` and ``across``: model_metric's, keeping
    one replica per configuration (its max batch set per row) and steady_state's memo per row, KV
    budget and scheduler."""
    from calc.cost.dtypes import Dtypes
    from calc.serving.replica.capacity import Replica, steady_state
    from calc.spec.scheduler import Serving, resolve_serving

    memo = {} if memo is None else memo
    key = ("replica", row.model, row.hardware, row.tp, kw["weight_dtype"], kw["kv_dtype"], kw["compute_dtype"],
           kw["group_size"], kw["attention"])
    if key in memo:  # the configuration's KV budget and step model, computed for an earlier row
        rep = memo[key]
    else:
        dt = Dtypes.resolve(model, kw["weight_dtype"], kw["kv_dtype"], kw["compute_dtype"], kw["group_size"],
                            gemm_dtype_of(preset))
        # the KV cache as the engine sizes and fills it on this GPU (its memory share, of what,
        # and whether a request reserves its final context), in steps of an 8192-token budget
        # (the ideal preset: the class defaults)
        own = resolve_serving(None if kw["ideal"] else preset, hw.name, hw.reported_memory_gb)
        serving = Serving(max_batched_tokens=8192, gpu_memory_utilization=own.gpu_memory_utilization,
                          kv_share_of=own.kv_share_of, preemption=own.preemption, moe_kernel=own.moe_kernel,
                          weight_only_kernel=own.weight_only_kernel, kernel_set=own.kernel_set)  # the version's kernels
        rep = memo[key] = Replica(model, hw, row.tp, MAX_LOAD_BATCH, dt, serving, kw["attention"])
    rep = rep.with_max_batch(row.concurrency or MAX_LOAD_BATCH)
    if not rep.kv.fits:
        return None
    steady = {} if across is None else across.setdefault(
        ("steady", row.id, rep.kv, rep.max_batch, rep.serving, rep.logits, rep.tokens_per_step), {})
    return steady_state(rep, np.array([row.prompt_len]), np.array([max(row.output_len, 2)]), memo=steady)
