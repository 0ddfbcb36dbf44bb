"""An engine's scheduler as data: the knobs that decide which tokens run in each step.

``Serving`` holds them in the calculator's own (vLLM-like) names; each engine preset
(calc/data/engines.yaml) states its values, cited, and maps the engine's own argument names
onto them (``engine_args``), so a workload or a benchmark run overrides them as one would launch
the engine (``gpu_memory_utilization`` for vLLM, ``mem_fraction_static`` for SGLang, ...).

    gpu_memory_utilization  KV memory share, of the memory ``kv_share_of`` names:
                            total   capacity x share - weights - workspace (vLLM, TGI)
                            static  capacity x share - weights; the workspace lives outside it (SGLang)
                            free    (capacity - weights - workspace) x share (TensorRT-LLM, LMDeploy)
    kv_tokens               tokens the KV cache holds at most (None: what the memory share leaves); the
                            engine keeps the smaller of the two (SGLang max_total_tokens, TensorRT-LLM
                            kv_cache_config max_tokens)
    max_batched_tokens      token budget per step
    max_num_seqs            running sequences (None: bound by the KV pages alone)
    prefill                 mixed: prefill chunks share steps with every decode; prefill_first: a
                            step with prefill work carries no decodes; one_at_a_time: prefill_first,
                            one prompt per step; batched: each iteration prefills every prompt waiting
                            at its start but its last token (in steps of the token budget, no
                            decodes), then one decode step of every running request takes those last
                            tokens and samples the new ones' first tokens (TurboMind before v0.1.0)
    chunked_prefill         a prompt may be split over steps (else it runs whole; one longer than
                            the budget runs alone, in budget-sized pieces)
    unchunked_prefill       the prefill policy when chunked_prefill is false (None: prefill's): vLLM's
                            V0 engine (before 0.8.0) runs whole prompts prefill-first, V1 mixes them
    preemption              recompute: the newest running request is evicted when pages run out and
                            recomputes later; none: a request is admitted only when pages for its
                            whole final context are free (reserved), so nothing is evicted
    graph_max_batch         largest step (tokens) replayed from a CUDA graph (None: no cap; 0: eager)
    eager_launch_us         per kernel launched, what a step beyond the cap pays over a graph replay
    graph_prefill           steps carrying prefill tokens replay graphs too (vLLM's piecewise graphs,
                            by token count); false: graphs hold decode-only steps (TensorRT-LLM,
                            SGLang, LMDeploy, TGI), so a step or pass with prefill launches every
                            kernel eagerly (the simulator's steps, and `estimate`'s prefill)
    moe_kernel              the routed experts' kernel family the run had, a name from the preset's
                            moe_kernels (older builds, by version); None: the chip's grouped GEMM
    weight_only_kernel      the weight-only GEMMs the run had, a name from the preset's
                            weight_only_kernels (older builds, by version); None: its weight_only
    kernel_set              the kernels per operator the run launched, a name from the preset's
                            kernel_sets (older builds, before fusions; by version); None: its kernels
    moe_chunk_tokens        tokens the fused-MoE kernel takes at a time (vLLM VLLM_FUSED_MOE_CHUNK_SIZE;
                            None: a pass's all): a pass of more runs its routed experts in chunks, so
                            their live activations, in the profiling pass that sizes the KV cache too,
                            are a chunk's
    sampler_bytes_per_logit the KV budget's workspace is at least the profiling run's dummy sampler:
                            this many bytes per logit over min(max_num_seqs, max_batched_tokens)
                            requests x the vocabulary (vLLM samples max_num_seqs dummy requests after
                            its profiling pass, with top-k and top-p: fp32 logits, their sorted copy
                            and int64 indices, probabilities); 0: the profile has no sampler run
    non_torch_gib           per GPU, memory outside torch the profile counts against the KV budget
                            (cuBLAS and CUDA state allocated during the profiling run), at TP 1
    non_torch_tp_gib        the same at TP > 1, where NCCL's and the custom all-reduce's buffers add
    dp_attention            attention data-parallel over the TP ranks (SGLang --enable-dp-attention,
                            dp_size = tp_size): each rank holds the whole attention, embedding and
                            lm_head weights and the KV of its own requests (dispatched round-robin),
                            so the replica's KV pages are TP x one rank's (a request's at most one
                            rank's) and each rank replays its own CUDA graphs. Modelled: that memory
                            and the graphs' cap per rank. Not modelled: each rank's attention over
                            its own tokens alone, the ranks' lock-step, and SGLang 0.4.x halving each
                            rank's chunked_prefill_size (steps are costed as TP over all tokens, the
                            token budget the replica's); a shared prefix is cached once, not per rank
    api_servers             processes that take requests in turn before the engine sees them, each
                            for the preset's request overhead (request_overhead_us: receive,
                            tokenise, hand over), so in a burst a request waits for those ahead of it
                            (vLLM's --api-server-count, one tokenizer thread per server); None: the
                            requests' overheads overlap, however many arrive at once. The wait is
                            part of TTFT and e2e; the overhead itself is reported beside them
    overlap_schedule        the scheduler launches step k + 1 before it takes step k's results (SGLang's
                            overlap scheduler): a request that arrives while step k runs is received
                            once k is done, with k + 1 already queued behind it, so it joins step k + 2,
                            one step later than on an engine that schedules between steps; an idle
                            engine takes a request at once (vLLM's async scheduling, on by default from
                            0.14.0; TensorRT-LLM's PyTorch backend from 0.20.0). Both engines turn it off
                            under pipeline parallelism, so the simulator does, and with speculative
                            decoding unless ``overlap_speculative`` keeps it
    overlap_speculative     the speculation the overlap scheduler keeps: none (SGLang, and the simulator
                            for an engine whose rule is not known), or heads (vLLM: EAGLE/MTP draft
                            heads keep async scheduling, a draft model, n-gram or Medusa turn it off;
                            TensorRT-LLM: MTP and one-engine EAGLE-3 keep it, a draft engine does not)
    pp_seqs                 under pipeline parallelism, how max_num_seqs meets the PP micro-batches in
                            flight (the simulator runs one engine per micro-batch, each with 1/PP of the
                            load and of the KV pages): split, the cap is the replica's, each micro-batch
                            holds max_num_seqs / PP (vLLM's V1 engine: one scheduler for every batch in
                            its queue; SGLang: pp_max_micro_batch_size = max_running_requests / pp_size);
                            each, every micro-batch holds max_num_seqs (vLLM V0's virtual engines, one
                            scheduler each; TensorRT-LLM's max_batch_size per micro-batch)

Resolution (``resolve_serving``): these defaults < the preset's ``scheduler`` < its ``by_memory``
rules for the GPU < its ``by_version`` rules for the engine's version (where one is known) < the
workload's ``serving:`` keys that are set < ``engine_args``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from calc.core import limits as lim
from calc.core.errors import SpecError, suggest
from calc.spec.base import SpecModel
from calc.spec.versions import at_most, floor_key, version_key


class Serving(SpecModel):
    """The scheduler's knobs (see the module docstring); the defaults are vLLM V0's main ones."""

    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    kv_share_of: Literal["total", "static", "free"] = "total"
    block_size: int = Field(default=16, ge=1, le=1 << 20)
    kv_tokens: int | None = Field(default=None, ge=1, le=1 << 40)
    max_batched_tokens: int = Field(default=2048, ge=16, le=lim.MAX_TOKENS)
    max_num_seqs: int | None = Field(default=None, ge=1, le=lim.MAX_BATCH)
    watermark: float = Field(default=0.01, ge=0, lt=1)
    prefill: Literal["mixed", "prefill_first", "one_at_a_time", "batched"] = "mixed"
    chunked_prefill: bool = True
    unchunked_prefill: Literal["mixed", "prefill_first", "one_at_a_time", "batched"] | None = None
    preemption: Literal["recompute", "none"] = "recompute"
    graph_max_batch: int | None = Field(default=None, ge=0, le=lim.MAX_TOKENS)
    eager_launch_us: float = Field(default=0.0, ge=0, le=lim.MAX_OVERHEAD_US)
    graph_prefill: bool = True
    moe_kernel: str | None = Field(default=None, min_length=1, max_length=80)
    weight_only_kernel: str | None = Field(default=None, min_length=1, max_length=80)
    kernel_set: str | None = Field(default=None, min_length=1, max_length=80)
    moe_chunk_tokens: int | None = Field(default=None, ge=1, le=lim.MAX_TOKENS)
    sampler_bytes_per_logit: float = Field(default=0.0, ge=0, le=1024)
    non_torch_gib: float = Field(default=0.0, ge=0, le=1024)
    non_torch_tp_gib: float = Field(default=0.0, ge=0, le=1024)
    dp_attention: bool = False
    api_servers: int | None = Field(default=None, ge=1, le=lim.MAX_BATCH)
    overlap_schedule: bool = False
    overlap_speculative: Literal["none", "heads"] = "none"
    pp_seqs: Literal["split", "each"] = "each"

    @property
    def policy(self) -> str:
        """The prefill policy the steps follow: ``unchunked_prefill`` for whole prompts where it is
        set, else ``prefill``."""
        return self.unchunked_prefill if not self.chunked_prefill and self.unchunked_prefill else self.prefill

    @property
    def prefill_launch_us(self) -> float:
        """Per kernel, what a prefill pass pays over a graph replay: the eager launch cost when
        graphs hold decode-only steps, else 0."""
        return 0.0 if self.graph_prefill else self.eager_launch_us

    def eager(self, tokens, prefill: bool = False, ranks: int = 1) -> bool:
        """Whether a step of ``tokens`` (``prefill``: carrying prefill tokens) launches eagerly: past
        the CUDA-graph cap, or with prefill under graphs of decode-only steps. ``ranks``: data-parallel
        attention ranks the step's tokens are spread over, each with its own graphs (the busiest
        holds ceil(tokens / ranks))."""
        per_rank = tokens if ranks == 1 else -(-tokens // ranks)
        return (self.graph_max_batch is not None and per_rank > self.graph_max_batch) or (prefill and not self.graph_prefill)


class EngineArg(SpecModel):
    """One of an engine's own arguments: the scheduler field it sets, and how its value maps
    (``values``: the engine's value -> the field's; ``scale``: the field is value x scale)."""

    field: str
    values: dict[str | bool, Any] | None = None
    scale: float = Field(default=1.0, gt=0)


class _MemoryRange(SpecModel):
    """A rule's range of GPU memory in GB as the device reports it (HardwareSpec.reported_memory_gb,
    what an engine reads): min <= memory < max (unbounded above when max is not given)."""

    min_memory_gb: float = Field(default=0.0, ge=0)
    max_memory_gb: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _not_empty(self):
        if self.max_memory_gb is not None and self.min_memory_gb >= self.max_memory_gb:
            raise ValueError(f"min_memory_gb {self.min_memory_gb:g} >= max_memory_gb {self.max_memory_gb:g}: "
                             "the rule never applies")
        return self

    def in_range(self, memory_gb: float) -> bool:
        return self.min_memory_gb <= memory_gb and (self.max_memory_gb is None or memory_gb < self.max_memory_gb)


class MemoryRule(_MemoryRange):
    """Scheduler values an engine picks by the GPU's memory (GB) and name."""

    names: list[str] = Field(default_factory=list)  # only GPU names containing one of these (empty: any)
    exclude: list[str] = Field(default_factory=list)  # GPU names containing one of these are left out
    set: dict[str, Any]

    def applies(self, hw_name: str, memory_gb: float) -> bool:
        name = hw_name.lower()
        return (self.in_range(memory_gb)
                and (not self.names or any(s in name for s in self.names))
                and not any(s in name for s in self.exclude))


