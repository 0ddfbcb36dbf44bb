"""How to launch a planned replica: the engine's own command, with every setting the plan
assumed as a flag, and what each flag encodes.

The engine is the preset's ``launch`` (calc/data/engines.yaml): vLLM (``vllm serve``), SGLang
(``python -m sglang.launch_server``), TensorRT-LLM (``trtllm-serve``, the PyTorch backend, with
the settings it takes only from a file in ``--extra_llm_api_options``), LMDeploy (``lmdeploy serve
api_server``) and TGI (``text-generation-launcher``). The scheduler values are the ones the
simulation ran (calc.spec.scheduler.engine_args_of: the engine's own argument names), so a
run of the command serves what was planned. What a flag cannot say (an EP degree the engine
ties to TP, a quantised checkpoint to fetch) is a note beside the command.

Flag names, as of: vLLM's EngineArgs (dashes; booleans --X / --no-X; compilation settings in
--compilation-config JSON), SGLang's ServerArgs (dashes; switches), ``trtllm-serve --help``
(underscores; TensorRT-LLM 1.0 docs, commands/trtllm-serve), LMDeploy's ``serve api_server``
(--cache-block-seq-len is PytorchEngineConfig.block_size), TGI's launcher (dashes).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, replace

from calc.cost.dtypes import Dtypes
from calc.serving.replica.capacity import Replica

# what each scheduler field the plan ran means, for the flag that sets it
ASSUMES = {
    "max_num_seqs": "running requests at most: the max batch the plan chose",
    "max_batched_tokens": "tokens per step: prefill chunks plus one per decoding request",
    "gpu_memory_utilization": "the memory share the KV pages come from",
    "block_size": "KV page size in tokens",
    "chunked_prefill": "prompts split into chunks across steps",
    "prefill": "prefill policy: chunks mixed with decodes, or prefill steps first",
    "preemption": "out of KV pages: recompute a request later, or reserve its pages to completion",
    "graph_max_batch": "CUDA graphs up to this many tokens per step; larger steps launch eagerly",
    "dp_attention": "attention data-parallel over the TP ranks: each rank caches its own requests' KV",
    "overlap_schedule": "overlap scheduling: the next step is launched before the last one's results are taken",
}


@dataclass(frozen=True)
class Flag:
    name: str  # as the engine spells it, e.g. --max-num-seqs, or a key of the options file
    value: object  # None: a switch
    assumes: str


@dataclass(frozen=True)
class Launch:
    """One replica's command; the plan runs ``replicas`` of them behind a load balancer."""

    engine: str
    program: tuple[str, ...]
    flags: tuple[Flag, ...]
    options_file: dict | None  # TensorRT-LLM's --extra_llm_api_options YAML
    replicas: int
    notes: tuple[str, ...]

    def argv(self) -> list[str]:
        out = list(self.program)
        for f in self.flags:
            out += [f.name] if f.value is None else [f.name, _text(f.value)]
        return out

    def shell(self) -> str:
        """The command as one shell line (quoted), the options file first when there is one."""
        line = shlex.join(self.argv())
        if self.options_file is None:
            return line
        return f"cat > {OPTIONS} <<'EOF'\n{_yaml(self.options_file)}EOF\n{line}"

    def record(self) -> dict:
        return {"engine": self.engine, "argv": self.argv(), "shell": self.shell(), "replicas": self.replicas,
                "options_file": self.options_file, "notes": list(self.notes),
                "flags": [{"flag": f.name, "value": f.value, "assumes": f.assumes} for f in self.flags]}


OPTIONS = "extra_llm_api_options.yaml"


def _text(v) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _yaml(d: dict, indent: int = 0) -> str:
    out = ""
    for k, v in d.items():
        if isinstance(v, dict):
            out += " " * indent + f"{k}:\n" + _yaml(v, indent + 2)
        else:
            out += " " * indent + f"{k}: {_text(v)}\n"
    return out


def model_id(model) -> str:
    """The Hugging Face id of the checkpoint the model spec cites (its config.json), else its name."""
    cfg = str(model.sources.get("cfg", ""))
    prefix = "https://huggingface.co/"
    if cfg.startswith(prefix):
        parts = cfg[len(prefix):].split("/")
        if len(parts) >= 2:
            return f"{parts[0]}/{parts[1]}"
    return model.name


