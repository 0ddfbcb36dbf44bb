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

from calc.accuracy.benchmarks.common import Run, measured, ms, number, per_request, rate


def is_serve(doc) -> bool:
    return isinstance(doc, dict) and ("model_id" in doc or "date" in doc) and any(
        k in doc for k in ("output_throughput", "mean_ttft_ms", "request_throughput"))


def is_latency(doc) -> bool:
    return isinstance(doc, dict) and "avg_latency" in doc and "latencies" in doc


def read_serve(doc: dict, path: str, index: int, count: int) -> Run:
    metrics = {}
    for ours, theirs in (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"), ("e2e", "e2el")):
        metrics[f"{ours}_mean_s"] = ms(doc.get(f"mean_{theirs}_ms"))
        metrics[f"{ours}_p50_s"] = ms(doc.get(f"median_{theirs}_ms"))
        metrics[f"{ours}_p99_s"] = ms(doc.get(f"p99_{theirs}_ms"))
    req_rate = rate(doc.get("request_rate"))
    conc = number(doc.get("max_concurrency"))
    completed = number(doc.get("completed"))
    n = int(completed) if completed else (int(number(doc.get("num_prompts")) or 0) or None)
    notes = []
    if req_rate is not None:
        load = "rate"
        if conc:
            notes.append(f"max_concurrency {int(conc)} also set: simulated as an open loop at the rate only")
    elif conc:
        load = "concurrency"
    else:
        load = "burst"
    prompts, outputs = per_request(doc.get("input_lens"), path, "input_lens"), \
        per_request(doc.get("output_lens"), path, "output_lens")
    mean_in = mean_out = None
    if completed and number(doc.get("total_input_tokens")) is not None:
        mean_in = number(doc["total_input_tokens"]) / completed
    if completed and number(doc.get("total_output_tokens")) is not None:
        mean_out = number(doc["total_output_tokens"]) / completed
    label = f"run {index + 1}" if count > 1 else "run"
    return Run(
        file=path, format="vllm-serve", label=label, load=load,
        measured=measured(**metrics, output_tokens_per_s=number(doc.get("output_throughput")),
                          requests_per_s=number(doc.get("request_throughput"))),
        concurrency=int(conc) if conc else (n if load == "burst" else None), rate_per_s=req_rate,
        burstiness=number(doc.get("burstiness")) or 1.0, num_requests=n,
        prompt_lens=prompts, output_lens=outputs, prompt_len=mean_in, output_len=mean_out,
        model_id=doc.get("model_id"), tool_version=doc.get("vllm_version") or doc.get("version"),
        conditions={k: doc[k] for k in ("backend", "label", "date") if doc.get(k) is not None},
        notes=tuple(notes),
    )


def read_latency(doc: dict, path: str, index: int, count: int) -> Run:
    pct = doc.get("percentiles") or {}
    return Run(
        file=path, format="vllm-latency", label=f"run {index + 1}" if count > 1 else "run", load="batch",
        measured=measured(e2e_mean_s=number(doc.get("avg_latency")), e2e_p50_s=number(pct.get("50")),
                          e2e_p99_s=number(pct.get("99"))),
        notes=("batch size and lengths are not in the file (vllm bench latency does not save its "
               "arguments)",),
    )
