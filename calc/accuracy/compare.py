"""`roofline compare`: predict what each benchmark run measured, and by how much it missed.

A scenario (calc.accuracy.scenario) is predicted by its load:

- a fixed batch (vllm bench latency): the request model at that batch, through
  calc.accuracy.harness.predict, as `roofline accuracy` predicts its published rows
  (e2e includes the preset's per-request serving time; output tok/s = B G / e2e);
- llama-bench rows: prefill of n_prompt tokens in passes of n_ubatch after n_depth cached
  ones, and n_gen single-token decode steps at contexts n_depth ..., straight from
  calc.cost.latency's prefill_cost / decode_cost (one vectorised call each; past MAX_PASSES
  passes or steps, at MAX_PASSES evenly spaced ones, times their count: pass time is smooth
  in the context, and the run's time stays bounded); tokens/s = tokens / time;
- N concurrent clients: throughput from the continuous-batching steady state with N
  running (harness.predict for fixed lengths, so the numbers are `roofline accuracy`'s);
  TTFT, TPOT, ITL and e2e from the simulator (calc.serving.sim.simulate) running the same
  closed loop over the run's requests and lengths;
- an arrival rate: the simulator's open loop at that rate (Poisson, or gamma gaps of
  shape = the run's burstiness, i.e. cv = 1 / sqrt(burstiness)); every request sent at once
  ("burst", e.g. vLLM's request_rate inf): all arrive at t = 0. Throughput is the simulated
  requests' tokens over the simulated duration, as the tools divide by theirs. Every request
  the run sent is simulated (up to calc.core.limits.max_requests), so an overloaded run's backlog shows.

Every replica runs the engine preset's scheduler (calc/data/engines.yaml: token budget, running
cap, KV share, prefill policy, preemption, CUDA-graph cap) on the run's GPU, with the run's own
engine arguments over it (--engine-arg KEY=VALUE, or engine_args: in the sidecar). A run on more
GPUs than one replica's TP x PP, or with PP > 1, splits its load evenly over k engines, as
`roofline plan` does (Replica.engines: gpus / (TP x PP) replicas, PP micro-batch engines each):
one engine is simulated with every k-th request (its arrival time kept), the rate / k or
ceil(clients / k) clients, and rates over the run are that engine's times k.

vLLM's rate ramp (--ramp-up-strategy): gamma gaps at each request's rate on the ramp. Runs that
ask the same question (same conditions, load and lengths: a JSON-lines file that repeats one line)
are predicted once. A compare predicts at most limits.max_scenarios() distinct runs, and simulates
at most limits.max_simulated() requests over all of them, so its time is bounded before any
simulation starts.

Client-side times (TTFT, e2e) add the preset's request_overhead_us, as the harness does.
Statistics run over every simulated request, as the tools' do. ITL p50/p99 are not
predicted: the simulator keeps per-request times, not every token's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from calc.accuracy.harness import GROUP_SIZE, Row
from calc.accuracy.harness import predict as predict_row
from calc.accuracy.scenario import Scenario
from calc.core.errors import SpecError
from calc.core.units import DEFAULT_GROUP_SIZE
from calc.spec.bands import is_rate
from calc.spec.catalog import load_hardware, load_model
from calc.spec.engine import EngineSpec, family, gemm_dtype_of, load_preset  # noqa: F401 (load_preset: re-exported)

MAX_PASSES = 4096  # llama-bench passes / decode steps costed one by one (4096 x ~40 operators: milliseconds)


@dataclass(frozen=True)
class MetricResult:
    metric: str
    measured: float
    predicted: float
    band: tuple[float, float] | None = None  # where 80% of held-out measurements fell (calc.spec.bands)
    band_group: str | None = None
    band_rows: int | None = None

    @property
    def inside(self) -> bool | None:
        """Whether the measurement fell inside the band (None: no band)."""
        if self.band is None or not math.isfinite(self.predicted):
            return None
        return self.band[0] <= self.measured <= self.band[1]

    @property
    def error(self) -> float:
        """Signed relative error, (predicted - measured) / measured."""
        if not (math.isfinite(self.predicted) and self.measured):
            return math.nan
        return self.predicted / self.measured - 1.0


@dataclass(frozen=True)
class RunResult:
    scenario: Scenario
    preset: str
    metrics: tuple[MetricResult, ...]
    notes: tuple[str, ...] = ()


def _row(sc: Scenario, preset: EngineSpec, metric: str, batch=None, concurrency=None) -> Row:
    return Row(id=sc.run.name, engine=family(preset), preset=preset.name, model=sc.model, hardware=sc.hardware,
               weight_dtype=sc.weight_dtype, kv_dtype=sc.kv_dtype, compute_dtype=sc.compute_dtype, gpus=sc.gpus,
               tp=sc.tp, pp=sc.pp, batch=batch, concurrency=concurrency, prompt_len=int(sc.prompt_lens[0]),
               output_len=int(sc.output_lens[0]), metric=metric, value=math.nan,
               publisher=sc.run.name, engine_version=sc.engine_version or "")


def _hardware(sc: Scenario, preset: EngineSpec):
    """The run's profile under the preset, as calc.accuracy.harness.predict sets it."""
    return load_hardware(sc.hardware).with_engine("ideal" if preset.ideal else preset)


