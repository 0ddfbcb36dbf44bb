"""`roofline compare`: predict what each benchmark run measured, and by how much it missed.

A scenario (calc.accuracy.scenario) is predicted by its load:

- a fixed batch (vllm bench latency): the request model at that batch, through
  calc.accuracy.harness.predict, as `roofline accuracy` predicts its published rows
  (e2e includes the preset's per-request serving time; output tok/s = B G / e2e);
- llama-bench rows: prefill of n_prompt tokens in passes of n_ubatch after n_depth cached
  ones, and n_gen single-token decode steps at contexts n_depth ..., straight from
  calc.cost.latency's prefill_cost / decode_cost; tokens/s = tokens / time;
- N concurrent clients: throughput from the continuous-batching steady state with N
  running (harness.predict for fixed lengths, so the numbers are `roofline accuracy`'s);
  TTFT, TPOT, ITL and e2e from the simulator (calc.serving.simulate) running the same
  closed loop over the run's requests and lengths;
- an arrival rate: the simulator's open loop at that rate (Poisson, or gamma gaps of
  shape = the run's burstiness, i.e. cv = 1 / sqrt(burstiness)); every request sent at once
  ("burst", e.g. vLLM's request_rate inf): all arrive at t = 0. Throughput is the simulated
  requests' tokens over the simulated duration, as the tools divide by theirs. Every request
  the run sent is simulated (up to calc.core.limits.max_requests), so an overloaded run's backlog shows.

Every replica runs the engine preset's scheduler (calc/data/engines.yaml: token budget, running
cap, KV share, prefill policy, preemption, CUDA-graph cap) on the run's GPU, with the run's own
engine arguments over it (--engine-arg KEY=VALUE, or engine_args: in the sidecar).

Client-side times (TTFT, e2e) add the preset's request_overhead_us, as the harness does.
Statistics run over every simulated request, as the tools' do. ITL p50/p99 are not
predicted: the simulator keeps per-request times, not every token's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from calc.accuracy.harness import GROUP_SIZE, Row
from calc.accuracy.harness import predict as predict_row
from calc.accuracy.scenario import Scenario
from calc.core.errors import SpecError
from calc.core.units import DEFAULT_GROUP_SIZE
from calc.spec.bands import is_rate
from calc.spec.catalog import load_hardware, load_model
from calc.spec.engine import EngineSpec, family, load_preset  # noqa: F401 (load_preset: re-exported)


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
               publisher=sc.run.name)


def _hardware(sc: Scenario, preset: EngineSpec):
    """The run's profile under the preset, as calc.accuracy.harness.predict sets it."""
    return load_hardware(sc.hardware).with_engine("ideal" if preset.ideal else preset)


def _dtypes(sc: Scenario, model, preset: EngineSpec):
    from calc.cost.dtypes import Dtypes

    return Dtypes.resolve(model, sc.weight_dtype, sc.kv_dtype, sc.compute_dtype, GROUP_SIZE.get(family(preset), DEFAULT_GROUP_SIZE))


def predict(sc: Scenario, preset: EngineSpec) -> dict[str, float]:
    """Every metric the run measured, predicted under ``preset`` (nan where not modelled)."""
    if sc.run.format == "llama-bench":
        out = _llamabench(sc, preset)
    elif sc.run.load == "batch":
        out = _fixed_batch(sc, preset)
    else:
        out = _serving(sc, preset)
    return {m: out.get(m, math.nan) for m in sc.measured}


def compare(sc: Scenario, preset: EngineSpec | None = None) -> RunResult:
    preset = preset or load_preset(sc.engine)
    pred = predict(sc, preset)
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
    attention = "fused" if preset.ideal else preset.attention_kernel
    par = check(model, Parallel(sc.tp, sc.pp))
    eff = Efficiency.of(hw, preset.ideal)
    run = sc.run
    T, G, depth = int(run.prompt_len), int(run.output_len), run.depth
    step = run.ubatch or T or 1
    t_prefill = 0.0
    for start in range(0, T, step):  # prompt passes of n_ubatch tokens after what is cached
        chunk = min(step, T - start)
        cost, _ = prefill_cost(model, hw, 1, chunk, dt, eff, attention, past=depth + start, par=par)
        t_prefill += float(cost.time_s)
    t_decode = 0.0
    if G:
        contexts = depth + T + np.arange(G, dtype=float)
        t_decode = float(np.sum(decode_cost(model, hw, 1, contexts, dt, eff, attention, par).time_s))
    return {"prefill_tokens_per_s": T / t_prefill if T else math.nan,
            "decode_tokens_per_s": G / t_decode if G else math.nan,
            "tokens_per_s": (T + G) / (t_prefill + t_decode)}