class VersionRule(_MemoryRange):
    """Scheduler values an engine had before a named version, and from ``since`` on where given
    (its source at those versions cited), where those versions chose them by the GPU's memory (GB)
    or the run's tensor-parallel degree (``min_tp``): a rule applies on GPUs in its memory range at
    TP >= min_tp. A version is known only for a benchmark run, whose TP is known too."""

    before: str
    since: str | None = None
    min_tp: int = Field(default=1, ge=1, le=lim.MAX_PARALLEL)
    set: dict[str, Any]

    @field_validator("before", "since")
    @classmethod
    def _parses(cls, v: str | None) -> str | None:
        if v is not None and version_key(v) is None:
            raise ValueError(f"{v!r} is not a version (expected numbers such as 0.1.0)")
        if v is not None and at_most(v):
            raise ValueError(f"{v!r}: a rule's bound is a version, not an upper bound (<=)")
        return v

    @model_validator(mode="after")
    def _since_before(self):
        if self.since is not None and version_key(self.since) >= version_key(self.before):
            raise ValueError(f"since {self.since} is not before {self.before}: the rule never applies")
        return self

    def when(self) -> str:
        """The rule's conditions in words: "from 0.4.1 before 0.4.6, below 26.21 GB, at TP >= 4"."""
        out = (f"from {self.since} " if self.since else "") + f"before {self.before}"
        if self.min_memory_gb > 0:
            out += f", from {self.min_memory_gb:g} GB"
        if self.max_memory_gb is not None:
            out += f", below {self.max_memory_gb:g} GB"
        return out + (f", at TP >= {self.min_tp}" if self.min_tp > 1 else "")

    def applies(self, version: str | None, memory_gb: float = 0.0, tp: int = 1) -> bool:
        """Whether the rule holds for a run at ``version`` whatever release in it the run had: one
        known only as an upper bound holds a rule when the bound is before ``before``, and a rule with
        a ``since`` only where it is a range whose lower bound is ``since`` or later."""
        key = version_key(version) if version else None
        if key is None:
            return False
        floor = floor_key(version)
        if self.since is not None and (floor is None or floor < version_key(self.since)):
            return False
        return key < version_key(self.before) and self.in_range(memory_gb) and tp >= self.min_tp