def _dtypes(sc: Scenario, model, preset: EngineSpec):
    from calc.cost.dtypes import Dtypes

    return Dtypes.resolve(model, sc.weight_dtype, sc.kv_dtype, sc.compute_dtype, GROUP_SIZE.get(family(preset), DEFAULT_GROUP_SIZE),
                          gemm_dtype_of(preset))


def predict(sc: Scenario, preset: EngineSpec) -> dict[str, float]:
    """Every metric the run measured, predicted under ``preset`` (nan where not modelled)."""
    if sc.run.format == "llama-bench":
        out = _llamabench(sc, preset)
    elif sc.run.load == "batch":
        out = _fixed_batch(sc, preset)
    else:
        out = _serving(sc, preset)
    return {m: out.get(m, math.nan) for m in sc.measured}


def compare(sc: Scenario, preset: EngineSpec | None = None, pred: dict[str, float] | None = None) -> RunResult:
    """The run's metrics, measured against ``pred`` (its prediction under ``preset`` when not given)."""
    preset = preset or load_preset(sc.engine)
    pred = predict(sc, preset) if pred is None else pred
    notes = ()
    if pred and all(math.isnan(v) for v in pred.values()):
        notes = ("nothing predicted: the weights and the KV cache of one replica do not fit on the GPUs",)
    from calc.accuracy.compare_bands import run_bands

    bands, _ = run_bands(sc, preset, _dtypes(sc, load_model(sc.model), preset), pred)

    def result(m: str, v: float) -> MetricResult:
        f = bands.get(m)
        if f is None or not math.isfinite(pred[m]):
            return MetricResult(m, v, pred[m])
        lo, hi = f.interval(pred[m], is_rate(m))
        return MetricResult(m, v, pred[m], (float(lo), float(hi)), f.group, f.band.rows)

    return RunResult(sc, preset.name, tuple(result(m, v) for m, v in sc.measured.items()), notes)


def _fixed_batch(sc: Scenario, preset: EngineSpec) -> dict[str, float]:
    e2e = predict_row(_row(sc, preset, "e2e_s", batch=sc.batch), preset)
    return {"e2e_mean_s": e2e, "e2e_p50_s": e2e, "e2e_p99_s": e2e,
            "output_tokens_per_s": predict_row(_row(sc, preset, "output_tokens_per_s", batch=sc.batch), preset)}


