"""Published measurements of serving engines under load (reports/accuracy/under_load.csv) as
rows, and the benchmark runs they came from as scenarios the serving simulator predicts.

One CSV row is one published number: a metric (TTFT, TPOT, ITL, e2e, output tokens/s) with
the statistic it was published as (mean, median, p99, or the run's aggregate for a rate),
under one load: N concurrent clients (a closed loop), an arrival rate (open loop), or a burst
(every request sent at once). Rows of the same benchmark run share ``run`` and its conditions,
and are predicted together: one simulation per run, through calc.accuracy.scenario and
calc.accuracy.compare, exactly as `roofline compare` predicts a `vllm bench serve` result.

Engine arguments the run was launched with that its preset's scheduler models are kept as
``key=value;...`` under the engine's own argument names (``engine_args``) and reach the
scenario as `roofline compare --engine-arg` passes them (an unknown one is an error in the
data); arguments no scheduler field stands for are stated in the row's notes.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from calc.accuracy.benchmarks import Run
from calc.accuracy.rows import ENGINE_OF, act_dtype_of, compute_dtype_of, csv_number, kv_dtype_of, served_of
from calc.core.errors import SpecError
from calc.spec.catalog import hardware_catalog, model_catalog, shipped

UNDER_LOAD = shipped("accuracy", "reports/accuracy") / "under_load.csv"
COLUMNS = ("id", "run", "publisher", "source", "engine", "engine_version", "model", "weight_dtype", "kv_dtype",
           "act_dtype", "gpu", "num_gpus", "tp", "ep", "load", "concurrency", "request_rate", "num_prompts", "input_len",
           "output_len", "lengths", "metric", "statistic", "value", "unit", "tool", "engine_args", "notes",
           "cached_requests", "timing")
# (metric, statistic) -> the name calc.accuracy.compare predicts it under. A median ITL is
# predicted as the median request's TPOT: the simulator keeps per-request times, not every
# token's gap (for runs of fixed lengths the two agree up to the prefill steps a decode waits on).
MEASURED = {("ttft_s", "mean"): "ttft_mean_s", ("ttft_s", "median"): "ttft_p50_s", ("ttft_s", "p99"): "ttft_p99_s",
            ("tpot_s", "mean"): "tpot_mean_s", ("tpot_s", "median"): "tpot_p50_s", ("tpot_s", "p99"): "tpot_p99_s",
            ("itl_s", "mean"): "itl_mean_s", ("itl_s", "median"): "tpot_p50_s",
            ("e2e_s", "mean"): "e2e_mean_s", ("e2e_s", "median"): "e2e_p50_s", ("e2e_s", "p99"): "e2e_p99_s",
            ("output_tokens_per_s", "aggregate"): "output_tokens_per_s"}
LOADS_PUBLISHED = ("concurrency", "rate", "burst")  # calc.accuracy.benchmarks' loads, less a fixed batch
UNITS = {"ttft_s": "s", "tpot_s": "s", "itl_s": "s", "e2e_s": "s", "output_tokens_per_s": "tokens/s"}
# Simulated requests per run: the run's own count, uncapped (a burst: all of its requests, the
# load itself). A run that does not state its count is simulated with ten requests per client.
ROUNDS_UNSTATED = 10


@dataclass(frozen=True)
class LoadRow:
    id: str
    run: str
    publisher: str
    engine: str
    model: str
    hardware: str
    weight_dtype: str
    kv_dtype: str | None
    compute_dtype: str | None
    gpus: int
    tp: int
    ep: int  # expert-parallel GPUs of the TP ones (1: every expert split TP ways)
    load: str
    concurrency: int | None
    rate_per_s: float | None
    num_prompts: int | None
    prompt_len: float
    output_len: float
    metric: str
    statistic: str
    value: float
    engine_args: dict = field(default_factory=dict)
    engine_version: str = ""  # the engine's version as published (the preset's by_version rules read it)
    # lengths "uniform R": each request's prompt and output drawn uniformly from [int(L x R), L] (the
    # random datasets of SGLang's bench_serving and vLLM's older benchmark_serving.py, --random-range-ratio R
    # (today's `vllm bench serve` draws from [L(1 - R), L(1 + R)] instead); R = 0, the
    # scripts' old default, draws prompts from [1, L]: drawn_lengths), L the row's input_len /
    # output_len; None: every request at the row's lengths ("fixed", or "mean": the means)
    range_ratio: float | None = None
    # lengths "varied O" or "varied P/O": the published lengths are the means of lengths that varied
    # per request (a dataset such as ShareGPT, or outputs that end at EOS before max_tokens), their
    # distribution unpublished: each request's output (and, with P, its prompt) is drawn on [1, cap]
    # from the maximum-entropy distribution with the published mean (maxent_lengths); (P or None, O)
    length_caps: tuple[int | None, int] | None = None
    # the first N requests' prompts already in the server's prefix cache (from an earlier run of the
    # same prompts, as the publisher's server log shows it; SOURCES.md): calc.accuracy.scenario's
    # Conditions.cached_requests
    cached_requests: int = 0
    # timing "server" (a client through the engine's serving API) or "offline" (the engine driven in
    # process, LMDeploy's profile_generation): whether TTFT and e2e hold request_overhead_us
    served: bool = True

    @property
    def measured_as(self) -> str:
        return MEASURED[(self.metric, self.statistic)]

    @property
    def in_flight(self) -> int | None:
        """Requests in flight the load puts on the engine: the clients, or the burst's size."""
        return self.concurrency if self.load == "concurrency" else self.num_prompts if self.load == "burst" else None