DISAGG = {"vllm": "vLLM's --kv-transfer-config (a KV connector, e.g. NIXL)",
          "sglang": "SGLang's --disaggregation-mode prefill / decode",
          "trtllm": "trtllm-serve disaggregated (context and generation servers)",
          "lmdeploy": "LMDeploy's PD disaggregation (migration backend)", "tgi": "none in TGI"}


def launch(rep: Replica, replicas: int, max_len: int) -> Launch | None:
    """The command for ``replicas`` of ``rep``, requests of up to ``max_len`` positions; None when
    its preset names no serving engine."""
    preset = rep.hw.preset
    if preset is None or preset.launch is None:
        return None
    from calc.spec.scheduler import engine_args_of

    fields = {k: preset.engine_args[k].field for k in preset.engine_args}
    args = engine_args_of(preset, rep.serving, rep.max_batch)
    build = {"vllm": _vllm, "sglang": _sglang, "trtllm": _trtllm, "lmdeploy": _lmdeploy, "tgi": _tgi}[preset.launch]
    cmd = build(rep, replicas, max_len, args, fields)
    chunk = rep.serving.moe_chunk_tokens
    if chunk is not None and rep.model.moe is not None:  # an environment setting, not a flag
        how = (f"VLLM_FUSED_MOE_CHUNK_SIZE={chunk} in the environment" if preset.launch == "vllm" else
               f"{preset.launch} has no setting for it")
        cmd = replace(cmd, notes=(*cmd.notes, f"the plan sized the KV cache with the fused MoE run in chunks of "
                                              f"{chunk:,} tokens ({how})"))
    return cmd


def _sched_flags(args: dict, fields: dict, spell) -> list[Flag]:
    """The scheduler's arguments as flags: ``spell(name, value)`` the flag (a boolean is a switch)."""
    return [Flag(spell(k, v), None if isinstance(v, bool) else v, ASSUMES.get(fields[k], fields[k]))
            for k, v in args.items()]


def _dtype_notes(dt: Dtypes, model, quant_flag: str | None, kv_flag: tuple[str, str] | None, engine: str):
    """Flags and notes for the weight and KV dtypes the plan assumed."""
    flags, notes = [], []
    ships = model.default_weight_dtype
    if dt.weight == "fp8" and ships != "fp8":
        if quant_flag:
            flags.append(Flag(quant_flag, "fp8", "fp8 weights and GEMMs, quantised from the checkpoint at load"))
        else:
            notes.append(f"fp8 weights: serve an FP8 checkpoint of {model.name} ({engine} does not quantise at load)")
    elif dt.weight in ("int8", "int4", "fp4") and dt.weight != ships:
        notes.append(f"{dt.weight} weights: serve a {dt.weight} checkpoint of {model.name} (GPTQ/AWQ/NVFP4); the "
                     "engine reads its quantisation from the checkpoint")
    if dt.kv == "fp8" and model.serving_dtype != "fp8":
        if kv_flag:
            flags.append(Flag(kv_flag[0], kv_flag[1], "an fp8 KV cache (half the bytes of bf16 per position)"))
        else:
            notes.append(f"fp8 KV cache: {engine} has no fp8 KV cache; the plan's KV capacity assumes one")
    return flags, notes


def _vllm(rep, R, max_len, args, fields) -> Launch:
    graph = args.pop("max_cudagraph_capture_size", None)

    def spell(k, v):
        return f"--no-{k.replace('_', '-')}" if v is False else f"--{k.replace('_', '-')}"

    flags = [Flag("--tensor-parallel-size", rep.tp, "TP degree"), Flag("--pipeline-parallel-size", rep.pp, "PP degree"),
             Flag("--max-model-len", max_len, "the longest request's positions (prompt + output)")]
    notes = []
    if rep.ep > 1:
        flags.append(Flag("--enable-expert-parallel", None, f"experts split EP{rep.ep} over the TP GPUs"))
        if rep.ep != rep.tp:
            notes.append(f"vLLM's expert parallelism spans all TP ranks (EP = TP {rep.tp}); the plan assumed EP{rep.ep}")
    flags += _sched_flags(args, fields, spell)
    if graph is not None:
        flags.append(Flag("--compilation-config", json.dumps({"max_cudagraph_capture_size": graph}),
                          ASSUMES["graph_max_batch"]))
    dflags, dnotes = _dtype_notes(rep.dt, rep.model, "--quantization", ("--kv-cache-dtype", "fp8"), "vLLM")
    flags += dflags
    if rep.speculative is not None:
        flags.append(Flag("--speculative-config", json.dumps(_spec_json(rep)),
                          f"speculative decoding: {_spec_assumes(rep)}"))
    return Launch("vllm", ("vllm", "serve", model_id(rep.model)), tuple(flags), None, R, (*notes, *dnotes))


