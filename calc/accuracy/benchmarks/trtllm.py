"""TensorRT-LLM's `trtllm-bench throughput|latency --report_json FILE` (NVIDIA/TensorRT-LLM
tensorrt_llm/bench/dataclasses/reporting.py @ 2787769cae353023784dce105d648bcd4d04f4d4,
ReportUtility.get_statistics_dict; statistics.py @ 77d7fe1eb2d89753ae33a0745d1083c133064f92;
the commands in tensorrt_llm/bench/benchmark/throughput.py and low_latency.py).

engine       `model` (the HF id), `version`, `backend` (Pytorch | TRT), `dtype`, `kv_cache_dtype`
             and `quantization` (QuantAlgo names: FP8, NVFP4, W4A16_AWQ, ..., or null)
world_info   `tp_size`, `pp_size`, `ep_size`, `max_batch_size`, `max_num_tokens`,
             `kv_cache_percentage` (free_gpu_memory_fraction), `issue_rate`
request_info `num_requests`, `avg_input_length`, `avg_output_length`, `avg_num_concurrent_requests`
performance  `request_throughput_req_s`, `system_output_throughput_tok_s` (all output tokens /
             (last end - first start)), `request_latency_percentiles_ms`
streaming_metrics (with --streaming; `latency` always streams): `ttft_percentiles` and
             `tpot_percentiles`, each PercentileStats {p50, p90, p95, p99, minimum, maximum,
             average} in ms; TPOT per request = (end - first token) / (output tokens - 1)

PercentileStats' pNN are sorted[int(n * q)] (no interpolation), close to numpy's for the
hundreds of requests these runs send. The load is not written: `throughput` defaults to
--concurrency -1, every request enqueued at once (a burst) up to max_batch_size running;
`latency` runs max_batch_size 1, one request at a time. A run with --concurrency N says so in
the sidecar (`concurrency: N`).
"""

from __future__ import annotations

import calc.accuracy.benchmarks.schema as S
from calc.accuracy.benchmarks.common import Run, measured

# QuantAlgo / KV cache quant names (tensorrt_llm/quantization/mode.py) -> our dtypes
QUANT = {"FP8": "fp8", "FP8_BLOCK_SCALES": "fp8", "FP8_PER_CHANNEL_PER_TOKEN": "fp8", "NVFP4": "fp4",
         "W4A16_AWQ": "int4", "W4A16_GPTQ": "int4", "W4A16": "int4", "W4A8_AWQ": "int4", "W8A16": "int8",
         "INT8": "int8", "W8A8_SQ_PER_CHANNEL": "int8"}


def is_trtllm(doc) -> bool:
    return isinstance(doc, dict) and all(isinstance(doc.get(k), dict) for k in ("performance", "request_info")) \
        and "world_info" in doc


def _pct(block: dict, key: str, path: str, where: str) -> dict[str, float | None]:
    d = S.mapping(block, key, path, where)
    at = f"{where}{key}."
    return {"mean": S.latency(d, "average", path, at), "p50": S.latency(d, "p50", path, at),
            "p99": S.latency(d, "p99", path, at)}


def read(doc: dict, path: str) -> list[Run]:
    engine = S.mapping(doc, "engine", path)
    world = S.mapping(doc, "world_info", path)
    req = S.mapping(doc, "request_info", path)
    perf = S.mapping(doc, "performance", path)
    stream = S.mapping(doc, "streaming_metrics", path)
    metrics = {}
    for ours, block, key, where in (("e2e", perf, "request_latency_percentiles_ms", "performance."),
                                    ("ttft", stream, "ttft_percentiles", "streaming_metrics."),
                                    ("tpot", stream, "tpot_percentiles", "streaming_metrics.")):
        for stat, v in _pct(block, key, path, where).items():
            metrics[f"{ours}_{stat}_s"] = v
    max_batch = S.count(world, "max_batch_size", path, "world_info.", low=1)
    cond: dict[str, object] = {"tp": S.count(world, "tp_size", path, "world_info.", low=1),
                               "pp": S.count(world, "pp_size", path, "world_info.", low=1),
                               "max_num_seqs": max_batch}
    quant = S.string(engine, "quantization", path, "engine.")
    kv = S.string(engine, "kv_cache_dtype", path, "engine.")
    if quant and quant.upper() in QUANT:
        cond["weight_dtype"] = QUANT[quant.upper()]
    if kv and kv.upper() in QUANT:
        cond["kv_dtype"] = QUANT[kv.upper()]
    n = S.count(req, "num_requests", path, "request_info.", low=1)
    notes = []
    if max_batch == 1:
        load = {"load": "concurrency", "concurrency": 1}
        notes.append("max_batch_size 1 (trtllm-bench latency): one request at a time")
    else:
        load = {"load": "burst", "concurrency": n}
        notes.append("load not in the report: trtllm-bench throughput's default --concurrency -1, every request "
                     f"at once, up to max_batch_size {max_batch} running (give concurrency: in the sidecar "
                     "if the run set --concurrency)")
    fraction = S.number(world, "kv_cache_percentage", path, "world_info.", high=1.0)
    if fraction is not None:
        notes.append(f"KV cache share {fraction:g} of free memory (free_gpu_memory_fraction)")
    return [Run(file=path, format="trtllm-bench", served=False, label="run", num_requests=n, **load,
                measured=measured(**metrics, output_tokens_per_s=S.number(
                    perf, "system_output_throughput_tok_s", path, "performance."),
                    requests_per_s=S.number(perf, "request_throughput_req_s", path, "performance.")),
                prompt_len=S.tokens(req, "avg_input_length", path, "request_info."),
                output_len=S.tokens(req, "avg_output_length", path, "request_info."),
                model_id=S.string(engine, "model", path, "engine."),
                tool_version=S.string(engine, "version", path, "engine."), conditions=cond, notes=tuple(notes))]