def _field_problem(field: str, value: Any) -> str | None:
    """Why ``value`` is not a valid ``field`` of Serving (None when it is)."""
    try:
        Serving.model_validate({field: value})
    except ValidationError as exc:
        return exc.errors()[0].get("msg", "invalid").removeprefix("Value error, ")
    return None


def parse_engine_args(pairs, where: object, field: str | None = None) -> dict[str, Any]:
    """KEY=VALUE pairs (an engine's own argument names; dashes read as underscores) as a mapping,
    each value read as YAML (0.5, 2048, true, NAME); a pair without ``=`` is a SpecError naming
    ``where`` and ``field``."""
    import yaml

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise SpecError(where, field, f"{pair!r}: expected KEY=VALUE")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            value = raw
        out[key.strip().replace("-", "_")] = value
    return out


def map_engine_args(engine: str, args_spec: dict[str, EngineArg], args: dict, where: object,
                    prefix: str = "engine_args", others: dict[str, dict] | None = None) -> dict[str, Any]:
    """The Serving fields that ``args`` (the engine's own names) set; every problem a SpecError
    naming ``where`` and ``prefix.key``: an unknown key (with the valid ones, and the engine it
    belongs to when it is another's), a value the engine does not take, a value out of range."""
    out: dict[str, Any] = {}
    valid = ", ".join(sorted(args_spec)) or "none"
    for key, value in args.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        spec = args_spec.get(key)
        if spec is None:
            owners = sorted(e for e, keys in (others or {}).items() if key in keys and e != engine)
            whose = f" ({key} is an argument of {', '.join(owners)}, not {engine})" if owners else ""
            raise SpecError(where, name, f"unknown {engine} argument{whose}; valid keys: {valid}"
                                         f"{suggest(str(key), args_spec)}")
        v = value
        if spec.values is not None:
            table = {str(k).lower(): w for k, w in spec.values.items()}
            if str(value).lower() not in table:
                raise SpecError(where, name, f"{value!r} is not one of {', '.join(map(str, spec.values))}")
            v = table[str(value).lower()]
        elif spec.scale != 1.0:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise SpecError(where, name, f"expected a number, got {value!r}")
            v = value * spec.scale
        problem = _field_problem(spec.field, v)
        if problem is not None:
            raise SpecError(where, name, f"{value!r}: {problem}")
        out[spec.field] = v
    return out


