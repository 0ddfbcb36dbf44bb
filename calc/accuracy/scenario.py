"""From a benchmark run to the scenario the calculator predicts: model, GPU, split, dtypes,
engine preset, load and lengths.

Each condition comes from the first of: the command's options, the run's sidecar YAML
(``<result file stem>.roofline.yaml`` beside it), what the result file itself names, and
a stated default (listed in ``assumed``). Missing lengths or hardware are one SpecError
naming the file and the missing field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictInt, field_validator

from calc.accuracy.benchmarks import Run
from calc.accuracy.benchmarks.schema import MAX_TEXT
from calc.core import limits
from calc.core.errors import SpecError
from calc.core.files import exists
from calc.cost.parallel import Parallel, check
from calc.spec.catalog import build, load_hardware, load_model, model_catalog, read_yaml
from calc.spec.engine import engine_arg_names, engines, family, load_preset
from calc.spec.scheduler import Serving, map_engine_args, resolve_serving
from calc.spec.versions import version_problem

# What each format measures, run by default: vLLM's tools -> the vllm preset, and so on.
# GenAI-Perf benchmarks whatever serves the endpoint (NIM: TensorRT-LLM or vLLM inside): no preset is implied.
ENGINE_OF_FORMAT = {"vllm-serve": "vllm", "vllm-latency": "vllm", "sglang": "sglang", "llama-bench": "llama.cpp",
                    "guidellm": "default", "genai-perf": "default", "trtllm-bench": "trtllm",
                    "lmdeploy-restful": "lmdeploy", "lmdeploy-throughput": "lmdeploy"}
# Hugging Face ids that serving tools write as model_id, for catalog models whose source
# config is a sibling checkpoint (base vs Instruct share the shapes). Mistral-7B v0.3 differs
# from the catalog's v0.1 only in its vocabulary (32768 vs 32000 rows), as the accuracy table counts it.
HF_IDS = {"meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b", "meta-llama/Meta-Llama-3.1-8B-Instruct": "llama-3.1-8b",
          "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b",
          "meta-llama/Meta-Llama-3.1-70B-Instruct": "llama-3.1-70b",
          "meta-llama/Llama-3.1-405B-Instruct": "llama-3.1-405b", "meta-llama/Meta-Llama-3-8B-Instruct": "llama-3-8b",
          "meta-llama/Meta-Llama-3-70B-Instruct": "llama-3-70b", "mistralai/Mistral-7B-Instruct-v0.1": "mistral-7b",
          "mistralai/Mistral-7B-Instruct-v0.3": "mistral-7b", "mistralai/Mixtral-8x7B-Instruct-v0.1": "mixtral-8x7b",
          "Qwen/Qwen2.5-7B-Instruct": "qwen2.5-7b"}


def _number_only(v):
    """YAML's true/false and quoted strings are not numbers (pydantic's lax mode would take them)."""
    if isinstance(v, (bool, str)):
        raise ValueError(f"must be a number, got {'true/false' if isinstance(v, bool) else repr(v)[:30]}")
    return v


StrictNumber = Annotated[float, BeforeValidator(_number_only)]


class Conditions(BaseModel):
    """What a sidecar YAML (or the options) may state about a run."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    model: str | None = Field(default=None, max_length=MAX_TEXT)
    hardware: str | None = Field(default=None, max_length=MAX_TEXT)
    engine: str | None = Field(default=None, max_length=MAX_TEXT)
    tp: StrictInt | None = Field(default=None, ge=1, le=limits.MAX_PARALLEL)
    pp: StrictInt | None = Field(default=None, ge=1, le=limits.MAX_PARALLEL)
    ep: StrictInt | None = Field(default=None, ge=1, le=limits.MAX_PARALLEL)  # expert-parallel GPUs (of the TP ones)
    gpus: StrictInt | None = Field(default=None, ge=1, le=limits.MAX_PARALLEL)
    weight_dtype: str | None = Field(default=None, max_length=64)
    kv_dtype: str | None = Field(default=None, max_length=64)
    compute_dtype: str | None = Field(default=None, max_length=64)
    batch: StrictInt | None = Field(default=None, ge=1, le=limits.MAX_BATCH)
    prompt_len: StrictNumber | None = Field(default=None, gt=0, le=limits.MAX_TOKENS)
    output_len: StrictNumber | None = Field(default=None, gt=0, le=limits.MAX_TOKENS)
    max_num_seqs: StrictInt | None = Field(default=None, ge=1, le=limits.MAX_BATCH)
    # the load, for files that do not record it (a GenAI-Perf CSV, trtllm-bench --concurrency N)
    concurrency: StrictInt | None = Field(default=None, ge=1, le=limits.MAX_BATCH)
    request_rate: StrictNumber | None = Field(default=None, gt=0, le=1e9)
    # the engine's own arguments (vLLM: max_num_batched_tokens, gpu_memory_utilization, ...), checked
    # against the run's engine preset (calc/data/engines.yaml engine_args)
    engine_args: dict[str, Any] | None = None
    # the engine's version (0.6.3, 0.1.0a1, ...): the preset's scheduler as that version had it
    # (calc/data/engines.yaml by_version); unknown: the preset's own
    engine_version: str | None = Field(default=None, max_length=MAX_TEXT)
    # the first N requests' prompts were in the server's prefix cache when they arrived (a benchmark
    # that re-sends an earlier run's prompts to the same server: vLLM's random dataset draws the same
    # prompts for the same seed); each computes only what the cache cannot give (its last token)
    cached_requests: StrictInt | None = Field(default=None, ge=0, le=limits.MAX_BATCH)

    @field_validator("engine_version")
    @classmethod
    def _version(cls, v: str | None) -> str | None:
        problem = None if v is None else version_problem(v)
        if problem:
            raise ValueError(problem)
        return v


