"""SGLang's `python -m sglang.bench_serving` results: one JSON object per line, appended to
--output-file (python/sglang/bench_serving.py, the dict `result` at the end of benchmark()).

Times in milliseconds: `{mean,median,std,p99}_ttft_ms`, `{mean,median,std,p99}_tpot_ms`,
`{mean,median,std,p95,p99}_itl_ms`, `{mean,median,std,p99}_e2e_latency_ms`; rates
`request_throughput` (requests/s), `input_throughput`, `output_throughput` (tokens/s);
`completed`, `total_input_tokens`, `total_output_tokens`; the traffic as `request_rate`
(a float; the default inf is written by json.dumps as `Infinity`) and `max_concurrency`
(null: unlimited); the dataset arguments `dataset_name`, `random_input_len`,
`random_output_len`, `random_range_ratio`. Per-request `input_lens`/`output_lens` only with
--output-details. No model id is written: the model comes from --model or a sidecar.
Arrivals at a finite rate are Poisson (np.random.exponential in get_request).
"""

from __future__ import annotations

import calc.accuracy.benchmarks.schema as S
from calc.accuracy.benchmarks.common import Run, serving_run


def is_sglang(doc) -> bool:
    return isinstance(doc, dict) and "output_throughput" in doc and (
        "mean_e2e_latency_ms" in doc or "random_input_len" in doc or "dataset_name" in doc)


def read(doc: dict, path: str, index: int, count: int) -> Run:
    where = f"line {index + 1}: " if count > 1 else ""
    return serving_run(doc, path, "sglang", f"run {index + 1}" if count > 1 else "run", "e2e_latency", where,
                       conditions={k: S.string(doc, k, path, where) for k in ("backend", "dataset_name")
                                   if doc.get(k) is not None})