def _replica(sc: Scenario, preset: EngineSpec, max_batch: int | None, requests: int = 1):
    """One engine replica under the scenario's scheduler; ``max_batch`` None: the scheduler's
    running cap, or (KV-bound engines) as many as the KV pages hold, at most ``requests``."""
    from calc.serving.capacity import Replica

    model = load_model(sc.model)
    attention = "fused" if preset.ideal else preset.attention_kernel
    rep = Replica(model, _hardware(sc, preset), sc.tp, max_batch or sc.serving.max_num_seqs or 1,
                  _dtypes(sc, model, preset), sc.serving, attention)
    if max_batch is None and sc.serving.max_num_seqs is None and rep.kv.fits:
        rep = rep.with_max_batch(max(min(rep.kv.pages, requests), 1))  # a sequence holds at least one page
    return rep


def _requests(sc: Scenario) -> tuple[np.ndarray, np.ndarray]:
    from calc.core import limits

    run = sc.run
    n = min(run.num_requests or len(sc.prompt_lens) or 1, limits.max_requests())
    if sc.prompt_lens.size > 1:
        return sc.prompt_lens[:n].astype(np.int64), np.maximum(sc.output_lens[:n], 1).astype(np.int64)
    n = max(n, run.concurrency or 1) if run.load == "concurrency" else n
    return np.full(n, int(sc.prompt_lens[0])), np.full(n, max(int(sc.output_lens[0]), 1))


def _serving(sc: Scenario, preset: EngineSpec) -> dict[str, float]:
    from calc.serving.capacity import steady_state
    from calc.serving.simulate import simulate

    run = sc.run
    want = set(sc.measured)
    T, G = _requests(sc)
    cap = None
    if run.load == "concurrency":
        cap = min(run.concurrency, sc.max_num_seqs) if sc.max_num_seqs else run.concurrency
    rep = _replica(sc, preset, cap, T.size)
    cap = rep.max_batch
    if not rep.kv.fits:
        return {}
    out: dict[str, float] = {}
    latency = {"ttft", "tpot", "itl", "e2e"} & {m.split("_")[0] for m in want}
    if latency or run.load != "concurrency":
        if run.load == "rate":
            b = run.burstiness
            sim = simulate(rep, T, G, rate_per_s=run.rate_per_s, process="poisson" if b == 1.0 else "gamma",
                           cv=1.0 / math.sqrt(b))
        elif run.load == "burst":
            sim = simulate(rep, T, G, burst=True)
        else:
            sim = simulate(rep, T, G, concurrency=run.concurrency)
        serving = 0.0 if preset.ideal else preset.request_overhead_us * 1e-6
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
        out["output_tokens_per_s"] = float(np.sum(sim.output_len)) / duration
        out["requests_per_s"] = sim.n / duration
    if run.load == "concurrency":  # closed loop: the steady state under the run's scheduler
        replicas = max(sc.gpus // (sc.tp * sc.pp), 1)
        tput = replicas * steady_state(rep, T, np.maximum(G, 2)).output_tokens_per_s
        out["output_tokens_per_s"] = float(tput)
        out["requests_per_s"] = float(tput) / float(np.mean(G))
    return out


def compare_files(files, options) -> tuple[list[RunResult], list[tuple[str, str]], dict[str, EngineSpec]]:
    """Read, resolve and predict every run of every file. A file that cannot be read or
    resolved is one (file, message) failure; the other files are still compared.
    Returns (results, failures, the presets used by name)."""
    from calc.accuracy.benchmarks import read_results
    from calc.accuracy.scenario import resolve

    results, failures, presets = [], [], {}
    for f in files:
        try:
            scenarios = [resolve(run, options) for run in read_results(f)]
            for sc in scenarios:
                if sc.engine not in presets:
                    presets[sc.engine] = load_preset(sc.engine)
            results += [compare(sc, presets[sc.engine]) for sc in scenarios]
        except SpecError as exc:  # an option-level message (--prompt-len, ...) still names the file
            failures.append((str(f), str(exc) if str(exc).startswith(str(f)) else f"{f}: {exc}"))
        except RuntimeError as exc:  # the simulator: a request larger than the KV cache holds
            failures.append((str(f), f"{f}: cannot be simulated: {exc}"))
    return results, failures, presets