@dataclass(frozen=True)
class Scenario:
    """One run, ready to predict. Lengths are per request (constant arrays when the run
    gives only means); ``measured`` may add metrics derived from the run's own numbers."""

    run: Run
    model: str
    hardware: str
    engine: str
    tp: int
    pp: int
    gpus: int
    weight_dtype: str | None
    kv_dtype: str | None
    compute_dtype: str | None
    batch: int | None
    max_num_seqs: int  # the scheduler's running cap (0: bound by the KV pages alone)
    prompt_lens: np.ndarray
    output_lens: np.ndarray
    measured: dict[str, float]
    assumed: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    sidecar: str | None = None
    origin: dict[str, str] = field(default_factory=dict)  # condition -> option | sidecar | file | default
    serving: Serving = Serving()  # the engine's scheduler, with the run's engine arguments over it
    ep: int = 1  # expert-parallel GPUs of the TP ones (MoE layers), calc.cost.parallel
    attention: str | None = None  # fused | unfused where the file says how attention ran (llama-bench flash_attn)
    engine_version: str | None = None  # the engine's version (option, sidecar or file): the preset's by_version rules
    cached_requests: int = 0  # the first N requests' prompts found in the prefix cache (Conditions.cached_requests)

    @property
    def constant_lengths(self) -> bool:
        return bool(np.all(self.prompt_lens == self.prompt_lens[0]) and np.all(self.output_lens == self.output_lens[0]))


def sidecar_path(result: str | Path) -> Path:
    p = Path(result)
    return p.with_name(p.stem + ".roofline.yaml")


def read_sidecar(result: str | Path) -> tuple[Conditions, str | None]:
    path = sidecar_path(result)
    if not path.is_file():
        return Conditions(), None
    return build(Conditions, read_yaml(path) or {}, path), str(path)


def resolve_model_id(model_id: str | None) -> str | None:
    """A catalog name for a tool's model id: the name itself, an exact Hugging Face id of a
    catalog model's source config, or one of HF_IDS; a local path to a config works too."""
    if not model_id:
        return None
    catalog = model_catalog()
    if model_id in catalog:
        return model_id
    if model_id in HF_IDS:
        return HF_IDS[model_id]
    for name, cfg in _source_configs(tuple(sorted(catalog.items()))):
        if cfg.startswith(f"https://huggingface.co/{model_id}/"):
            return name
    if exists(model_id):  # a name too long to look up counts as existing: load_model says why
        try:
            load_model(model_id)
        except SpecError:
            return None
        return model_id
    return None


@lru_cache(maxsize=4)
def _source_configs(catalog: tuple) -> tuple[tuple[str, str], ...]:
    """(name, sources.cfg URL) of every catalog model, read once per catalog."""
    return tuple((name, str(((read_yaml(path) or {}).get("sources") or {}).get("cfg", ""))) for name, path in catalog)


