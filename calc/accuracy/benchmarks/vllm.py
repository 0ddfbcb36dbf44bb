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

The current layout (vllm/benchmarks/serve.py @ 009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1,
main_async and benchmark()) adds: `failed` (failed requests stay in the per-request lists with
0 output tokens: left out here), `start_times`, `latencies` and `queue_times` with
--save-detailed, `e2el_including_client_queue` and `client_queue_time` metrics when
max_concurrency is set, and a rate ramp: with `--ramp-up-strategy linear|exponential`,
`ramp_up_start_rps` and `ramp_up_end_rps` are written, `request_rate` stays "inf", and request
i of n is sent at rate start + (end - start) i / (n - 1) (linear) or start (end / start)^(i /
(n - 1)) (exponential), gamma gaps of shape `burstiness` at that rate (get_request). Without a
ramp the gaps are rescaled so the last request is sent at n / rate; request_rate inf with no
max_concurrency sends every request at t = 0 (a burst).

Latency result (vllm/benchmarks/latency.py): `avg_latency`, `std_latency`, `latencies` and
`percentiles` ({"10": s, ..., "99": s}), all in seconds, one llm.generate() of
--batch-size prompts of --input-len tokens, each generating --output-len; the file does
not record those three arguments (defaults 8, 32, 128), so they come from a sidecar.
"""

from __future__ import annotations

import calc.accuracy.benchmarks.schema as S
from calc.accuracy.benchmarks.common import Run, measured, serving_run
from calc.core.errors import SpecError


def is_serve(doc) -> bool:
    return isinstance(doc, dict) and ("model_id" in doc or "date" in doc) and any(
        k in doc for k in ("output_throughput", "mean_ttft_ms", "request_throughput"))


def is_latency(doc) -> bool:
    return isinstance(doc, dict) and "avg_latency" in doc and "latencies" in doc


def read_serve(doc: dict, path: str, index: int, count: int) -> Run:
    where = f"line {index + 1}: " if count > 1 else ""
    return serving_run(doc, path, "vllm-serve", f"run {index + 1}" if count > 1 else "run", "e2el", where,
                       model_id=S.string(doc, "model_id", path, where),
                       tool_version=S.string(doc, "vllm_version", path, where) or S.string(doc, "version", path, where),
                       conditions={k: S.string(doc, k, path, where) for k in ("backend", "label", "date")
                                   if doc.get(k) is not None})


def read_latency(doc: dict, path: str, index: int, count: int) -> Run:
    where = f"line {index + 1}: " if count > 1 else ""
    pct = S.mapping(doc, "percentiles", path, where)
    avg = S.latency(doc, "avg_latency", path, where, 1.0)
    if not avg:
        raise SpecError(path, f"{where}avg_latency", f"must be a time of more than 0 s, got {doc.get('avg_latency')!r}")
    return Run(
        file=path, format="vllm-latency", served=False, label=f"run {index + 1}" if count > 1 else "run", load="batch",
        measured=measured(e2e_mean_s=avg, e2e_p50_s=S.latency(pct, "50", path, f"{where}percentiles.", 1.0),
                          e2e_p99_s=S.latency(pct, "99", path, f"{where}percentiles.", 1.0)),
        notes=("batch size and lengths are not in the file (vllm bench latency does not save its "
               "arguments)",),
    )
