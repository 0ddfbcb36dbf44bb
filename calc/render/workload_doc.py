"""The workload format, from its schema: the reference page (reports/workloads/README.md) and
the commented template `roofline plan --init` writes (calc/data/workload-template.yaml).

The page is generated from the pydantic models in calc.spec.workload (every key, its type,
default and bounds, each block's docstring), so it changes when they do; a test regenerates it
and fails if the committed copy differs (`python -m calc.render.workload_doc` rewrites it).
"""

from __future__ import annotations

import inspect
import types
import typing
from importlib import resources
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from calc.core.errors import SpecError
from calc.core.files import atomic_write

TEMPLATE = Path(str(resources.files("calc").joinpath("data", "workload-template.yaml")))
PAGE = Path(__file__).resolve().parents[2] / "reports" / "workloads" / "README.md"


# What each top-level key means (the blocks' own docstrings describe their keys); a test checks
# this covers every field of calc.spec.workload.Workload, so a new key cannot go undocumented.
KEY_HELP = {
    "name": "the plan's name (reports and file names)",
    "description": "free text shown in the report",
    "model": "catalog name (`roofline models`), a model YAML or a Hugging Face config.json",
    "hardware": "candidate accelerators (`roofline hardware`), each searched",
    "dtypes": "weight / KV / compute dtypes (default: the model's); a list of them is searched together",
    "arrival": "the load: `rate_per_s` (open loop) or `concurrency` (closed loop)",
    "prompt_len": "prompt tokens per request: a length distribution (`dist: fixed|uniform|normal|lognormal`)",
    "output_len": "output tokens per request: a length distribution",
    "trace": "a CSV of requests (prompt_len, output_len) instead of the two distributions",
    "slo": "latency targets in seconds",
    "max_gpus": "GPUs in all the plan may use",
    "tp": "tensor-parallel degrees to search",
    "pp": "pipeline stages to search (GPUs per replica: TP x PP)",
    "ep": "expert-parallel degrees to search (MoE; over the TP GPUs)",
    "cluster": "the nodes: GPUs per node and the network between them",
    "max_batch": "engine caps on running sequences to search",
    "chunk_tokens": "chunked-prefill token budgets to search (default: serving.max_batched_tokens)",
    "prices": "USD per GPU-hour by hardware name, over the catalog's; `plan --price NAME=USD` overrides",
    "engine": "an engine preset (`roofline engines`) or a preset file (`compare --fit`), or a list of them searched "
              "together; default: the profile's own",
    "serving": "the engine's scheduler knobs (calc/spec/scheduler.py names them: token budget, running cap, KV share, prefill policy, preemption, CUDA-graph cap), over the preset's",
    "engine_args": "the engine's own argument names over its scheduler (vLLM: max_num_batched_tokens, gpu_memory_utilization; SGLang: chunked_prefill_size, mem_fraction_static; ...), checked against the preset",
    "requests": "requests simulated per configuration",
    "seed": "random seed of the sampled requests",
    "prefix_cache": "a cached shared prefix and per-request hit rate",
    "disaggregation": "also search prefill/decode pools (xP + yD)",
    "speculative": "also search speculative decoding",
}


def write_template(path: Path) -> Path:
    """The template, written atomically to ``path``; an existing file is left alone (exit 2)."""
    if path.exists():
        raise SpecError(path, None, "exists; give another file name (plan --init never overwrites)")
    return atomic_write(path, TEMPLATE.read_text(), "WORKLOAD")


def _models(tp) -> list[type[BaseModel]]:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    return [m for a in typing.get_args(tp) for m in _models(a)]


def _type(tp) -> str:
    """An annotation as a reader writes it: `int`, `list[int]`, `float | null`, `lognormal | ...`."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin is typing.Literal:
        return " or ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _type(a) for a in args)
    if origin is list:
        return f"list[{_type(args[0])}]"
    if origin is dict:
        return f"map {_type(args[0])} -> {_type(args[1])}"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return f"[{tp.__name__}](#{tp.__name__.lower()})"
    return getattr(tp, "__name__", str(tp))


def _bounds(field) -> str:
    out = []
    for m in field.metadata:
        for attr, sign in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="), ("min_length", "length >=")):
            v = getattr(m, attr, None)
            if v is not None:
                out.append(f"{sign} {v:g}" if isinstance(v, float) else f"{sign} {v}")
    return ", ".join(out)


def _default(field) -> str:
    if field.is_required():
        return "**required**"
    if field.default == "":
        return '`""`'
    v = field.default_factory() if field.default_factory is not None else field.default
    if v is PydanticUndefined:
        return ""
    if isinstance(v, BaseModel):
        return "(its defaults)"
    return "null" if v is None else f"`{v}`"


def reference_markdown() -> str:
    """The reference page: the workload's top-level keys, then each block's."""
    from calc.spec import workload as w

    seen: list[type[BaseModel]] = []

    def visit(m):
        if m in seen:
            return
        seen.append(m)
        for f in m.model_fields.values():
            for sub in _models(f.annotation):
                visit(sub)

    visit(w.Workload)
    parts = ["# The workload format (`roofline plan WORKLOAD.yaml`)", "",
             "Generated from the schema (`calc/spec/workload.py`) by `python -m calc.render.workload_doc`;",
             "tests/calc/render/test_workload_doc.py fails when this page and the schema differ.",
             "`roofline plan --init FILE` writes a commented template that plans as it is.", "",
             "Units are in the key names: seconds (`_s`), tokens, requests per second (`_per_s`), GB/s,",
             "microseconds (`_us`), USD per GPU-hour (`prices`). A key the schema does not list is an",
             "error naming the valid keys; every problem in a file is listed at once.", ""]
    for m in seen:
        name = "Workload (the top level)" if m is w.Workload else m.__name__
        parts += [f"## {name}", f'<a id="{m.__name__.lower()}"></a>', ""]
        doc = inspect.getdoc(m) if m.__doc__ else ""
        if doc and not doc.startswith(("Usage docs", "!!!")):
            parts += [" ".join(doc.split()), ""]
        top = m is w.Workload
        parts += ["| key | type | default | bounds |" + (" meaning |" if top else ""),
                  "|---|---|---|---|" + ("---|" if top else "")]
        for key, f in m.model_fields.items():
            parts.append(f"| `{key}` | {_type(f.annotation)} | {_default(f)} | {_bounds(f)} |"
                         + (f" {KEY_HELP.get(key, '')} |" if top else ""))
        parts.append("")
    return "\n".join(parts)


if __name__ == "__main__":  # pragma: no cover
    atomic_write(PAGE, reference_markdown())
    print(f"wrote {PAGE}")