def resolve(run: Run, options: Conditions, memo: dict | None = None) -> Scenario:
    """The run's scenario. ``memo``: a dict shared by the runs of one compare, so that a file's
    sidecar, a model id and a model spec are looked up once, not once per run."""
    memo = {} if memo is None else memo

    def once(key, make):
        if key not in memo:
            memo[key] = make()
        return memo[key]

    side, side_path = once(("sidecar", run.file), lambda: read_sidecar(run.file))
    hint = side_path or str(sidecar_path(run.file))
    origin: dict[str, str] = {}
    assumed: list[str] = []

    def pick(key, from_file=None, default=None, describe=None, quiet=False):
        for where, value in (("option", getattr(options, key)), ("sidecar", getattr(side, key)),
                             ("file", from_file)):
            if value is not None:
                origin[key] = where
                return value
        if default is not None:
            origin[key] = "default"
            if not quiet:
                assumed.append(describe or f"{key} {default}")
        return default

    cond = run.conditions
    run = _load(run, options, side, hint)
    model = pick("model", once(("id", run.model_id), lambda: resolve_model_id(run.model_id)))
    if model is None:
        named = f" (it names {run.model_id!r}, not a catalog model)" if run.model_id else ""
        raise SpecError(run.file, "model", f"no model: the result does not name one{named}; give --model or "
                                           f"model: in {hint}")
    spec = once(("model", model), lambda: load_model(model))
    hardware = pick("hardware", cond.get("hardware"))
    if hardware is None:
        raise SpecError(run.file, "hardware", f"no GPU: the result does not name one the catalog knows; give "
                                              f"--hardware or hardware: in {hint}")
    preset = ENGINE_OF_FORMAT[run.format]
    why = f"from the {run.format} format"
    if preset not in engines():  # a preset this catalog does not have yet
        preset, why = "default", f"no {preset} preset in the catalog"
    engine = pick("engine", None, preset, f"engine preset {preset} ({why})")
    n_dev = int(cond.get("gpus") or 1)
    split = cond.get("split_mode")
    one_gpu = 1 if cond.get("gpus") == 1 else None  # llama-bench lists the devices it ran on
    tp = int(pick("tp", cond.get("tp") or (n_dev if split == "row" and n_dev > 1 else one_gpu), 1, "TP 1"))
    pp = int(pick("pp", cond.get("pp") or (n_dev if split == "layer" and n_dev > 1 else None), 1, quiet=True))
    ep = int(pick("ep", None, 1, quiet=True))
    try:
        check(spec, Parallel(tp, pp, ep))  # the split estimate refuses, refused here too
    except SpecError as exc:
        raise SpecError(run.file, f"{run.label}: {(exc.path or 'tp').lstrip('-')}", exc.problem) from None
    gpus = int(pick("gpus", None, tp * pp, quiet=True))
    weight = pick("weight_dtype", cond.get("weight_dtype"))
    kv = pick("kv_dtype", cond.get("kv_dtype"))
    compute = pick("compute_dtype")
    if weight is None:
        assumed.append("weights at the model's dtype")
    if kv is None:
        assumed.append("KV cache at the model's dtype")
    layers = cond.get("n_gpu_layers")
    if layers is not None and layers < spec.num_layers:
        raise SpecError(run.file, f"{run.label}: n_gpu_layers", f"{int(layers)} of "
                        f"{spec.num_layers} layers offloaded: a CPU/GPU split is not modelled")
    prompts, outputs, notes, batch = _lengths(run, side, options, hint)
    if run.format == "llama-bench":
        held, what = run.depth + (run.prompt_len or 0) + (run.output_len or 0), "n_depth + n_prompt + n_gen"
    else:
        held, what = float(np.max(prompts + outputs)) - 1, "prompt + output - 1"
    if held > spec.max_context:
        raise SpecError(run.file, f"{run.label}: {what}", f"{held:,.0f} positions exceed {spec.name}'s max context "
                                                          f"{spec.max_context:,}")
    measured = dict(run.measured)
    if run.format == "vllm-latency" and "e2e_mean_s" in measured:
        measured["output_tokens_per_s"] = batch * float(outputs[0]) / measured["e2e_mean_s"]
        notes.append("output tok/s = batch x output_len / avg_latency (as published tables quote it)")
    version = pick("engine_version", cond.get("engine_version"), quiet=True)
    cached = int(pick("cached_requests", None, 0, quiet=True))
    sent = prompts.size if prompts.size > 1 else (run.num_requests or 1)
    if cached > sent:
        raise SpecError(run.file, f"{run.label}: cached_requests", f"{cached} cached of {sent} requests")
    if cached and run.load not in ("burst", "rate"):
        raise SpecError(run.file, f"{run.label}: cached_requests", f"cached prompts are modelled for bursts and "
                                                                   f"open-loop runs, not a {run.load} load")
    if cached:
        notes.append(f"the first {cached} requests' prompts found in the prefix cache (each computes its last token)")
    serving = _serving(engine, hardware, options, side, side_path or hint, cond.get("max_num_seqs"), tp, version)
    if run.load in ("rate", "burst") and not (options.max_num_seqs or side.max_num_seqs or options.engine_args
                                              or side.engine_args):
        cap = serving.max_num_seqs
        assumed.append(f"{engine}'s scheduler: " + (f"up to {cap} running" if cap else "running bound by KV pages")
                       + f", {serving.max_batched_tokens:,} tokens per step")
    return Scenario(run=run, model=model, hardware=hardware, engine=engine, tp=tp, pp=pp, ep=ep, gpus=gpus,
                    weight_dtype=weight, kv_dtype=kv, compute_dtype=compute, batch=batch,
                    max_num_seqs=int(serving.max_num_seqs or 0), prompt_lens=prompts, output_lens=outputs,
                    measured=measured, assumed=tuple(assumed), notes=tuple([*run.notes, *notes]), sidecar=side_path,
                    origin=origin, serving=serving, attention=cond.get("attention"), engine_version=version,
                    cached_requests=cached)