def _llamabench(sc: Scenario, preset: EngineSpec) -> dict[str, float]:
    from calc.cost.efficiency import Efficiency
    from calc.cost.latency import decode_cost, prefill_cost
    from calc.cost.parallel import Parallel, check

    model = load_model(sc.model)
    hw = _hardware(sc, preset)
    dt = _dtypes(sc, model, preset)
    attention = _attention(sc, preset)
    par = check(model, Parallel(sc.tp, sc.pp, sc.ep))
    eff = Efficiency.of(hw, preset.ideal).with_serving(sc.serving)  # the kernel families of the run's version
    run = sc.run
    T, G, depth = int(run.prompt_len), int(run.output_len), run.depth
    step = min(run.ubatch or T or 1, T or 1)
    full, rest = divmod(T, step)  # prompt passes of n_ubatch tokens after what is cached, and a shorter last one
    t_prefill = 0.0
    if full:
        starts, weight = _spaced(full)
        past = depth + starts * step
        cost, _ = prefill_cost(model, hw, 1, step, dt, eff, attention, past=past, par=par, shape=past.shape)
        t_prefill = float(np.sum(cost.time_s)) * weight
    if rest:
        cost, _ = prefill_cost(model, hw, 1, rest, dt, eff, attention, past=depth + full * step, par=par)
        t_prefill += float(cost.time_s)
    t_decode = 0.0
    if G:
        steps, weight = _spaced(G)
        t_decode = float(np.sum(decode_cost(model, hw, 1, depth + T + steps, dt, eff, attention, par).time_s)) * weight
    return {"prefill_tokens_per_s": T / t_prefill if T else math.nan,
            "decode_tokens_per_s": G / t_decode if G else math.nan,
            "tokens_per_s": (T + G) / (t_prefill + t_decode)}


def _attention(sc: Scenario, preset: EngineSpec) -> str:
    """The run's attention kernel: fused under the ideal preset, else as the file says it ran
    (llama-bench's flash_attn), else the preset's."""
    return "fused" if preset.ideal else sc.attention or preset.attention_kernel


def _spaced(n: int) -> tuple[np.ndarray, float]:
    """Indices 0..n-1, or MAX_PASSES of them evenly spaced, and the weight each stands for."""
    if n <= MAX_PASSES:
        return np.arange(n, dtype=float), 1.0
    return np.linspace(0, n - 1, MAX_PASSES), n / MAX_PASSES


def replica(sc: Scenario, preset: EngineSpec, max_batch: int | None, requests: int = 1):
    """One engine replica under the scenario's scheduler; ``max_batch`` None: the scheduler's
    running cap, or (KV-bound engines) as many as the KV pages hold, at most ``requests``."""
    from calc.serving.replica.capacity import Replica

    model = load_model(sc.model)
    attention = _attention(sc, preset)
    rep = Replica(model, _hardware(sc, preset), sc.tp, max_batch or sc.serving.max_num_seqs or 1,
                  _dtypes(sc, model, preset), sc.serving, attention, pp=sc.pp, ep=sc.ep)
    if max_batch is None and sc.serving.max_num_seqs is None and rep.kv.fits:
        rep = rep.with_max_batch(max(min(rep.kv.pages, requests), 1))  # a sequence holds at least one page
    return rep


def simulated(sc: Scenario) -> int:
    """How many requests the run's prediction simulates (0 for the closed forms): every request the
    run sent, up to calc.core.limits.max_requests(), so an overloaded run's backlog shows."""
    from calc.core import limits

    run = sc.run
    if run.format == "llama-bench" or run.load == "batch":
        return 0
    n = run.num_requests or len(sc.prompt_lens) or 1
    if sc.prompt_lens.size > 1:
        n = min(n, sc.prompt_lens.size)
    elif run.load == "concurrency":
        n = max(n, run.concurrency or 1)  # every client sends at least one
    return min(n, limits.max_requests())


def _requests(sc: Scenario) -> tuple[np.ndarray, np.ndarray]:
    n = simulated(sc)
    if sc.prompt_lens.size > 1:
        return sc.prompt_lens[:n].astype(np.int64), np.maximum(sc.output_lens[:n], 1).astype(np.int64)
    return np.full(n, int(sc.prompt_lens[0])), np.full(n, max(int(sc.output_lens[0]), 1))