def _lengths(text: str, where: str) -> tuple[float | None, tuple[int | None, int] | None]:
    """The ``lengths`` column as (range ratio, caps): "fixed" or "mean" (None, None), "uniform R" with
    0 <= R <= 1 (R, None), "varied O" (None, (None, O)) or "varied P/O" (None, (P, O)), caps whole
    numbers of at least 1."""
    kind, _, arg = (text or "").partition(" ")
    if kind in ("fixed", "mean") and not arg:
        return None, None
    if kind == "uniform":
        value = csv_number(arg)
        if value is not None and 0 <= value <= 1:
            return value, None
    if kind == "varied":
        head, _, tail = arg.rpartition("/")
        caps = [csv_number(x) for x in ((head, tail) if head else (tail,))]
        if all(c is not None and c >= 1 and c == int(c) for c in caps):
            return None, (int(caps[0]) if head else None, int(caps[-1]))
    raise SpecError(where, "lengths", f"{text!r}: expected fixed, mean, uniform R (0 <= R <= 1), varied O or "
                                      "varied P/O (caps whole numbers >= 1)")


def maxent_lengths(mean: float, cap: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` whole lengths on [1, cap] whose mean is ``mean``: drawn from the maximum-entropy
    distribution on that support with that mean (p(k) proportional to exp(-lam k), a geometric
    law truncated at ``cap``; lam < 0 where the mean lies above the middle, uniform at it), then
    scaled so that their total is the published n x mean (rounded, kept on [1, cap]); a mean at
    or beyond an end gives that end. The least-committal law where only the mean and the bounds
    are known."""
    if mean >= cap or mean <= 1:
        return np.full(n, cap if mean >= cap else 1, dtype=np.int64)
    k = np.arange(1, cap + 1, dtype=float)
    z = (k - k.mean()) / cap  # centred and scaled, so lam's search range does not depend on cap

    def law(lam: float) -> np.ndarray:
        e = -lam * z
        w = np.exp(e - e.max())  # finite for any lam
        return w / w.sum()

    lo, hi = -2000.0, 2000.0  # the mean falls as lam grows; these ends reach within 1e-3 of 1 and cap
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if law(mid) @ k > mean else (lo, mid)
    x = rng.choice(cap, size=n, p=law(0.5 * (lo + hi))) + 1.0
    return np.clip(np.rint(x * (mean * n / x.sum())), 1, cap).astype(np.int64)


def drawn_lengths(r: LoadRow, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` requests' prompt and output lengths as the row's benchmark drew them (seeded, so
    scoring is repeatable). ``uniform R``: numpy integers, each length on its own, as SGLang's
    bench_serving sample_random_requests draws them: prompts from [max(int(L x R), 1), L], outputs
    from [int(L x R), L], where an output of 0 still yields its one token. ``varied``: outputs (and
    with a prompt cap, prompts) from maxent_lengths at the published means; prompts otherwise at
    their mean."""
    rng = np.random.default_rng(seed)
    if r.length_caps is not None:
        P, O = r.length_caps
        T = maxent_lengths(r.prompt_len, P, n, rng) if P else np.full(n, max(round(r.prompt_len), 1), dtype=np.int64)
        return T, maxent_lengths(r.output_len, O, n, rng)
    R = r.range_ratio
    T = rng.integers(max(int(r.prompt_len * R), 1), int(r.prompt_len) + 1, size=n)
    G = rng.integers(int(r.output_len * R), int(r.output_len) + 1, size=n)
    return T, G


def _engine_args(text: str, where: str) -> dict:
    """The run's engine arguments, KEY=VALUE;KEY=VALUE (calc.spec.scheduler.parse_engine_args)."""
    from calc.spec.scheduler import parse_engine_args

    return parse_engine_args(filter(None, (p.strip() for p in (text or "").split(";"))), where, "engine_args")


def load_rows(path: Path = UNDER_LOAD) -> tuple[list[LoadRow], list[tuple[str, str]]]:
    """Rows the calculator can predict, and (id, why not) for the rest. A row without a
    source or publisher, with an unknown metric/statistic/load or a non-positive value, is a
    SpecError naming the row: the file is data, and a bad row a defect in it."""
    rows, skipped = [], []
    models, hws = model_catalog(), hardware_catalog()
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise SpecError(str(path), None, f"missing columns: {', '.join(missing)}")
        for r in reader:
            rid = r["id"]
            where = f"{path}: row {rid}"
            for col in ("run", "publisher", "source", "engine", "metric", "statistic", "load"):
                if not r[col]:
                    raise SpecError(where, col, "empty")
            if (r["metric"], r["statistic"]) not in MEASURED:
                raise SpecError(where, "metric", f"{r['metric']} as {r['statistic']!r} is not a predicted statistic")
            if r["load"] not in LOADS_PUBLISHED:
                raise SpecError(where, "load", f"{r['load']!r} is not one of {', '.join(LOADS_PUBLISHED)}")
            value = csv_number(r["value"])
            if value is None or value <= 0:
                raise SpecError(where, "value", f"{r['value']!r} is not a positive number")
            if r["unit"] != UNITS[r["metric"]]:
                raise SpecError(where, "unit", f"{r['unit']!r} for {r['metric']} (expected {UNITS[r['metric']]})")
            conc, rate, n = csv_number(r["concurrency"]), csv_number(r["request_rate"]), csv_number(r["num_prompts"])
            need = {"concurrency": ("concurrency", conc), "rate": ("request_rate", rate), "burst": ("num_prompts", n)}
            col, v = need[r["load"]]
            if v is None or v <= 0:
                raise SpecError(where, col, f"a {r['load']} load needs a positive {col}")
            T, G = csv_number(r["input_len"]), csv_number(r["output_len"])
            why = None
            if r["model"] not in models:
                why = f"model {r['model']} not in the catalog"
            elif r["gpu"] not in hws:
                why = f"gpu {r['gpu']} not in the catalog"
            elif T is None or G is None or T <= 0 or G <= 0:
                why = "input or output length not published"
            if why:
                skipped.append((rid, why))
                continue
            ratio, caps = _lengths(r["lengths"], where)
            w = r["weight_dtype"]
            rows.append(LoadRow(
                id=rid, run=r["run"], publisher=r["publisher"], engine=r["engine"], model=r["model"], hardware=r["gpu"],
                weight_dtype=w, kv_dtype=kv_dtype_of(w, r["kv_dtype"], r["model"]),
                compute_dtype=compute_dtype_of(w, act_dtype_of(r["act_dtype"], where)), gpus=int(csv_number(r["num_gpus"]) or 1),
                tp=int(csv_number(r["tp"]) or 1), ep=int(csv_number(r["ep"]) or 1), load=r["load"],
                concurrency=int(conc) if conc else None, rate_per_s=rate,
                num_prompts=int(n) if n else None, prompt_len=T, output_len=G, metric=r["metric"],
                statistic=r["statistic"], value=value, engine_args=_engine_args(r["engine_args"], where),
                engine_version=r["engine_version"] or "", range_ratio=ratio, length_caps=caps,
                cached_requests=_cached_requests(r["cached_requests"], n, where),
                served=served_of(r["timing"], where)))
    _check_runs(rows, path)
    return rows, skipped


RUN_FIELDS = ("publisher", "engine", "model", "hardware", "weight_dtype", "kv_dtype", "compute_dtype", "gpus", "tp",
              "load", "concurrency", "rate_per_s", "num_prompts", "prompt_len", "output_len", "engine_args",
              "cached_requests", "served")


def _cached_requests(text: str, n: float | None, where: str) -> int:
    """The cached_requests cell: empty (none), or a whole number of requests, at most the run's."""
    if not text:
        return 0
    v = csv_number(text)
    if v is None or v < 0 or v != int(v) or (n is not None and v > n):
        raise SpecError(where, "cached_requests", f"{text!r} is not a whole number of requests from 0 to "
                                                  f"{int(n) if n else 'the run'}'s")
    return int(v)


def _check_runs(rows: list[LoadRow], path) -> None:
    """Rows of one run must state the same conditions (they are predicted by one simulation)."""
    first: dict[str, LoadRow] = {}
    for r in rows:
        f = first.setdefault(r.run, r)
        diff = [k for k in RUN_FIELDS if getattr(f, k) != getattr(r, k)]
        if diff:
            raise SpecError(f"{path}: row {r.id}", diff[0], f"differs from row {f.id} of the same run {r.run}")
        if sum(1 for x in rows if x.run == r.run and x.measured_as == r.measured_as) > 1:
            raise SpecError(f"{path}: row {r.id}", "metric", f"run {r.run} states {r.measured_as} twice")


def preset_name(engine: str, presets) -> str:
    """The engine preset that models ``engine``: its own where the catalog has one (vllm,
    sglang, trtllm for TensorRT-LLM and NIM, lmdeploy, tgi ...), else "default"."""
    name = ENGINE_OF.get(engine, engine)
    return name if name in presets else "default"


def runs(rows: list[LoadRow]) -> dict[str, list[LoadRow]]:
    out: dict[str, list[LoadRow]] = {}
    for r in rows:
        out.setdefault(r.run, []).append(r)
    return out


def simulated_requests(r: LoadRow) -> int:
    """How many requests the scoring simulates for the run (see ROUNDS_UNSTATED)."""
    if r.load == "burst":
        return int(r.num_prompts)
    return int(r.num_prompts or ROUNDS_UNSTATED * (r.concurrency or 1))


def scenario(run_rows: list[LoadRow], preset: str):
    """The run as calc.accuracy.scenario resolves a benchmark file's run: every condition
    from the rows (as options), the lengths fixed at the published values (or means), or drawn
    per request as the run's benchmark drew them (``uniform R``), or from their means (``varied``)."""
    from calc.accuracy.scenario import Conditions, resolve

    r = run_rows[0]
    n = simulated_requests(r)
    lens, fixed = {}, {"prompt_len": r.prompt_len, "output_len": r.output_len}
    if r.range_ratio is not None or r.length_caps is not None:  # per-request lengths, as a result file carries them
        T, G = drawn_lengths(r, n)
        lens, fixed = {"prompt_lens": tuple(T.tolist()), "output_lens": tuple(G.tolist())}, {}
    run = Run(file=str(UNDER_LOAD), format="vllm-serve", label=r.run, load=r.load, served=r.served,
              measured={x.measured_as: x.value for x in run_rows}, concurrency=r.concurrency,
              rate_per_s=r.rate_per_s, num_requests=n, prompt_len=r.prompt_len,
              output_len=r.output_len, model_id=r.model, **lens)
    opts = Conditions(model=r.model, hardware=r.hardware, engine=preset, tp=r.tp, ep=r.ep, gpus=r.gpus,
                      weight_dtype=r.weight_dtype, kv_dtype=r.kv_dtype, compute_dtype=r.compute_dtype, **fixed,
                      engine_args=r.engine_args or None, engine_version=r.engine_version or None,
                      cached_requests=r.cached_requests or None)
    return resolve(run, opts)


def open_loop_in_flight(run_rows: list[LoadRow]) -> float | None:
    """Requests in flight on average in an open-loop run, by Little's law on the run's own
    published latencies: rate x e2e (the mean or median e2e, else TTFT + (G - 1) x TPOT/ITL);
    None for a closed loop or a burst, or when the run publishes neither. For regimes only
    (the prediction bands), never for a prediction."""
    r = run_rows[0]
    if r.load != "rate":
        return None
    by = {(x.metric, x.statistic): x.value for x in run_rows}
    e2e = by.get(("e2e_s", "mean")) or by.get(("e2e_s", "median"))
    if e2e is None:
        ttft = by.get(("ttft_s", "mean")) or by.get(("ttft_s", "median"))
        step = next((by[k] for k in (("tpot_s", "mean"), ("itl_s", "mean"), ("tpot_s", "median"),
                                     ("itl_s", "median")) if k in by), None)
        if ttft is None or step is None:
            return None
        e2e = ttft + (r.output_len - 1) * step
    return r.rate_per_s * e2e


def level(r: LoadRow) -> str:
    """The load level a row is reported under: requests in flight (clients, or a burst's size)
    in four bands, or "rate" for an open loop."""
    n = r.in_flight
    if n is None:
        return "rate (open loop)"
    return "1-4" if n <= 4 else "5-32" if n <= 32 else "33-128" if n <= 128 else ">128"


LEVELS = ("1-4", "5-32", "33-128", ">128", "rate (open loop)")
GROUP = {"ttft_s": "TTFT", "tpot_s": "TPOT/ITL", "itl_s": "TPOT/ITL", "e2e_s": "e2e",
         "output_tokens_per_s": "throughput"}