def _scheduler_preset(engine: str):
    """The preset whose scheduler a run's engine has: the named one, or for a preset file (a refit
    that states no scheduler) the preset of the engine it was fitted from."""
    preset = load_preset(engine)
    if not preset.scheduler.model_fields_set and family(preset) in engines():
        return engines()[family(preset)].model_copy(update={"name": preset.name})
    return preset


def _serving(engine: str, hardware: str, options: Conditions, side: Conditions, side_where: str,
             file_seqs: int | None = None, tp: int = 1, version: str | None = None) -> Serving:
    """The run's scheduler: the preset's on the run's GPU (at its ``version`` and TP), then the running
    cap the result file records (trtllm-bench's max batch size, LMDeploy's bs), then the sidecar's
    engine_args and max_num_seqs, then the options' (each problem a one-line error naming where it
    came from)."""
    preset = _scheduler_preset(engine)
    hw = load_hardware(hardware)
    base = resolve_serving(preset, hw.name, hw.reported_memory_gb, version=version, tp=tp)
    others = engine_arg_names()
    family_name = preset.name.removesuffix("-fit")
    upd: dict[str, Any] = {} if file_seqs is None else {"max_num_seqs": int(file_seqs)}
    if side.max_num_seqs is not None:
        upd["max_num_seqs"] = side.max_num_seqs
    if side.engine_args:
        upd |= map_engine_args(family_name, preset.engine_args, side.engine_args, side_where, "engine_args", others)
    if options.max_num_seqs is not None:
        upd["max_num_seqs"] = options.max_num_seqs
    if options.engine_args:
        upd |= map_engine_args(family_name, preset.engine_args, options.engine_args, "--engine-arg", "", others)
    try:
        return Serving.model_validate({**base.model_dump(), **upd})
    except ValueError as exc:  # pydantic's ValidationError: a combination no single value shows
        raise SpecError.from_validation(side_where, exc) from None


def _load(run: Run, options: Conditions, side: Conditions, hint: str) -> Run:
    """The run with its load: the options' or the sidecar's concurrency / request_rate when
    given (for files that do not record it), else the file's; none at all is an error."""
    for given in (options, side):
        if given.concurrency is not None and given.request_rate is not None:
            raise SpecError(hint, "concurrency, request_rate", "give one of them, not both")
        if given.concurrency is not None:
            return replace(run, load="concurrency", concurrency=given.concurrency, rate_per_s=None, ramp_up=None)
        if given.request_rate is not None:
            return replace(run, load="rate", rate_per_s=float(given.request_rate), concurrency=None, ramp_up=None)
    if run.load is None:
        raise SpecError(run.file, f"{run.label}: load", f"a {run.format} file does not record its load; give "
                                                        f"concurrency: or request_rate: in {hint}")
    return run


def _lengths(run: Run, side: Conditions, options: Conditions, hint: str):
    """Per-request lengths: the run's own, its means, or the sidecar's (for tools that do not
    save them); a run with none is an error naming the file."""
    notes = []
    batch = options.batch or side.batch or run.batch
    T = options.prompt_len or side.prompt_len
    G = options.output_len or side.output_len
    if run.format == "llama-bench":
        return np.array([run.prompt_len]), np.array([run.output_len]), notes, 1
    if run.load == "batch":
        missing = [k for k, v in (("batch", batch), ("prompt_len", T), ("output_len", G)) if v is None]
        if missing:
            raise SpecError(run.file, ", ".join(missing), f"a {run.format} result does not record its batch "
                                                          f"size or lengths; give them in {hint}")
        return np.array([round(T)]), np.array([round(G)]), notes, int(batch)
    if T is None and G is None and run.prompt_lens and run.output_lens:
        return np.asarray(run.prompt_lens, float), np.maximum(np.asarray(run.output_lens, float), 1), notes, None
    T = T or run.prompt_len
    G = G or run.output_len
    if T is None or G is None or not math.isfinite(T) or not math.isfinite(G):
        raise SpecError(run.file, f"{run.label}: lengths", "no prompt/output lengths (no input_lens/output_lens "
                                                           f"and no token totals); give prompt_len and output_len in "
                                                           f"{hint}")
    if not (run.prompt_lens and run.output_lens):
        notes.append(f"lengths: means {T:.0f} / {G:.0f} for every request (per-request lengths not saved)")
    return np.array([max(round(T), 1)], float), np.array([max(round(G), 1)], float), notes, None
