"""A serving workload: arrivals, prompt/output lengths, SLOs and the search space of a plan.

YAML (``roofline plan WORKLOAD.yaml``); every key is checked (``extra="forbid"``):

    name: chat-llama-8b
    model: llama-3.1-8b                 # catalog name or path (relative to this file)
    hardware: [l40s, a100-80gb-sxm, h100-sxm]
    dtypes: {weight: bf16, kv: bf16}
    arrival: {rate_per_s: 20, process: poisson}      # or {concurrency: 64}, or {kind: burst} (all at t = 0)
    prompt_len: {dist: lognormal, median: 800, sigma: 0.9, min: 16, max: 8192}
    output_len: {dist: uniform, low: 50, high: 400}
    # or, instead of the two: trace: traces/chat.csv (columns prompt_len,output_len)
    slo: {ttft_p99_s: 1.0, tpot_p99_s: 0.05}
    max_gpus: 16
    chunk_tokens: [2048, 8192]          # optional: chunked-prefill sizes searched (else serving's)
    prices: {h100-sxm: 2.49}            # USD per GPU-hour, overriding the profiles
    engine: vllm                        # optional: the engine preset (default: the profiles' own)
    engine_args: {gpu_memory_utilization: 0.5, max_num_batched_tokens: 2048}   # its own argument names
    requests: 2000                      # simulated per configuration
    seed: 0
    prefix_cache: {shared_tokens: 2000, hit_rate: 0.0}   # optional: see PrefixCache
    disaggregation: {decode: {tp: [1, 2]}}              # optional: also search xP + yD (see Disaggregation)
    speculative: {draft: llama-3.2-1b, k: 4, acceptance: 0.7}   # optional: also search it (see Speculative)

Lengths are whole tokens, clipped to [min, max] (min defaults to 1). A request of
prompt T and output G holds T + G - 1 positions at the end (DESIGN.md), which
must fit the model's maximum context.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from calc.core import limits as lim
from calc.core.errors import SpecError
from calc.core.files import exists
from calc.core.units import canonical_dtype
from calc.spec.catalog import build, load_hardware, load_model, read_yaml
from calc.spec.engine import PRESET_SUFFIXES, engine_arg_names, is_preset_file, load_engine
from calc.spec.hardware import HardwareSpec
from calc.spec.lengths import Length, _Spec, read_trace
from calc.spec.model import ModelSpec
from calc.spec.scheduler import Serving, map_engine_args, resolve_serving
from calc.spec.workload_blocks import Cluster, Disaggregation, Pool, PrefixCache, Speculative

__all__ = ["SLO", "Arrival", "Disaggregation", "DtypeChoice", "Length", "LoadedWorkload", "Pool", "PrefixCache",
           "Cluster", "Serving", "Speculative", "Target", "Workload", "load_workload", "read_trace", "resolve", "sample_lengths"]


class Arrival(_Spec):
    """Open loop at ``rate_per_s`` (Poisson, or gamma gaps with coefficient of variation
    ``cv``), a closed loop of ``concurrency`` clients that each send the next request
    as soon as the previous one finishes, or ``kind: burst``: every request at t = 0 (what a
    benchmark at an infinite request rate sends)."""

    kind: Literal["rate", "concurrency", "burst"] | None = None  # None: from the key that is given
    rate_per_s: float | None = Field(default=None, gt=0, le=1e9)
    concurrency: int | None = Field(default=None, ge=1, le=lim.MAX_BATCH)
    process: Literal["poisson", "gamma"] = "poisson"
    cv: float = Field(default=1.0, gt=0, le=1e3)

    @model_validator(mode="after")
    def _one(self):
        if self.kind == "burst":
            if self.rate_per_s is not None or self.concurrency is not None:
                raise ValueError("a burst sends every request at t = 0: give no rate_per_s or concurrency")
            return self
        if (self.rate_per_s is None) == (self.concurrency is None):
            raise ValueError("give exactly one of rate_per_s and concurrency (or kind: burst)")
        if self.kind is not None and (self.kind == "rate") != (self.rate_per_s is not None):
            raise ValueError(f"kind: {self.kind} does not match the key given")
        if self.process == "poisson" and self.cv != 1.0:
            raise ValueError("cv applies to process: gamma (Poisson gaps have cv 1)")
        return self


class SLO(_Spec):
    """Latency targets in seconds; any subset. TPOT is a request's mean time per output
    token after the first: (e2e - TTFT) / (G - 1)."""

    ttft_p50_s: float | None = Field(default=None, gt=0, le=lim.MAX_SECONDS)
    ttft_p99_s: float | None = Field(default=None, gt=0, le=lim.MAX_SECONDS)
    tpot_p50_s: float | None = Field(default=None, gt=0, le=lim.MAX_SECONDS)
    tpot_p99_s: float | None = Field(default=None, gt=0, le=lim.MAX_SECONDS)
    e2e_p99_s: float | None = Field(default=None, gt=0, le=lim.MAX_SECONDS)

    def targets(self) -> dict[str, float]:
        """{metric_p: seconds} for the SLOs that are set, e.g. {"ttft_p99": 1.0}."""
        return {t.key: t.limit_s for t in self.parsed()}

    def parsed(self) -> tuple[Target, ...]:
        """The SLOs that are set, each as a typed target (the one place the keys are read)."""
        return tuple(Target.of(k.removesuffix("_s"), v) for k, v in self.model_dump().items() if v is not None)


@dataclass(frozen=True)
class Target:
    """One latency target: the ``percentile`` of a request ``metric`` within ``limit_s`` seconds."""

    metric: Literal["ttft", "tpot", "e2e"]
    percentile: int
    limit_s: float

    @classmethod
    def of(cls, key: str, limit_s: float) -> Target:
        """From an SLO key such as "ttft_p99"."""
        metric, pct = key.split("_p")
        return cls(metric, int(pct), limit_s)  # type: ignore[arg-type]

    @property
    def key(self) -> str:
        return f"{self.metric}_p{self.percentile}"

    @property
    def label(self) -> str:
        """"TTFT p99", "e2e p99": how reports name it."""
        name = "e2e" if self.metric == "e2e" else self.metric.upper()
        return f"{name} p{self.percentile}"


class DtypeChoice(_Spec):
    """A workload's dtypes block: names as written (None: the model's); calc.cost.dtypes.Dtypes resolves them."""

    weight: str | None = None
    kv: str | None = None
    compute: str | None = None

    @field_validator("weight", "kv", "compute")
    @classmethod
    def _known(cls, v: str | None) -> str | None:
        """A dtype the calculator knows, checked here so the error names this file and field."""
        return None if v is None else canonical_dtype(v)


MAX_CHOICES = 8  # dtypes or engines searched together


class Workload(_Spec):
    # one line of at most 200 characters: it titles reports (a 1 MB name made --out take minutes)
    name: str = Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")
    description: str = Field(default="", max_length=10_000)
    model: str
    hardware: list[str] = Field(min_length=1)
    dtypes: DtypeChoice | list[DtypeChoice] = DtypeChoice()  # a list: each searched
    arrival: Arrival
    prompt_len: Length | None = None
    output_len: Length | None = None
    trace: str | None = None
    slo: SLO = SLO()
    max_gpus: int = Field(default=8, ge=1, le=lim.MAX_PARALLEL)
    tp: list[Annotated[int, Field(ge=1, le=lim.MAX_PARALLEL)]] = Field(default=[1, 2, 4, 8], min_length=1, max_length=64)
    pp: list[Annotated[int, Field(ge=1, le=lim.MAX_PARALLEL)]] = Field(default=[1], min_length=1, max_length=64)  # pipeline stages searched (GPUs per replica: TP x PP)
    ep: list[Annotated[int, Field(ge=1, le=lim.MAX_PARALLEL)]] = Field(default=[1], min_length=1, max_length=64)  # expert parallelism searched (MoE; over the TP GPUs)
    cluster: Cluster = Cluster()
    max_batch: list[Annotated[int, Field(ge=1, le=lim.MAX_BATCH)]] = Field(default=[16, 32, 64, 128, 256, 512], min_length=1, max_length=256)
    chunk_tokens: list[Annotated[int, Field(ge=1, le=lim.MAX_TOKENS)]] | None = Field(default=None, min_length=1, max_length=64)  # chunked-prefill sizes to search
    prices: dict[str, Annotated[float, Field(gt=0, le=lim.MAX_PRICE_USD_H)]] = Field(default_factory=dict)
    engine: str | list[str] | None = None  # serving-engine preset(s) (calc/data/engines.yaml); default: the profiles' own
    serving: Serving = Serving()
    # the engine's own arguments (vLLM: max_num_batched_tokens, gpu_memory_utilization, ...; SGLang:
    # chunked_prefill_size, mem_fraction_static, ...), checked against the engine's preset
    engine_args: dict[str, object] | None = None
    requests: int = Field(default=2000, ge=10)
    seed: int = Field(default=0, ge=0, le=lim.MAX_SEED)
    prefix_cache: PrefixCache | None = None
    disaggregation: Disaggregation | None = None
    speculative: Speculative | None = None

    @property
    def dtype_choices(self) -> list[DtypeChoice]:
        """The dtypes searched: the one block, or each of the list."""
        return self.dtypes if isinstance(self.dtypes, list) else [self.dtypes]

    @property
    def engine_choices(self) -> list[str | None]:
        """The engine presets searched: the one named (None: the profiles' own), or each of the list."""
        return self.engine if isinstance(self.engine, list) else [self.engine]

    @model_validator(mode="after")
    def _check(self):
        for key, values in (("dtypes", self.dtypes), ("engine", self.engine)):
            if isinstance(values, list) and not 1 <= len(values) <= MAX_CHOICES:
                raise ValueError(f"{key}: give 1 to {MAX_CHOICES} of them, got {len(values)}")
        if isinstance(self.engine, list) and len(self.engine) > 1 and self.engine_args:
            raise ValueError("engine_args are one engine's own names: with several engines, set the engine-neutral "
                             "serving: fields instead")
        if self.trace is None and (self.prompt_len is None or self.output_len is None):
            raise ValueError("give prompt_len and output_len distributions, or a trace")
        if self.trace is not None and (self.prompt_len is not None or self.output_len is not None):
            raise ValueError("give a trace or prompt_len/output_len, not both")
        for key, values in (("tp", self.tp), ("pp", self.pp), ("ep", self.ep), ("max_batch", self.max_batch)):
            if any(v < 1 for v in values):
                raise ValueError(f"{key} values must be >= 1")
        if self.chunk_tokens is not None and any(v < 16 for v in self.chunk_tokens):
            raise ValueError("chunk_tokens values must be >= 16 (tokens per step, as serving.max_batched_tokens)")
        dg = self.disaggregation
        if dg is not None:
            if self.arrival.rate_per_s is None:
                raise ValueError("disaggregation needs an open-loop arrival (rate_per_s)")
            for pool in ("prefill", "decode"):
                names = getattr(dg, pool).hardware or []
                unknown = [h for h in names if h not in self.hardware]
                if unknown:
                    raise ValueError(f"disaggregation.{pool}.hardware names {', '.join(unknown)}, not in hardware")
        for hw, price in self.prices.items():
            if hw not in self.hardware:
                raise ValueError(f"prices names {hw!r}, which is not in hardware")
            if not price > 0:
                raise ValueError(f"price for {hw} must be > 0 USD per GPU-hour")
        return self


@dataclass(frozen=True)
class LoadedWorkload:
    """A workload with its model, hardware and sampled requests resolved."""

    spec: Workload
    path: Path | None
    model: ModelSpec
    hardware: tuple[HardwareSpec, ...]
    prompt_len: np.ndarray  # [n] tokens
    output_len: np.ndarray  # [n] tokens
    trace_rows: int | None = None  # rows in the trace, when lengths come from one
    draft: ModelSpec | None = None  # speculative.draft resolved
    # the engine presets searched (engine: a list); ``hardware`` carries the first
    engines: tuple = (None,)

    def user_scheduler_keys(self, hw: HardwareSpec) -> set[str]:
        """The scheduler fields the workload itself sets (``serving:`` keys, ``engine_args``) on ``hw``."""
        keys = set(self.spec.serving.model_fields_set)
        if self.spec.engine_args and hw.preset is not None:
            keys |= set(map_engine_args(hw.preset.name, hw.preset.engine_args, self.spec.engine_args,
                                        self.path or "workload"))
        return keys

    def serving_for(self, hw: HardwareSpec) -> Serving:
        """The scheduler replicas on ``hw`` run: its engine preset's, the workload's ``serving:``
        keys and ``engine_args`` over it (calc.spec.scheduler.resolve_serving)."""
        return resolve_serving(hw.preset, hw.name, hw.reported_memory_gb, self.spec.serving, self.spec.engine_args,
                               self.path or "workload", others=engine_arg_names())

    @property
    def n(self) -> int:
        return int(self.prompt_len.size)

    def price_per_gpu_hour(self, hw: HardwareSpec) -> float | None:
        """USD per GPU-hour: the workload's override, else the profile's, else None (unknown).
        ``hw``: one of ``hardware``, under any engine preset (matched by name)."""
        for ref, h in zip(self.spec.hardware, self.hardware, strict=True):
            if h.name == hw.name and ref in self.spec.prices:
                return self.spec.prices[ref]
        return hw.price.usd_per_hour if hw.price is not None else None

    def under_each_engine(self, hw: HardwareSpec) -> list[HardwareSpec]:
        """``hw`` under each engine preset the workload searches."""
        return [hw if e is None else hw.with_engine(e) for e in self.engines]




def _resolve_ref(ref: str, base: Path | None) -> str:
    """A reference that looks like a path resolves relative to the workload's folder."""
    p = Path(ref)
    looks_like_path = "/" in ref or p.suffix in (".yaml", ".yml", ".json")
    if looks_like_path and base is not None and not p.is_absolute() and exists(base / p):
        return str(base / p)
    return ref


def _resolve_engine(ref: str, base: Path | None) -> str:
    """An engine preset file (PATH or PATH:NAME) resolves relative to the workload's folder."""
    if not is_preset_file(ref):
        return ref
    path, sep, name = (ref, "", "") if ref.endswith(PRESET_SUFFIXES) else ref.rpartition(":")
    return _resolve_ref(path, base) + sep + name


def sample_lengths(spec: Workload, base: Path | None, where: object) -> tuple[np.ndarray, np.ndarray, int | None]:
    """``requests`` (prompt, output) pairs: drawn from the distributions, or resampled
    with replacement from the trace, with ``seed``; and the trace's row count."""
    rng = np.random.default_rng([spec.seed, 1])
    if spec.trace is not None:
        p = Path(spec.trace)
        if not p.is_absolute() and base is not None:
            p = base / p
        if not exists(p):
            raise SpecError(where, "trace", f"no such file {p}")
        T, G = read_trace(p)
        idx = rng.integers(0, T.size, spec.requests)
        return T[idx], G[idx], T.size
    return spec.prompt_len.sample(rng, spec.requests), spec.output_len.sample(rng, spec.requests), None


def load_workload(path: str | Path, requests: int | None = None, prices: dict[str, float] | None = None) -> LoadedWorkload:
    """Read, validate and resolve a workload YAML (``requests`` overrides its count, ``prices``
    its prices per hardware name); every problem is a SpecError."""
    path = Path(path)
    if not exists(path):
        raise SpecError(path, None, "no such file")
    data = read_yaml(path)
    if requests is not None:
        data = {**data, "requests": requests}
    if prices:
        given = data.get("prices") if isinstance(data.get("prices"), dict) else {}
        data = {**data, "prices": {**given, **prices}}
    spec = build(Workload, data, path)
    return resolve(spec, path)


def resolve(spec: Workload, path: Path | None = None) -> LoadedWorkload:
    base = path.parent if path is not None else None
    where = path if path is not None else "workload"
    try:
        model = load_model(_resolve_ref(spec.model, base))
    except SpecError as exc:
        raise SpecError(where, "model", str(exc)) from None
    hardware = []
    for i, ref in enumerate(spec.hardware):
        try:
            hardware.append(load_hardware(_resolve_ref(ref, base)))
        except SpecError as exc:
            raise SpecError(where, f"hardware.{i}", str(exc)) from None
    presets = []
    for i, ref in enumerate(spec.engine_choices):
        key = "engine" if not isinstance(spec.engine, list) else f"engine.{i}"
        try:
            presets.append(None if ref is None else load_engine(_resolve_engine(ref, base), key))
        except SpecError as exc:
            raise SpecError(where, key, exc.problem) from None
        for p in [h.preset for h in hardware] if ref is None else presets[-1:]:
            if p is not None and p.gemv_max_rows:
                raise SpecError(where, key, f"{p.name}: its matrix-vector kernels (up to {p.gemv_max_rows} "
                                "tokens a step) are not in the serving simulator's step timer; plan with a serving "
                                "engine, or size this one with roofline estimate")
    hardware = [h.with_engine(presets[0]) for h in hardware]
    if spec.requests > lim.max_requests():
        raise SpecError(where, "requests", lim.too_many("requests", spec.requests, lim.max_requests(), lim.REQUESTS_ENV))
    # the configurations the planner may simulate: hardware x TP x PP x EP x max batch x chunk size,
    # twice with speculative decoding (searched with and without)
    configs = (len(spec.hardware) * len(presets) * len(spec.dtype_choices) * len(set(spec.tp)) * len(set(spec.pp)) * len(set(spec.ep))
               * len(set(spec.max_batch)) * len(set(spec.chunk_tokens or [0]))
               * (2 if spec.speculative is not None else 1))
    if spec.requests * configs > lim.max_simulated():
        raise SpecError(where, "requests", lim.too_many(
            f"simulated requests ({spec.requests:,} x {configs:,} candidate configurations)",
            spec.requests * configs, lim.max_simulated(), lim.SIMULATED_ENV))
    loaded_probe = LoadedWorkload(spec, path, model, tuple(hardware), np.zeros(0), np.zeros(0), engines=tuple(presets))
    for h in hardware:  # the engine arguments, checked against each GPU's engine now (errors name this file)
        for e in loaded_probe.under_each_engine(h):
            loaded_probe.serving_for(e)
    T, G, rows = sample_lengths(spec, base, where)
    held = T + G - 1
    over = held > model.max_context
    if over.any():
        raise SpecError(where, "trace" if spec.trace else "prompt_len/output_len",
                        f"{int(over.sum())} of {T.size} requests hold more than {model.name}'s max context "
                        f"{model.max_context} positions (prompt + output - 1 up to {int(held.max())}); "
                        "lower the lengths' max")
    pc = spec.prefix_cache
    if pc is not None and pc.shared_tokens and int(T.min()) <= pc.shared_tokens:
        raise SpecError(where, "prefix_cache.shared_tokens",
                        f"{pc.shared_tokens} shared tokens leave nothing of the shortest prompt "
                        f"({int(T.min())} tokens) to compute; prompt_len counts the shared prefix, so its min "
                        "must exceed shared_tokens")
    draft = None
    sp = spec.speculative
    if sp is not None and sp.draft is not None:
        try:
            draft = load_model(_resolve_ref(sp.draft, base))
        except SpecError as exc:
            raise SpecError(where, "speculative.draft", str(exc)) from None
        if draft.vocab_size != model.vocab_size:
            raise SpecError(where, "speculative.draft", f"{draft.name} has {draft.vocab_size} tokens, {model.name} "
                                                        f"{model.vocab_size}: a draft must share the vocabulary")
    return LoadedWorkload(spec, path, model, tuple(hardware), T, G, rows, draft, tuple(presets))
