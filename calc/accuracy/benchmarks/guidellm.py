"""GuideLLM's report JSON (`guidellm benchmark ... --output-path benchmarks.json`): a
GenerativeBenchmarksReport, `{"benchmarks": [GenerativeBenchmark, ...]}` (v0.3:
src/guidellm/benchmark/output.py and benchmark.py; v0.7 adds `metadata` with
`guidellm_version` and moves the strategy from `args` to `config`).

Each benchmark's `metrics` holds one StatusDistributionSummary per metric, split by status
(`successful`, `errored`, `incomplete`, `total`); each a DistributionSummary with `mean`,
`median`, `std_dev`, `min`, `max`, `count`, `percentiles` {p001, p01, p05, p10, p25, p50, p75,
p90, p95, p99, p999}. We read the `successful` part:

time_to_first_token_ms   ms, per request                     -> TTFT
inter_token_latency_ms   ms, (last - first token) / (G - 1), weighted by G - 1: its mean is
                         the token-weighted mean gap          -> ITL mean (as vLLM's ITL mean)
request_latency          SECONDS, end to end                  -> e2e
output_tokens_per_second tokens/s over the run                -> output throughput
requests_per_second      requests/s                           -> request throughput
prompt_token_count, output_token_count: the lengths (mean; per request in `requests`).

`time_per_output_token_ms` is left out: v0.3 computes (last - first) / G, v0.7 (last -
start) / G, neither is the TPOT the others report. ITL's percentiles are of per-request
means (weighted), not of single gaps, so only its mean is compared.

The strategy (`type_`): synchronous (one request at a time), concurrent (`streams`
clients), throughput (everything at once; with `max_concurrency`, that many at a time), constant (`rate`,
evenly spaced), poisson (`rate`).
"""

from __future__ import annotations

import calc.accuracy.benchmarks.schema as S
from calc.accuracy.benchmarks.common import CONSTANT_BURSTINESS, Run, measured
from calc.core.errors import SpecError


def is_guidellm(doc) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("benchmarks"), list) and any(
        isinstance(b, dict) and "metrics" in b for b in doc["benchmarks"])


def _dist(metrics: dict, key: str, path, where: str) -> tuple[dict, str]:
    """The `successful` DistributionSummary of one metric, and its field name for messages."""
    name = f"{where}metrics.{key}."
    d = S.mapping(metrics, key, path, f"{where}metrics.")
    return S.mapping(d, "successful", path, name), f"{name}successful."


def _stat(metrics: dict, key: str, stat: str, path, where: str, unit: float | None = None):
    d, name = _dist(metrics, key, path, where)
    if stat not in ("mean", "median"):
        d, name = S.mapping(d, "percentiles", path, name), f"{name}percentiles."
    if unit is not None:
        return S.latency(d, stat, path, name, unit)
    return S.number(d, stat, path, name)


def read(doc: dict, path: str) -> list[Run]:
    version = S.string(S.mapping(doc, "metadata", path), "guidellm_version", path, "metadata.")
    runs = []
    for i, b in enumerate(doc["benchmarks"]):
        where = f"benchmarks[{i}]."
        if not isinstance(b, dict):
            raise SpecError(path, where[:-1], "must be an object")
        m = S.mapping(b, "metrics", path, where, required=True)
        args, config = S.mapping(b, "args", path, where), S.mapping(b, "config", path, where)
        strategy = args.get("strategy") or config.get("strategy")
        if not isinstance(strategy, dict) or "type_" not in strategy:
            raise SpecError(path, f"{where}args.strategy", "missing: the load the benchmark applied is unknown")
        at = f"{where}{'args' if 'strategy' in args else 'config'}.strategy."
        kind = strategy["type_"]
        count_d, count_at = _dist(m, "request_latency", path, where)
        n = S.count(count_d, "count", path, count_at)
        conc = rate_ = None
        burstiness = 1.0
        if kind == "synchronous":
            load, conc = "concurrency", 1
        elif kind == "concurrent":
            load, conc = "concurrency", S.count(strategy, "streams", path, at, low=1, required=True)
        elif kind == "throughput":  # everything at once; with max_concurrency, a closed loop of that many
            cap = S.count(strategy, "max_concurrency", path, at, low=1)
            load, conc = ("concurrency", cap) if cap else ("burst", n or None)
        elif kind in ("constant", "poisson"):
            load = "rate"
            rate_ = S.number(strategy, "rate", path, at, high=1e9, above=True, required=True)
            burstiness = 1.0 if kind == "poisson" else CONSTANT_BURSTINESS  # constant gaps
        else:
            raise SpecError(path, f"{at}type_", f"strategy {str(kind)[:40]!r} is not modelled")
        reqs = S.mapping(b, "requests", path, where).get("successful") or []
        if not isinstance(reqs, list):
            raise SpecError(path, f"{where}requests.successful", "must be a list")
        prompts, outputs = [], []
        for j, r in enumerate(reqs):
            if not isinstance(r, dict):
                raise SpecError(path, f"{where}requests.successful[{j}]", "must be an object")
            at_r = f"{where}requests.successful[{j}]."
            t, g = S.tokens(r, "prompt_tokens", path, at_r), S.tokens(r, "output_tokens", path, at_r)
            if t is not None:
                prompts.append(int(t))
            if g is not None:
                outputs.append(int(g))
        # per-request lengths only when every request is there (--output-sampling keeps a sample)
        ok = prompts and len(prompts) == len(outputs) == len(reqs) == n
        worker = S.mapping(b, "worker", path, where)
        backend = S.mapping(config, "backend", path, f"{where}config.")
        label = f"{kind}" + (f"@{conc if kind == 'concurrent' else f'{rate_:g}'}" if kind in (
            "concurrent", "constant", "poisson") else "")
        runs.append(Run(
            file=path, format="guidellm", label=f"{i}:{label}", load=load, concurrency=conc, rate_per_s=rate_,
            burstiness=burstiness, num_requests=n or None,
            measured=measured(
                ttft_mean_s=_stat(m, "time_to_first_token_ms", "mean", path, where, 1e-3),
                ttft_p50_s=_stat(m, "time_to_first_token_ms", "median", path, where, 1e-3),
                ttft_p99_s=_stat(m, "time_to_first_token_ms", "p99", path, where, 1e-3),
                itl_mean_s=_stat(m, "inter_token_latency_ms", "mean", path, where, 1e-3),
                e2e_mean_s=_stat(m, "request_latency", "mean", path, where, 1.0),
                e2e_p50_s=_stat(m, "request_latency", "median", path, where, 1.0),
                e2e_p99_s=_stat(m, "request_latency", "p99", path, where, 1.0),
                output_tokens_per_s=_stat(m, "output_tokens_per_second", "mean", path, where),
                requests_per_s=_stat(m, "requests_per_second", "mean", path, where)),
            prompt_lens=tuple(prompts) if ok else None, output_lens=tuple(outputs) if ok else None,
            prompt_len=_tokens(m, "prompt_token_count", path, where),
            output_len=_tokens(m, "output_token_count", path, where),
            model_id=S.string(worker, "backend_model", path, f"{where}worker.")
            or S.string(backend, "model", path, f"{where}config.backend."),
            tool_version=version or ("0.3-era schema (args.strategy)" if "args" in b else None),
        ))
    return runs


def _tokens(m, key, path, where):
    d, name = _dist(m, key, path, where)
    return S.tokens(d, "mean", path, name)
