"""Readers for the result files of serving benchmarks people already run.

``read_results(path)`` recognises the format by its content (not its name) and returns
the runs in it: vLLM serve and latency results, SGLang bench_serving JSON lines, GuideLLM
reports, llama-bench JSON / JSON lines / CSV, GenAI-Perf profile exports (JSON, CSV),
trtllm-bench reports and LMDeploy's benchmark CSVs. Every file is read through
calc.core.files.read_text and every field a reader uses is range-checked
(calc.accuracy.benchmarks.schema); a file it cannot read is one SpecError naming the file,
the field and what is wrong.
"""

from __future__ import annotations

from pathlib import Path

from calc.accuracy.benchmarks import genaiperf, guidellm, llamabench, lmdeploy, sglang, trtllm, vllm
from calc.accuracy.benchmarks.common import (
    LABELS,
    METRIC_NAMES,
    METRICS,
    Run,
    csv_records,
    csv_table,
    load_documents,
)
from calc.core.errors import SpecError

__all__ = ["FORMATS", "LABELS", "METRICS", "METRIC_NAMES", "Run", "read_results"]

FORMATS = ("vllm-serve", "vllm-latency", "sglang", "guidellm", "llama-bench", "genai-perf", "trtllm-bench",
           "lmdeploy-restful", "lmdeploy-throughput")


def read_results(path: Path | str) -> list[Run]:
    path = Path(path)
    docs, kind = load_documents(path)
    name = str(path)
    if kind == "csv":
        return _read_csv(docs[0], path, name)
    if kind == "json" and isinstance(docs[0], list):
        if llamabench.is_llamabench(docs[0]):
            return llamabench.read(docs[0], name)
        raise SpecError(path, None, "unknown format: a JSON list that is not llama-bench output "
                                    "(objects with n_prompt, n_gen, avg_ts)")
    if all(llamabench.is_llamabench(d) for d in docs):
        return llamabench.read(docs, name)
    if len(docs) == 1:
        for known, read in ((guidellm.is_guidellm, guidellm.read), (genaiperf.is_genaiperf, genaiperf.read),
                            (trtllm.is_trtllm, trtllm.read)):
            if known(docs[0]):
                return read(docs[0], name)
    runs = []
    for i, doc in enumerate(docs):
        if vllm.is_latency(doc):
            runs.append(vllm.read_latency(doc, name, i, len(docs)))
        elif sglang.is_sglang(doc):
            runs.append(sglang.read(doc, name, i, len(docs)))
        elif vllm.is_serve(doc):
            runs.append(vllm.read_serve(doc, name, i, len(docs)))
        else:
            keys = ", ".join(str(k)[:30] for k in sorted(doc)[:6]) if isinstance(doc, dict) else type(doc).__name__
            where = f" (line {i + 1})" if len(docs) > 1 else ""
            raise SpecError(path, None, f"unknown format{where}: not a vLLM, SGLang, GuideLLM, GenAI-Perf, "
                                        f"trtllm-bench or llama-bench result (keys: {keys})")
    return runs


def _read_csv(text: str, path: Path, name: str) -> list[Run]:
    header, rows = csv_table(text, path)
    if genaiperf.is_genaiperf_csv(header):
        return genaiperf.read_csv(header, rows, name)
    if lmdeploy.is_lmdeploy_csv(header):
        if not rows:
            raise SpecError(path, None, "LMDeploy CSV with a header and no rows")
        return lmdeploy.read_csv(header, rows, name)
    if llamabench.is_llamabench_csv(header):
        if not rows:
            raise SpecError(path, None, "llama-bench CSV with a header and no rows")
        return llamabench.read(csv_records(header, rows, path), name)
    raise SpecError(path, None, f"unknown format: a CSV without llama-bench's ({', '.join(llamabench.REQUIRED)}), "
                                "GenAI-Perf's or LMDeploy's columns")