def _spec_json(rep) -> dict:
    s = rep.speculative
    if s.draft is not None:
        return {"model": model_id(s.draft), "num_speculative_tokens": s.k}
    return {"method": "eagle", "model": f"<EAGLE heads for {model_id(rep.model)}>", "num_speculative_tokens": s.k}


def _spec_assumes(rep) -> str:
    s = rep.speculative
    what = f"draft {s.draft.name}" if s.draft is not None else "draft heads"
    return f"{what}, {s.k} tokens drafted per step, acceptance {s.acceptance:g} assumed"


def _sglang(rep, R, max_len, args, fields) -> Launch:
    def spell(k, v):
        return f"--{k.replace('_', '-')}"

    mixed = args.pop("enable_mixed_chunk", False)
    dp = args.pop("enable_dp_attention", False)
    no_overlap = args.pop("disable_overlap_schedule", False)  # a switch: present only to turn it off
    flags = [Flag("--model-path", model_id(rep.model), "the model"), Flag("--tp-size", rep.tp, "TP degree"),
             Flag("--pp-size", rep.pp, "PP degree"), Flag("--context-length", max_len,
                                                          "the longest request's positions (prompt + output)")]
    if rep.ep > 1:
        flags.append(Flag("--ep-size", rep.ep, f"experts split EP{rep.ep}"))
    flags += _sched_flags(args, fields, spell)
    if mixed:
        flags.append(Flag("--enable-mixed-chunk", None, ASSUMES["prefill"] + ": mixed"))
    if dp:
        flags.append(Flag("--enable-dp-attention", None, ASSUMES["dp_attention"]))
    if no_overlap:
        flags.append(Flag("--disable-overlap-schedule", None, ASSUMES["overlap_schedule"] + ": off"))
    dflags, notes = _dtype_notes(rep.dt, rep.model, "--quantization", ("--kv-cache-dtype", "fp8_e4m3"), "SGLang")
    flags += dflags
    if rep.speculative is not None:
        s = rep.speculative
        algo = "STANDALONE" if s.draft is not None else "EAGLE"
        draft = model_id(s.draft) if s.draft is not None else f"<EAGLE heads for {model_id(rep.model)}>"
        flags += [Flag("--speculative-algorithm", algo, f"speculative decoding: {_spec_assumes(rep)}"),
                  Flag("--speculative-draft-model-path", draft, "the draft"),
                  Flag("--speculative-num-steps", s.k, "draft passes per step"),
                  Flag("--speculative-eagle-topk", 1, "one chain of drafts (no tree)"),
                  Flag("--speculative-num-draft-tokens", s.k + 1, "tokens verified per step")]
    return Launch("sglang", ("python", "-m", "sglang.launch_server"), tuple(flags), None, R, tuple(notes))


# TensorRT-LLM arguments trtllm-serve takes as flags; the rest go to the options file, at their key
_TRT_FLAGS = {"max_num_tokens", "max_batch_size", "kv_cache_free_gpu_memory_fraction"}
_TRT_FILE = {"tokens_per_block": ("kv_cache_config", "tokens_per_block"),
             "max_tokens_in_paged_kv_cache": ("kv_cache_config", "max_tokens"),
             "enable_chunked_prefill": (None, "enable_chunked_prefill"),
             "capacity_scheduler_policy": ("scheduler_config", "capacity_scheduler_policy"),
             "cuda_graph_max_batch_size": ("cuda_graph_config", "max_batch_size"),
             "disable_overlap_scheduler": (None, "disable_overlap_scheduler")}


