"""One benchmark run as the readers hand it over, and the metric names they map to.

Every reader turns one tool's result into ``Run`` values: what the tool measured (in SI
units: seconds, tokens/s), the load it applied (a fixed batch, N concurrent clients, an
arrival rate, or every request at once), the request lengths it used, and whatever
conditions the file names (model id, GPU, dtypes). What the file leaves out comes from
the command's options or a sidecar YAML (calc.accuracy.scenario); a reader never guesses.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from calc.core.errors import SpecError

# (name, what it is) in display order; "_s" metrics are seconds, "_per_s" rates.
METRICS = (
    ("ttft_mean_s", "TTFT mean"), ("ttft_p50_s", "TTFT p50"), ("ttft_p99_s", "TTFT p99"),
    ("tpot_mean_s", "TPOT mean"), ("tpot_p50_s", "TPOT p50"), ("tpot_p99_s", "TPOT p99"),
    ("itl_mean_s", "ITL mean"), ("itl_p50_s", "ITL p50"), ("itl_p99_s", "ITL p99"),
    ("e2e_mean_s", "e2e mean"), ("e2e_p50_s", "e2e p50"), ("e2e_p99_s", "e2e p99"),
    ("output_tokens_per_s", "output tok/s"), ("requests_per_s", "requests/s"),
    ("prefill_tokens_per_s", "prefill tok/s"), ("decode_tokens_per_s", "decode tok/s"),
    ("tokens_per_s", "prefill+decode tok/s"),
)
METRIC_NAMES = tuple(name for name, _ in METRICS)
LABELS = dict(METRICS)
LOADS = ("batch", "concurrency", "rate", "burst")  # burst: every request sent at once


@dataclass(frozen=True)
class Run:
    """One measured run. ``load``: "batch" (B sequences together: vllm bench latency,
    llama-bench), "concurrency" (a closed loop of N clients), "rate" (open loop, Poisson
    when burstiness is 1, else gamma gaps of shape burstiness), "burst" (all at t = 0).
    Lengths: per request where the file keeps them, else means (``prompt_len``)."""

    file: str
    format: str
    label: str
    measured: dict[str, float]
    load: str
    batch: int | None = None
    concurrency: int | None = None
    rate_per_s: float | None = None
    burstiness: float = 1.0
    num_requests: int | None = None
    prompt_lens: tuple[int, ...] | None = None
    output_lens: tuple[int, ...] | None = None
    prompt_len: float | None = None
    output_len: float | None = None
    depth: int = 0  # llama-bench n_depth: tokens already in the KV cache
    ubatch: int | None = None  # llama-bench n_ubatch: prompt tokens per pass
    model_id: str | None = None
    tool_version: str | None = None
    conditions: dict[str, object] = field(default_factory=dict)  # named by the file: gpu, tp, dtypes, ...
    notes: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        base = Path(self.file).name
        return base if self.label == "run" else f"{base}:{self.label}"


def ms(value) -> float | None:
    """Milliseconds (as the tools write them) to seconds; None for absent values."""
    v = number(value)
    return None if v is None else v / 1000.0


def number(value) -> float | None:
    """A finite number, or None (absent, null, a string that is not a number)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def rate(value) -> float | None:
    """A request rate: a positive number, or None for "inf" / Infinity (everything at once)."""
    if value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


def measured(**values) -> dict[str, float]:
    """The metrics that are present, by our names (unknown names are a bug)."""
    out = {}
    for k, v in values.items():
        if k not in LABELS:
            raise KeyError(k)
        if v is not None:
            out[k] = float(v)
    return out


def per_request(values, path: str, key: str) -> tuple[int, ...] | None:
    """A list of per-request token counts, or None when the file does not keep it."""
    if values is None:
        return None
    if not isinstance(values, list) or not values:
        return None
    try:
        return tuple(int(v) for v in values)
    except (TypeError, ValueError):
        raise SpecError(path, key, "per-request lengths must be whole numbers") from None


def load_documents(path: Path) -> tuple[list, str]:
    """The JSON values in a file: one document, or one per line (JSON lines, as SGLang and
    vLLM's --append-result write). Returns (values, "json" | "jsonl" | "csv")."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(path, None, "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(path, None, f"cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    stripped = text.strip()
    if not stripped:
        raise SpecError(path, None, "empty file: no benchmark result in it")
    if stripped[0] not in "[{":
        return [text], "csv"
    try:
        return [json.loads(stripped)], "json"
    except json.JSONDecodeError as exc:
        if exc.msg != "Extra data":
            raise SpecError(path, None, f"truncated or invalid JSON (line {exc.lineno}, column {exc.colno}: "
                                        f"{exc.msg})") from None
    docs = []
    for i, line in enumerate(stripped.splitlines(), 1):
        if not line.strip():
            continue
        try:
            docs.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise SpecError(path, None, f"truncated or invalid JSON on line {i} (column {exc.colno}: "
                                        f"{exc.msg})") from None
    return docs, "jsonl"


def serving_run(doc: dict, path: str, fmt: str, label: str, e2e: str, **extra) -> Run:
    """A run from the layout vLLM's benchmark_serving wrote and SGLang's bench_serving kept
    (it was adapted from it): `{mean,median,pNN}_<metric>_ms`, `request_rate` (inf: all at
    once), `max_concurrency`, `completed`, token totals, optional per-request lengths.
    ``e2e`` is the tool's name for end-to-end latency (vLLM "e2el", SGLang "e2e_latency")."""
    metrics = {}
    for ours, theirs in (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"), ("e2e", e2e)):
        metrics[f"{ours}_mean_s"] = ms(doc.get(f"mean_{theirs}_ms"))
        metrics[f"{ours}_p50_s"] = ms(doc.get(f"median_{theirs}_ms"))
        metrics[f"{ours}_p99_s"] = ms(doc.get(f"p99_{theirs}_ms"))
    req_rate = rate(doc.get("request_rate"))
    conc = number(doc.get("max_concurrency"))
    completed = number(doc.get("completed"))
    if completed == 0:
        raise SpecError(path, "completed", "0 requests completed: the run measured nothing")
    n = int(completed) if completed else (int(number(doc.get("num_prompts")) or 0) or None)
    notes = []
    if req_rate is not None:
        load = "rate"
        if conc:
            notes.append(f"max_concurrency {int(conc)} also set: simulated as an open loop at the rate only")
    else:
        load = "concurrency" if conc else "burst"

    def mean(key):
        total = number(doc.get(key))
        return total / completed if completed and total is not None else None

    return Run(
        file=path, format=fmt, label=label, load=load,
        measured=measured(**metrics, output_tokens_per_s=number(doc.get("output_throughput")),
                          requests_per_s=number(doc.get("request_throughput"))),
        concurrency=int(conc) if conc else (n if load == "burst" else None), rate_per_s=req_rate, num_requests=n,
        prompt_lens=per_request(doc.get("input_lens"), path, "input_lens"),
        output_lens=per_request(doc.get("output_lens"), path, "output_lens"),
        prompt_len=mean("total_input_tokens"), output_len=mean("total_output_tokens"), notes=tuple(notes), **extra)