def arrivals(run, n: int) -> np.ndarray:
    """Unit-rate gaps for ``simulate(rate_per_s=1.0, gaps=...)``: a burst (all at t = 0), or
    vLLM's ramp: request i of the run's N sent at rate r_i = start + (end - start) i / (N - 1)
    (linear) or start (end / start)^(i / (N - 1)) (exponential), gamma gaps of shape burstiness."""
    from calc.serving.sim.simulate import arrival_gaps

    if run.load == "burst":
        return np.zeros(n)
    strategy, lo, hi = run.ramp_up
    progress = np.arange(n) / max((run.num_requests or n) - 1, 1)
    r = lo + (hi - lo) * progress if strategy == "linear" else lo * (hi / lo) ** progress
    b = run.burstiness
    unit = arrival_gaps(n, "poisson" if b == 1.0 else "gamma", 1.0 / math.sqrt(b))
    # vLLM asserts each rate is > 0; a linear ramp from 0 sends its first request at once
    return np.divide(unit, r, out=np.zeros(n), where=r > 0)


def _cached(sc: Scenario, T, rep):
    """The prompt tokens found cached per request (Scenario.cached_requests: the first N requests,
    all but the last token; calc.serving.replica.prefix caps it so), None when none are."""
    if not sc.cached_requests:
        return None
    from calc.serving.replica.prefix import CachedPrefix

    cached = np.where(np.arange(T.size) < sc.cached_requests, T - 1, 0)
    return CachedPrefix(cached.astype(np.int64), 0, rep.kv.block_size)


def _serving(sc: Scenario, preset: EngineSpec) -> dict[str, float]:
    from calc.serving.replica.capacity import steady_state
    from calc.serving.sim.simulate import simulate

    run = sc.run
    want = set(sc.measured)
    T, G = _requests(sc)
    cap = None
    if run.load == "concurrency":
        cap = min(run.concurrency, sc.max_num_seqs) if sc.max_num_seqs else run.concurrency
    rep = replica(sc, preset, cap, T.size)
    cap = rep.max_batch
    if not rep.kv.fits:
        return {}
    out: dict[str, float] = {}
    latency = {"ttft", "tpot", "itl", "e2e"} & {m.split("_")[0] for m in want}
    prefix = _cached(sc, T, rep)
    # the run's load split evenly over its replicas' engines (Replica.engines: a replica per
    # gpus / (TP x PP), PP engines each); one engine's simulation stands for all of them
    k = rep.engines(max(sc.gpus // (sc.tp * sc.pp), 1))
    clients = math.ceil(run.concurrency / k) if run.load == "concurrency" else None  # on each engine
    if latency or run.load != "concurrency":
        mine = slice(None, None, k)  # its requests: dealt out in turn, every k-th
        prefix = None if prefix is None else replace(prefix, cached=prefix.cached[mine])
        if run.load == "burst" or run.ramp_up is not None:  # explicit arrival times
            gaps = np.diff(np.cumsum(arrivals(run, T.size))[mine], prepend=0.0)
            sim = simulate(rep, T[mine], G[mine], rate_per_s=1.0, gaps=gaps, prefix=prefix)
        elif run.load == "rate":
            b = run.burstiness
            sim = simulate(rep, T[mine], G[mine], rate_per_s=run.rate_per_s / k,
                           process="poisson" if b == 1.0 else "gamma", cv=1.0 / math.sqrt(b), prefix=prefix)
        else:
            sim = simulate(rep, T[mine], G[mine], concurrency=clients)
        serving = preset.request_overhead_s if run.served else 0.0  # an in-process tool has no server
        ttft, e2e = sim.ttft_s + serving, sim.e2e_s + serving
        multi = sim.output_len > 1
        tpot = ((sim.finish_s - sim.first_token_s)[multi] / (sim.output_len[multi] - 1))
        for name, v in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e)):
            if v.size:
                out[f"{name}_mean_s"] = float(np.mean(v))
                out[f"{name}_p50_s"] = float(np.median(v))
                out[f"{name}_p99_s"] = float(np.percentile(v, 99))
        if multi.any():
            out["itl_mean_s"] = float(np.sum((sim.finish_s - sim.first_token_s)[multi])
                                      / np.sum(sim.output_len[multi] - 1))
        duration = float(np.max(sim.finish_s) - np.min(sim.arrive_s))
        out["output_tokens_per_s"] = k * float(np.sum(sim.output_len)) / duration
        out["requests_per_s"] = k * sim.n / duration
    if run.load == "concurrency":  # closed loop: the steady state under the run's scheduler
        tput = k * steady_state(rep, T, np.maximum(G, 2), clients).output_tokens_per_s
        out["output_tokens_per_s"] = float(tput)
        out["requests_per_s"] = float(tput) / float(np.mean(G))
    return out