def kernel_of(known: dict, name: str | None, field: str = "moe_kernel", where: object = "serving"):
    """The preset's kernel family ``name`` of the scheduler's ``field`` (moe_kernel: a fused-MoE
    family, weight_only_kernel: a weight-only table; None: none named); an unknown name is a
    one-line error listing the known ones."""
    if name is None:
        return None
    if name not in known:
        raise SpecError(where, field, f"{name!r} is not one of the engine's {field}s "
                                      f"({', '.join(sorted(known)) or 'none'}){suggest(name, known)}")
    return known[name]


def resolve_serving(preset, hw_name: str = "", memory_gb: float = 0.0, block: Serving | None = None,
                    engine_args: dict | None = None, where: object = "engine_args",
                    prefix: str = "engine_args", others: dict[str, dict] | None = None,
                    version: str | None = None, tp: int = 1) -> Serving:
    """The scheduler a replica runs (see the module docstring for the order). ``preset``: an
    EngineSpec or None (the class defaults); ``block``: a workload's ``serving:`` (its set keys count);
    ``version``: the engine's version, where known (a benchmark run's), and ``tp`` the run's
    tensor-parallel degree, for the preset's by_version rules."""
    values: dict[str, Any] = {}
    if preset is not None:
        sched = preset.scheduler
        values.update(sched.model_dump(include=sched.model_fields_set))
        for rule in preset.by_memory:
            if rule.applies(hw_name, memory_gb):
                values.update(rule.set)
        for vrule in preset.by_version:  # in order: a later rule that applies wins
            if vrule.applies(version, memory_gb, tp):
                values.update(vrule.set)
    if block is not None:
        values.update(block.model_dump(include=block.model_fields_set))
    if engine_args:
        if preset is None:
            raise SpecError(where, prefix, "engine arguments need an engine: name one (engine: vllm, ...)")
        values.update(map_engine_args(preset.name, preset.engine_args, engine_args, where, prefix, others))
    try:
        out = Serving.model_validate(values)
    except ValidationError as exc:
        raise SpecError.from_validation(where, exc) from None
    kernel_of(preset.moe_kernels if preset is not None else {}, out.moe_kernel, "moe_kernel", where)
    kernel_of(preset.weight_only_kernels if preset is not None else {}, out.weight_only_kernel, "weight_only_kernel",
              where)
    kernel_of(preset.kernel_sets if preset is not None else {}, out.kernel_set, "kernel_set", where)
    if out.dp_attention and (preset is None or all(a.field != "dp_attention" for a in preset.engine_args.values())):
        name = "no engine" if preset is None else preset.name
        raise SpecError(where, "dp_attention", f"{name} has no data-parallel attention (an engine argument for it: "
                                               "sglang's enable_dp_attention)")
    return out


def engine_args_of(preset, serving: Serving, max_num_seqs: int | None = None) -> dict[str, Any]:
    """The resolved scheduler in the engine's own argument names (for a launch command): one
    argument per field (the first the preset lists; later ones are aliases), at ``serving``'s
    value (scaled back, or the engine's value a value table maps to it)."""
    out, seen = {}, set()
    for key, spec in preset.engine_args.items():
        if spec.field in seen:
            continue
        v = max_num_seqs if spec.field == "max_num_seqs" and max_num_seqs is not None else getattr(serving, spec.field)
        if v is None:
            continue
        if spec.values is not None:
            v = next((engine for engine, ours in spec.values.items() if ours == v), None)
            if v is None:
                continue
        elif spec.scale != 1.0:
            v = v / spec.scale
        seen.add(spec.field)
        out[key] = v
    return out
