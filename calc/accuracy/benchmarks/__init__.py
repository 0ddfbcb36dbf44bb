"""Readers for the result files of serving benchmarks people already run.

``read_results(path)`` recognises the format by its content (not its name) and returns
the runs in it: vLLM serve and latency results, SGLang bench_serving JSON lines, GuideLLM
reports, llama-bench JSON / JSON lines / CSV. A file it cannot read is one SpecError
naming the file and what is missing.
"""

from __future__ import annotations

from pathlib import Path

from calc.accuracy.benchmarks import guidellm, llamabench, sglang, vllm
from calc.accuracy.benchmarks.common import LABELS, METRIC_NAMES, METRICS, Run, load_documents
from calc.core.errors import SpecError

__all__ = ["FORMATS", "LABELS", "METRICS", "METRIC_NAMES", "Run", "read_results"]

FORMATS = ("vllm-serve", "vllm-latency", "sglang", "guidellm", "llama-bench")


def read_results(path: Path | str) -> list[Run]:
    path = Path(path)
    docs, kind = load_documents(path)
    name = str(path)
    if kind == "csv":
        rows = llamabench.csv_rows(docs[0])
        if rows is None:
            raise SpecError(path, None, "unknown format: a CSV without llama-bench's columns "
                                        f"({', '.join(llamabench.REQUIRED)})")
        if not rows:
            raise SpecError(path, None, "llama-bench CSV with a header and no rows")
        return llamabench.read(rows, name)
    if kind == "json" and isinstance(docs[0], list):
        if llamabench.is_llamabench(docs[0]):
            return llamabench.read(docs[0], name)
        raise SpecError(path, None, "unknown format: a JSON list that is not llama-bench output "
                                    "(objects with n_prompt, n_gen, avg_ts)")
    if all(llamabench.is_llamabench(d) for d in docs):
        return llamabench.read(docs, name)
    if len(docs) == 1 and guidellm.is_guidellm(docs[0]):
        return guidellm.read(docs[0], name)
    runs = []
    for i, doc in enumerate(docs):
        if vllm.is_latency(doc):
            runs.append(vllm.read_latency(doc, name, i, len(docs)))
        elif sglang.is_sglang(doc):
            runs.append(sglang.read(doc, name, i, len(docs)))
        elif vllm.is_serve(doc):
            runs.append(vllm.read_serve(doc, name, i, len(docs)))
        else:
            keys = ", ".join(sorted(doc)[:6]) if isinstance(doc, dict) else type(doc).__name__
            where = f" (line {i + 1})" if len(docs) > 1 else ""
            raise SpecError(path, None, f"unknown format{where}: not a vLLM, SGLang, GuideLLM or llama-bench "
                                        f"result (keys: {keys})")
    return runs