def question(sc: Scenario) -> tuple:
    """What a prediction depends on: two runs with the same key get the same prediction."""
    r = sc.run
    return (sc.model, sc.hardware, sc.engine, sc.tp, sc.pp, sc.ep, sc.gpus, sc.weight_dtype, sc.kv_dtype, sc.compute_dtype,
            sc.batch, sc.max_num_seqs, sc.prompt_lens.tobytes(), sc.output_lens.tobytes(), tuple(sorted(sc.measured)),
            sc.constant_lengths, r.format, r.load, r.batch, r.concurrency, r.rate_per_s, r.burstiness, r.ramp_up,
            r.num_requests, r.prompt_len, r.output_len, r.depth, r.ubatch, sc.attention)


def compare_files(files, options) -> tuple[list[RunResult], list[tuple[str, str]], dict[str, EngineSpec]]:
    """Read, resolve and predict every run of every file. A file that cannot be read or
    resolved is one (file, message) failure; the other files are still compared. The work is
    counted before any is done (distinct runs, simulated requests): over a limit is one SpecError.
    Returns (results, failures, the presets used by name)."""
    from calc.accuracy.benchmarks import read_results
    from calc.accuracy.scenario import resolve
    from calc.core import limits

    failures, presets, read, memo = [], {}, [], {}
    for f in files:
        try:
            scenarios = [resolve(run, options, memo) for run in read_results(f)]
            for sc in scenarios:
                if sc.engine not in presets:
                    presets[sc.engine] = load_preset(sc.engine)
            read.append((f, scenarios))
        except SpecError as exc:  # an option-level message (--prompt-len, ...) still names the file
            failures.append((str(f), _named(f, exc)))
    distinct = {question(sc): sc for _, scs in read for sc in scs}
    if len(distinct) > limits.max_scenarios():
        raise SpecError("compare", None, limits.too_many("distinct runs", len(distinct), limits.max_scenarios(),
                                                         limits.SCENARIOS_ENV))
    total = sum(simulated(sc) for sc in distinct.values())
    if total > limits.max_simulated():
        raise SpecError("compare", None, limits.too_many("simulated requests (over all runs)", total,
                                                         limits.max_simulated(), limits.SIMULATED_ENV))
    results, predicted = [], {}
    for f, scenarios in read:
        try:
            out = []
            for sc in scenarios:
                key = question(sc)
                if key not in predicted:
                    predicted[key] = predict(sc, presets[sc.engine])
                out.append(compare(sc, presets[sc.engine], predicted[key]))
            results += out
        except SpecError as exc:
            failures.append((str(f), _named(f, exc)))
        except RuntimeError as exc:  # the simulator: a request larger than the KV cache holds
            failures.append((str(f), f"{f}: cannot be simulated: {exc}"))
    return results, failures, presets


def _named(f, exc: SpecError) -> str:
    return str(exc) if str(exc).startswith(str(f)) else f"{f}: {exc}"
