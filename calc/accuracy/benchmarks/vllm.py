"""vLLM's benchmark results: `vllm bench serve --save-result` (and the older
benchmarks/benchmark_serving.py) and `vllm bench latency --output-json`.

Serve result (vllm/benchmarks/serve.py, the dict `result` of benchmark() merged into
`result_json` in main): times in milliseconds as `{mean,median,std,pNN}_{ttft,tpot,itl,e2el}_ms`
(which of ttft/tpot/itl/e2el appear follows --percentile-metrics; NN follows
--metric-percentiles, default 99); `request_throughput` requests/s, `output_throughput`
output tokens/s; `total_input_tokens`, `total_output_tokens`, `completed`; the traffic as
`request_rate` (a number, or the string "inf"), `burstiness` (gamma shape; 1 = Poisson) and
`max_concurrency` (null: unlimited); `model_id`. Per-request `input_lens`/`output_lens` are
kept with --save-detailed (the older script always kept them). TPOT there is per request
(latency - ttft) / (output_len - 1), averaged over requests; ITL is every gap between
streamed tokens, so its mean is the token-weighted one.

Latency result (vllm/benchmarks/latency.py): `avg_latency`, `std_latency`, `latencies` and
`percentiles` ({"10": s, ..., "99": s}), all in seconds, one llm.generate() of
--batch-size prompts of --input-len tokens, each generating --output-len; the file does
not record those three arguments (defaults 8, 32, 128), so they come from a sidecar.
"""

from __future__ import annotations

from calc.accuracy.benchmarks.common import Run, measured, number, serving_run


def is_serve(doc) -> bool:
    return isinstance(doc, dict) and ("model_id" in doc or "date" in doc) and any(
        k in doc for k in ("output_throughput", "mean_ttft_ms", "request_throughput"))


def is_latency(doc) -> bool:
    return isinstance(doc, dict) and "avg_latency" in doc and "latencies" in doc


def read_serve(doc: dict, path: str, index: int, count: int) -> Run:
    return serving_run(doc, path, "vllm-serve", f"run {index + 1}" if count > 1 else "run", "e2el",
                       burstiness=number(doc.get("burstiness")) or 1.0, model_id=doc.get("model_id"),
                       tool_version=doc.get("vllm_version") or doc.get("version"),
                       conditions={k: doc[k] for k in ("backend", "label", "date") if doc.get(k) is not None})


def read_latency(doc: dict, path: str, index: int, count: int) -> Run:
    pct = doc.get("percentiles") or {}
    return Run(
        file=path, format="vllm-latency", label=f"run {index + 1}" if count > 1 else "run", load="batch",
        measured=measured(e2e_mean_s=number(doc.get("avg_latency")), e2e_p50_s=number(pct.get("50")),
                          e2e_p99_s=number(pct.get("99"))),
        notes=("batch size and lengths are not in the file (vllm bench latency does not save its "
               "arguments)",),
    )
