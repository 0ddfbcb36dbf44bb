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

from calc.accuracy.benchmarks.common import Run, measured, ms, number
from calc.core.errors import SpecError


def is_guidellm(doc) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("benchmarks"), list) and any(
        isinstance(b, dict) and "metrics" in b for b in doc["benchmarks"])


def _dist(metrics: dict, key: str) -> dict:
    d = metrics.get(key) or {}
    return d.get("successful") or {}


def _stat(metrics: dict, key: str, stat: str):
    d = _dist(metrics, key)
    if stat in ("mean", "median"):
        return d.get(stat)
    return (d.get("percentiles") or {}).get(stat)


def read(doc: dict, path: str) -> list[Run]:
    version = (doc.get("metadata") or {}).get("guidellm_version")
    runs = []
    for i, b in enumerate(doc["benchmarks"]):
        where = f"benchmarks[{i}]"
        m = b.get("metrics")
        if not isinstance(m, dict):
            raise SpecError(path, f"{where}.metrics", "missing")
        strategy = (b.get("args") or {}).get("strategy") or (b.get("config") or {}).get("strategy")
        if not isinstance(strategy, dict) or "type_" not in strategy:
            raise SpecError(path, f"{where}.args.strategy", "missing: the load the benchmark applied is unknown")
        kind = strategy["type_"]
        n = number(_dist(m, "request_latency").get("count"))
        conc = rate_ = None
        burstiness = 1.0
        if kind == "synchronous":
            load, conc = "concurrency", 1
        elif kind == "concurrent":
            load, conc = "concurrency", int(strategy["streams"])
        elif kind == "throughput":  # everything at once; with max_concurrency, a closed loop of that many
            cap = number(strategy.get("max_concurrency"))
            load, conc = ("concurrency", int(cap)) if cap else ("burst", int(n) if n else None)
        elif kind in ("constant", "poisson"):
            load, rate_ = "rate", number(strategy.get("rate"))
            burstiness = 1.0 if kind == "poisson" else 1e4  # constant gaps: gamma of a very large shape
        else:
            raise SpecError(path, f"{where}.args.strategy.type_", f"strategy {kind!r} is not modelled")
        requests = ((b.get("requests") or {}).get("successful")) or []
        prompts = tuple(int(r["prompt_tokens"]) for r in requests if number(r.get("prompt_tokens")) is not None)
        outputs = tuple(int(r["output_tokens"]) for r in requests if number(r.get("output_tokens")) is not None)
        # per-request lengths only when every request is there (--output-sampling keeps a sample)
        ok = prompts and len(prompts) == len(outputs) == len(requests) == n
        worker = b.get("worker") or {}
        backend = (b.get("config") or {}).get("backend") or {}
        label = f"{kind}" + (f"@{strategy.get('streams') or strategy.get('rate')}" if kind in (
            "concurrent", "constant", "poisson") else "")
        runs.append(Run(
            file=path, format="guidellm", label=f"{i}:{label}", load=load, concurrency=conc, rate_per_s=rate_,
            burstiness=burstiness, num_requests=int(n) if n else None,
            measured=measured(
                ttft_mean_s=ms(_stat(m, "time_to_first_token_ms", "mean")),
                ttft_p50_s=ms(_stat(m, "time_to_first_token_ms", "median")),
                ttft_p99_s=ms(_stat(m, "time_to_first_token_ms", "p99")),
                itl_mean_s=ms(_stat(m, "inter_token_latency_ms", "mean")),
                e2e_mean_s=number(_stat(m, "request_latency", "mean")),
                e2e_p50_s=number(_stat(m, "request_latency", "median")),
                e2e_p99_s=number(_stat(m, "request_latency", "p99")),
                output_tokens_per_s=number(_stat(m, "output_tokens_per_second", "mean")),
                requests_per_s=number(_stat(m, "requests_per_second", "mean"))),
            prompt_lens=prompts if ok else None, output_lens=outputs if ok else None,
            prompt_len=number(_stat(m, "prompt_token_count", "mean")),
            output_len=number(_stat(m, "output_token_count", "mean")),
            model_id=worker.get("backend_model") or backend.get("model"),
            tool_version=version or ("0.3-era schema (args.strategy)" if "args" in b else None),
        ))
    return runs
