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

from calc.accuracy.benchmarks.common import Run, measured, ms, number, per_request, rate


def is_sglang(doc) -> bool:
    return isinstance(doc, dict) and "output_throughput" in doc and (
        "mean_e2e_latency_ms" in doc or "random_input_len" in doc or "dataset_name" in doc)


def read(doc: dict, path: str, index: int, count: int) -> Run:
    metrics = {}
    for ours, theirs in (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"), ("e2e", "e2e_latency")):
        metrics[f"{ours}_mean_s"] = ms(doc.get(f"mean_{theirs}_ms"))
        metrics[f"{ours}_p50_s"] = ms(doc.get(f"median_{theirs}_ms"))
        metrics[f"{ours}_p99_s"] = ms(doc.get(f"p99_{theirs}_ms"))
    req_rate = rate(doc.get("request_rate"))
    conc = number(doc.get("max_concurrency"))
    completed = number(doc.get("completed"))
    n = int(completed) if completed else None
    notes = []
    if req_rate is not None:
        load = "rate"
        if conc:
            notes.append(f"max_concurrency {int(conc)} also set: simulated as an open loop at the rate only")
    elif conc:
        load = "concurrency"
    else:
        load = "burst"
    mean_in = number(doc.get("total_input_tokens")) / completed if completed and number(
        doc.get("total_input_tokens")) is not None else None
    mean_out = number(doc.get("total_output_tokens")) / completed if completed and number(
        doc.get("total_output_tokens")) is not None else None
    return Run(
        file=path, format="sglang", label=f"run {index + 1}" if count > 1 else "run", load=load,
        measured=measured(**metrics, output_tokens_per_s=number(doc.get("output_throughput")),
                          requests_per_s=number(doc.get("request_throughput"))),
        concurrency=int(conc) if conc else (n if load == "burst" else None), rate_per_s=req_rate,
        num_requests=n, prompt_lens=per_request(doc.get("input_lens"), path, "input_lens"),
        output_lens=per_request(doc.get("output_lens"), path, "output_lens"),
        prompt_len=mean_in, output_len=mean_out,
        conditions={k: doc[k] for k in ("backend", "dataset_name") if doc.get(k) is not None},
        notes=tuple(notes),
    )
