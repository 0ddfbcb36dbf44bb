"""The KV budget against engines' own startup logs (reports/accuracy/kv_logs.csv).

An engine sizes its KV cache once, at startup, and logs the parts: the total memory it sees,
weights, its profiling run's activation peak, memory outside torch, and what is left for KV (GiB
per GPU, and the tokens that holds). Each row is one such launch. Rows of role ``fit`` are models
with no spec here: the vllm preset's profile terms (calc.spec.scheduler: sampler_bytes_per_logit,
non_torch_gib, non_torch_tp_gib) are the medians of their logged parts (``fitted``). Rows of role
``check`` are models with a spec: their KV budget is predicted (calc.serving.replica.kvbudget,
through the same scenario `roofline compare` builds) and set against the logged one, so the
check rows never informed the terms they test.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from calc.core import text as render
from calc.core.units import GiB
from calc.spec.catalog import shipped

KV_LOGS = shipped("accuracy", "reports/accuracy") / "kv_logs.csv"
SAMPLER_SEQS = 1024  # the logged launches' max_num_seqs (vLLM's default on an 80 GB H100)


@dataclass(frozen=True)
class KVLog:
    id: str
    role: str  # fit | check
    source: str
    engine: str
    engine_version: str
    model: str  # the spec's name (check rows); "" for fit rows
    hf_model: str
    vocab_size: int | None
    gpu: str
    tp: int
    pp: int
    weight_dtype: str
    kv_dtype: str | None
    engine_args: dict
    kv_gib: float
    kv_tokens: int
    activation_gib: float
    non_torch_gib: float


def _arg(v: str):
    try:
        return float(v)
    except ValueError:
        return v


def load(path: Path = KV_LOGS) -> list[KVLog]:
    with open(path, newline="") as fh:
        return [KVLog(r["id"], r["role"], r["source"], r["engine"], r["engine_version"], r["model"], r["hf_model"],
                      int(r["vocab_size"]) if r["vocab_size"] else None, r["gpu"], int(r["tp"]), int(r["pp"]),
                      r["weight_dtype"], r["kv_dtype"] or None,
                      {k: _arg(v) for k, v in (a.split("=", 1) for a in r["engine_args"].split(";") if a)},
                      float(r["kv_gib"]), int(r["kv_tokens"]), float(r["activation_gib"]), float(r["non_torch_gib"]))
                for r in csv.DictReader(fh)]


def fitted(rows: list[KVLog]) -> dict[str, float]:
    """The profile terms as medians of the fit rows' logged parts: bytes per logit of the dummy
    sampler (activation peak / (SAMPLER_SEQS x vocabulary), rows of known vocabulary), and memory
    outside torch at TP 1 and at TP > 1 (GiB per GPU)."""
    fit = [r for r in rows if r.role == "fit"]
    per_logit = [r.activation_gib * GiB / (SAMPLER_SEQS * r.vocab_size) for r in fit if r.vocab_size]
    return {"sampler_bytes_per_logit": float(np.median(per_logit)),
            "non_torch_gib": float(np.median([r.non_torch_gib for r in fit if r.tp == 1])),
            "non_torch_tp_gib": float(np.median([r.non_torch_gib for r in fit if r.tp > 1])),
            "rows": len(fit), "per_logit_rows": len(per_logit)}


PROFILE_TERMS = ("sampler_bytes_per_logit", "non_torch_gib", "non_torch_tp_gib")


def budget(r: KVLog, profile_terms: bool = True):
    """The KV budget (calc.serving.replica.kvbudget.KVBudget) of the row's launch under its engine
    preset as committed (``profile_terms`` False: with the scheduler's PROFILE_TERMS at 0)."""
    from dataclasses import replace

    from calc.accuracy.benchmarks import Run
    from calc.accuracy.compare import replica
    from calc.accuracy.scenario import Conditions, resolve
    from calc.spec.engine import load_engine

    run = Run(file=str(KV_LOGS), format="vllm-serve", label=r.id, load="concurrency", measured={},
              concurrency=1, num_requests=1, prompt_len=1, output_len=1, model_id=r.model)
    opts = Conditions(model=r.model, hardware=r.gpu, engine=r.engine, tp=r.tp, pp=r.pp, gpus=r.tp * r.pp,
                      weight_dtype=r.weight_dtype, kv_dtype=r.kv_dtype, prompt_len=1, output_len=1,
                      engine_args=r.engine_args or None, engine_version=r.engine_version or None)
    sc = resolve(run, opts)
    if not profile_terms:
        sc = replace(sc, serving=sc.serving.model_copy(update=dict.fromkeys(PROFILE_TERMS, 0.0)))
    return replica(sc, load_engine(r.engine), 1).kv


@dataclass(frozen=True)
class KVCheck:
    row: KVLog
    kv_gib: float  # predicted KV budget per GPU
    tokens: int  # predicted tokens the pool holds (every PP engine's pages)
    tokens_comparable: bool

    @property
    def error(self) -> float:
        return self.kv_gib / self.row.kv_gib - 1.0

    @property
    def token_error(self) -> float:
        return self.tokens / self.row.kv_tokens - 1.0 if self.tokens_comparable else math.nan


def check(rows: list[KVLog] | None = None, profile_terms: bool = True) -> list[KVCheck]:
    """Every check row predicted. Tokens are compared where vLLM logs pool / bytes per token: models
    without sliding-window layers (its hybrid allocator logs another count for those)."""
    from calc.spec.catalog import load_model

    out = []
    for r in (rows if rows is not None else load()):
        if r.role != "check":
            continue
        kv = budget(r, profile_terms)
        comparable = not load_model(r.model).attention.sliding_window
        out.append(KVCheck(r, kv.kv_bytes / GiB, kv.pages * kv.block_size * kv.engines, comparable))
    return out


def figures(checks: list[KVCheck]) -> dict:
    e = np.abs([c.error for c in checks])
    t = np.abs([c.token_error for c in checks if c.tokens_comparable])
    return {"rows": len(checks), "median": float(np.median(e)), "max": float(np.max(e)),
            "token_rows": int(t.size), "token_median": float(np.median(t)), "token_max": float(np.max(t))}


def _pct(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{100 * x:+.1f}%"


def section(rows: list[KVLog] | None = None) -> str:
    rows = rows if rows is not None else load()
    fit = fitted(rows)
    checks = check(rows)
    now = figures(checks)
    before = figures(check(rows, profile_terms=False))
    table = render.table(
        [[c.row.model, c.row.tp, c.row.pp, c.row.weight_dtype, c.row.kv_dtype or "-", f"{c.row.kv_gib:.2f}",
          f"{c.kv_gib:.2f}", _pct(c.error), f"{c.row.kv_tokens:,}", f"{c.tokens:,}", _pct(c.token_error)]
         for c in checks],
        ["model", "TP", "PP", "weights", "KV dtype", "logged GiB", "predicted", "err", "logged tokens", "predicted",
         "err"], align="lrrllrrrrrr")
    return f"""## KV cache against engine logs

An engine logs the KV cache it allocates at startup. Each row of [kv_logs.csv](kv_logs.csv) is one
vLLM 0.19.0 launch on an H100 80GB ({len(rows)} launches, llm-d-planner's logs; source per row), its
launch arguments as logged. Rows of {fit['rows']} models with no spec here fit the vllm preset's
profile terms as medians of their logged parts: the dummy sampler's {fit['sampler_bytes_per_logit']:.1f}
bytes per logit ({fit['per_logit_rows']} rows of known vocabulary), memory outside torch
{fit['non_torch_gib']:.2f} GiB per GPU at TP 1 and {fit['non_torch_tp_gib']:.2f} GiB at TP > 1. The
{now['rows']} launches of models with a spec are predicted by `calc.serving.replica.kvbudget` (as
`roofline compare` and `plan` size the cache) and checked against the KV the engine logged:

```
KV GiB per GPU   median |error| {100 * now['median']:.1f}%, max {100 * now['max']:.1f}% ({now['rows']} launches; without the profile terms: {100 * before['median']:.1f}%, max {100 * before['max']:.1f}%)
tokens           median |error| {100 * now['token_median']:.1f}%, max {100 * now['token_max']:.1f}% ({now['token_rows']} launches of models without sliding-window layers)
```

The total a process sees on an H100 80GB, 79.19 GiB, is the profile's `memory_cuda_mib`. At PP > 1
the logged pool is the one predicted (the PP rows above), but the serving simulator runs PP
micro-batch engines, each with 1/PP of the pool and of the arrivals, as vLLM's V0 virtual engines
did; V1 schedules every micro-batch from one pool, so one request may hold all of it (not modelled).

```
{table}
```
"""
