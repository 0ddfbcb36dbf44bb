"""One benchmark run as the readers hand it over, and the metric names they map to.

Every reader turns one tool's result into ``Run`` values: what the tool measured (in SI
units: seconds, tokens/s), the load it applied (a fixed batch, N concurrent clients, an
arrival rate, or every request at once), the request lengths it used, and whatever
conditions the file names (model id, GPU, dtypes). What the file leaves out comes from
the command's options or a sidecar YAML (calc.accuracy.scenario); a reader never guesses.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import calc.accuracy.benchmarks.schema as S
from calc.core import limits
from calc.core.errors import SpecError
from calc.core.files import read_text

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
CONSTANT_BURSTINESS = 1e4  # evenly spaced arrivals, as a gamma of a very large shape (cv = 0.01)


@dataclass(frozen=True)
class Run:
    """One measured run. ``load``: "batch" (B sequences together: vllm bench latency,
    llama-bench), "concurrency" (a closed loop of N clients), "rate" (open loop, Poisson
    when burstiness is 1, else gamma gaps of shape burstiness; with ``ramp_up``, vLLM's rate
    ramp), "burst" (every request at t = 0: vLLM and LMDeploy at request_rate inf with no
    concurrency limit, GuideLLM's throughput strategy, trtllm-bench throughput's default), or
    None when the file does not say (the sidecar's concurrency: or request_rate: gives it).
    Lengths: per request where the file keeps them, else means (``prompt_len``)."""

    file: str
    format: str
    label: str
    measured: dict[str, float]
    load: str | None  # None: the file does not record it (the sidecar or options give it)
    batch: int | None = None
    concurrency: int | None = None
    rate_per_s: float | None = None
    burstiness: float = 1.0
    ramp_up: tuple[str, float, float] | None = None  # vLLM --ramp-up-strategy: (linear | exponential, start, end) req/s
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
    # False: the tool drove the engine in process (vllm bench latency, llama-bench, trtllm-bench,
    # LMDeploy's profile_throughput), so its times hold no request through a server: no
    # request_overhead_us (calc.accuracy.compare.predict)
    served: bool = True

    @property
    def name(self) -> str:
        base = Path(self.file).name
        return base if self.label == "run" else f"{base}:{self.label}"


def measured(**values) -> dict[str, float]:
    """The metrics that are present, by our names (unknown names are a bug). A value of 0 is
    "not measured" (calc.accuracy.benchmarks.schema) and left out."""
    out = {}
    for k, v in values.items():
        if k not in LABELS:
            raise KeyError(k)
        if v is not None and v > 0:
            out[k] = float(v)
    return out


def load_documents(path: Path) -> tuple[list, str]:
    """The JSON values in a file: one document, or one per line (JSON lines, as SGLang and
    vLLM's --append-result write). Returns (values, "json" | "jsonl" | "csv"). The file is read
    by calc.core.files.read_text (a regular file, size-capped, UTF-8); a UTF-8 byte-order mark
    is dropped, as editors on Windows add one."""
    text = read_text(path, "result file").removeprefix("\ufeff")
    stripped = text.strip()
    if not stripped:
        raise SpecError(path, None, "empty file: no benchmark result in it")
    if stripped[0] not in "[{":
        return [text], "csv"
    try:
        return [_json(stripped, path)], "json"
    except json.JSONDecodeError as exc:
        if exc.msg != "Extra data":
            raise SpecError(path, None, f"truncated or invalid JSON (line {exc.lineno}, column {exc.colno}: "
                                        f"{exc.msg})") from None
    docs = []
    for i, line in enumerate(stripped.splitlines(), 1):
        if not line.strip():
            continue
        try:
            docs.append(_json(line, path, f" on line {i}"))
        except json.JSONDecodeError as exc:
            raise SpecError(path, None, f"truncated or invalid JSON on line {i} (column {exc.colno}: "
                                        f"{exc.msg})") from None
    return docs, "jsonl"


def csv_table(text: str, path) -> tuple[list[str], list[list[str]]]:
    """A CSV's header and rows (blank lines dropped); a malformed CSV is one SpecError."""
    try:
        rows = [r for r in csv.reader(io.StringIO(text)) if any(c.strip() for c in r)]
    except csv.Error as exc:
        raise SpecError(path, None, f"malformed CSV ({exc})") from None
    if not rows:
        raise SpecError(path, None, "empty file: no benchmark result in it")
    return [c.strip() for c in rows[0]], rows[1:]


def csv_records(header: list[str], rows: list[list[str]], path) -> list[dict[str, str]]:
    """The rows as header -> value; a row whose length differs from the header's is an error."""
    out = []
    for i, r in enumerate(rows, 2):
        if len(r) != len(header):
            raise SpecError(path, f"line {i}", f"{len(r)} values for {len(header)} columns (truncated row?)")
        out.append(dict(zip(header, r, strict=True)))
    return out


def _json(text: str, path, where: str = ""):
    """json.loads, with the two ways it fails other than a syntax error made into one line."""
    try:
        return json.loads(text)
    except RecursionError:
        raise SpecError(path, None, f"invalid JSON{where}: nested too deep") from None
    except json.JSONDecodeError:
        raise
    except ValueError as exc:  # int() of more than 4,300 digits
        problem = "an integer of more than 4,300 digits" if "digits" in str(exc) else str(exc).splitlines()[0][:120]
        raise SpecError(path, None, f"invalid JSON{where}: {problem}") from None


def serving_run(doc: dict, path: str, fmt: str, label: str, e2e: str, where: str = "", **extra) -> Run:
    """A run from the layout vLLM's benchmark_serving wrote and SGLang's bench_serving and
    LMDeploy's profile_restful_api kept (adapted from it): `{mean,median,pNN}_<metric>_ms`,
    `request_rate` (inf: all at once), `max_concurrency`, `completed`, token totals, optional
    per-request lengths. ``e2e`` is the tool's name for end-to-end latency (vLLM "e2el", SGLang
    "e2e_latency"); ``where`` prefixes field names in messages (a line of a JSON-lines file).
    Every field is checked (calc.accuracy.benchmarks.schema) before it is used."""
    text = extra.pop("text", False)
    metrics = {}
    for ours, theirs in (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"), ("e2e", e2e)):
        metrics[f"{ours}_mean_s"] = S.latency(doc, f"mean_{theirs}_ms", path, where, text=text)
        metrics[f"{ours}_p50_s"] = S.latency(doc, f"median_{theirs}_ms", path, where, text=text)
        metrics[f"{ours}_p99_s"] = S.latency(doc, f"p99_{theirs}_ms", path, where, text=text)
    req_rate = S.rate(doc, "request_rate", path, where, text=text)
    conc = S.count(doc, "max_concurrency", path, where, low=1, text=text)
    completed = S.count(doc, "completed", path, where, text=text)
    if completed == 0:
        raise SpecError(path, f"{where}completed", "0 requests completed: the run measured nothing")
    n = completed or S.count(doc, "num_prompts", path, where, low=1, text=text)
    notes = []
    ramp = None
    if doc.get("ramp_up_strategy") is not None:  # vllm bench serve --ramp-up-strategy: the rate changes per request
        strategy = S.string(doc, "ramp_up_strategy", path, where)
        if strategy not in ("linear", "exponential"):
            raise SpecError(path, f"{where}ramp_up_strategy", f"{strategy!r} is not linear or exponential")
        lo = S.number(doc, "ramp_up_start_rps", path, where, high=1e9, required=True)
        hi = S.number(doc, "ramp_up_end_rps", path, where, high=1e9, required=True)
        if hi < lo or hi <= 0 or (strategy == "exponential" and lo <= 0):
            raise SpecError(path, f"{where}ramp_up_end_rps", f"a ramp from {lo:g} to {hi:g} requests/s is not one "
                                                             "vLLM runs")
        ramp = (strategy, lo, hi)
    if ramp is not None:
        load = "rate"
        notes.append(f"{ramp[0]} ramp-up from {ramp[1]:g} to {ramp[2]:g} requests/s")
    elif req_rate is not None:
        load = "rate"
        if conc:
            notes.append(f"max_concurrency {conc} also set: simulated as an open loop at the rate only")
    else:
        load = "concurrency" if conc else "burst"
    b = doc.get("burstiness")  # vLLM: gamma shape; inf (as vLLM allows) means evenly spaced
    burstiness = CONSTANT_BURSTINESS if isinstance(b, (str, float)) and str(b).lower() in ("inf", "infinity") \
        else S.number(doc, "burstiness", path, where, high=1e6, above=True, text=text)

    def mean(key):
        t = S.total(doc, key, path, where, text=text)
        if not (completed and t is not None):
            return None
        if t / completed > limits.MAX_TOKENS:
            raise SpecError(path, f"{where}{key}", f"{limits.short(t)} tokens over {completed} requests is more "
                                                   f"than {limits.MAX_TOKENS:,} per request")
        return t / completed

    prompts, outputs = S.per_request(doc, "input_lens", path, where), S.per_request(doc, "output_lens", path, where)
    if prompts and outputs and len(prompts) != len(outputs):
        raise SpecError(path, f"{where}input_lens, output_lens", f"{len(prompts)} and {len(outputs)} entries: one "
                                                                 "of each per request")
    failed = S.count(doc, "failed", path, where, text=text) or 0
    if prompts and outputs and len(prompts) == len(outputs) and failed and 0 in outputs:
        keep = [i for i, g in enumerate(outputs) if g > 0]  # failed requests are kept with 0 output tokens
        prompts, outputs = tuple(prompts[i] for i in keep), tuple(outputs[i] for i in keep)
        notes.append(f"{failed} failed requests left out")
    return Run(
        file=path, format=fmt, label=label, load=load,
        measured=measured(**metrics, output_tokens_per_s=S.number(doc, "output_throughput", path, where, text=text),
                          requests_per_s=S.number(doc, "request_throughput", path, where, text=text)),
        concurrency=conc if conc else (n if load == "burst" else None), rate_per_s=req_rate, num_requests=n,
        burstiness=burstiness or 1.0, ramp_up=ramp, prompt_lens=prompts, output_lens=outputs,
        prompt_len=mean("total_input_tokens"), output_len=mean("total_output_tokens"), notes=tuple(notes), **extra)