def _trtllm(rep, R, max_len, args, fields) -> Launch:
    flags = [Flag("--backend", "pytorch", "the PyTorch backend (the preset's kernels)"),
             Flag("--tp_size", rep.tp, "TP degree"), Flag("--pp_size", rep.pp, "PP degree"),
             Flag("--max_seq_len", max_len, "the longest request's positions (prompt + output)")]
    if rep.ep > 1:
        flags.append(Flag("--ep_size", rep.ep, f"experts split EP{rep.ep}"))
    flags += [Flag(f"--{k}", v, ASSUMES.get(fields[k], fields[k])) for k, v in args.items() if k in _TRT_FLAGS]
    options: dict = {}
    for k, v in args.items():
        if k in _TRT_FILE:
            section, key = _TRT_FILE[k]
            (options.setdefault(section, {}) if section else options)[key] = v
    dflags, notes = _dtype_notes(rep.dt, rep.model, None, None, "TensorRT-LLM")
    if rep.dt.kv == "fp8" and rep.model.serving_dtype != "fp8":
        options.setdefault("kv_cache_config", {})["dtype"] = "fp8"
        notes = [n for n in notes if "KV" not in n]
    if rep.speculative is not None:
        notes.append(f"speculative decoding ({_spec_assumes(rep)}): set speculative_config in {OPTIONS} "
                     "(TensorRT-LLM's decoding types differ by draft kind)")
    flags.append(Flag("--extra_llm_api_options", OPTIONS, "the settings below, which trtllm-serve reads from a file"))
    return Launch("trtllm", ("trtllm-serve", model_id(rep.model)), tuple(flags), options, R, tuple(notes))


def _lmdeploy(rep, R, max_len, args, fields) -> Launch:
    names = {"block_size": "--cache-block-seq-len"}

    def spell(k, v):
        return names.get(k, f"--{k.replace('_', '-')}")

    flags = [Flag("--backend", "pytorch", "LMDeploy's PyTorch engine (the preset's scheduler)"),
             Flag("--tp", rep.tp, "TP degree"), Flag("--session-len", max_len, "the longest request's positions")]
    flags += _sched_flags(args, fields, spell)
    notes = [f"LMDeploy has no {what}; the plan assumed {n}" for what, n, on in
             (("pipeline parallelism", f"PP{rep.pp}", rep.pp > 1), ("expert parallelism flag", f"EP{rep.ep}", rep.ep > 1))
             if on]
    dflags, dnotes = _dtype_notes(rep.dt, rep.model, None, None, "LMDeploy")
    if rep.speculative is not None:
        notes.append(f"speculative decoding ({_spec_assumes(rep)}): not set by this command")
    return Launch("lmdeploy", ("lmdeploy", "serve", "api_server", model_id(rep.model)), tuple(flags + dflags), None,
                  R, (*notes, *dnotes))


def _tgi(rep, R, max_len, args, fields) -> Launch:
    def spell(k, v):
        return f"--{k.replace('_', '-')}"

    args = dict(args)
    chunking = args.pop("prefill_chunking", True)  # TGI reads it from its environment, not from a flag

    flags = [Flag("--model-id", model_id(rep.model), "the model"), Flag("--num-shard", rep.tp, "TP degree"),
             Flag("--max-total-tokens", max_len, "the longest request's positions (prompt + output)")]
    flags += _sched_flags(args, fields, spell)
    notes = [f"TGI has no {what}; the plan assumed {n}" for what, n, on in
             (("pipeline parallelism", f"PP{rep.pp}", rep.pp > 1), ("expert parallelism flag", f"EP{rep.ep}", rep.ep > 1))
             if on]
    if chunking is False:
        notes.append("PREFILL_CHUNKING=0 in the launcher's environment: a new batch is prefilled in its own step")
    dflags, dnotes = _dtype_notes(rep.dt, rep.model, "--quantize", ("--kv-cache-dtype", "fp8_e4m3fn"), "TGI")
    if rep.speculative is not None:
        notes.append(f"speculative decoding ({_spec_assumes(rep)}): not set by this command")
    return Launch("tgi", ("text-generation-launcher",), tuple(flags + dflags), None, R, (*notes, *dnotes))
