"""The published measurements (reports/accuracy/published.csv) as rows the calculator can predict.

Each row names its publisher: leave-one-source-out scores a publisher's rows with parameters
fitted on everyone else's (calc.accuracy.fit), so a publisher is the unit nothing may leak across.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

from calc.core.errors import SpecError
from calc.core.units import GROUP_SCALED, WEIGHT_ONLY, canonical_dtype
from calc.spec.bands import GPU_FAMILY
from calc.spec.catalog import hardware_catalog, model_catalog, shipped

PUBLISHED = shipped("accuracy", "reports/accuracy") / "published.csv"
ENGINE_OF = {"tensorrt-llm": "trtllm", "nim": "trtllm", "vllm": "vllm", "sglang": "sglang",
             "llama.cpp": "llama.cpp", "hf": "hf", "mlc-llm": "default", "exllama": "default"}
MODEL_ALIASES = {"codellama/CodeLlama-7b-hf": "codellama-7b"}
# Metrics the harness can predict (calc.accuracy.predict says how each maps to the request model).
METRICS = ("decode_tokens_per_s", "prefill_tokens_per_s", "ttft_s", "tpot_s", "e2e_s",
           "output_tokens_per_s", "output_tokens_per_s_per_gpu", "total_tokens_per_s")
# Catalog GPUs by architecture, for the per-family figures: GPU_FAMILY (calc.spec.bands).


@dataclass(frozen=True)
class Row:
    id: str
    publisher: str
    engine: str
    preset: str
    model: str
    hardware: str
    weight_dtype: str
    kv_dtype: str | None
    compute_dtype: str | None
    gpus: int
    tp: int
    pp: int
    batch: int | None
    concurrency: int | None
    prompt_len: int
    output_len: int
    metric: str
    value: float
    engine_version: str = ""  # as published (the preset's by_version rules read it: calc.accuracy.predict)
    # timing "server": a client timed the request through the engine's serving API (HTTP or gRPC,
    # tokenising, streaming), so a TTFT or e2e holds the preset's request_overhead_us; "offline": the
    # engine's own benchmark in process (vLLM's benchmark_latency), which holds none
    served: bool = False

    @property
    def family(self) -> str:
        return GPU_FAMILY.get(self.hardware, "other")

    @property
    def mechanism(self) -> str:
        """The kernel mechanism the row tests (issue 21's tail): llama.cpp's own kernels, fp4
        (block-scaled) matmuls, weight-only quantised matmuls, or other (16-bit and fp8)."""
        if self.engine == "llama.cpp":
            return "llama.cpp"
        if self.compute_dtype == "fp4":
            return "fp4"
        if self.weight_dtype in GROUP_SCALED and self.compute_dtype in (None, "fp32", "bf16", "fp16"):
            return "weight-only"
        return "other"


def csv_number(v) -> float | None:
    """A cell of the project's measurement CSVs as a finite number, or None (empty, text, inf, NaN)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def act_dtype_of(text: str | None, where: str) -> str | None:
    """A row's ``act_dtype`` column, canonical (None: empty): a dtype a matmul runs in, else a
    SpecError naming the row and the column."""
    if not text:
        return None
    try:
        act = canonical_dtype(text)
    except ValueError as exc:
        raise SpecError(where, "act_dtype", str(exc)) from None
    if act in WEIGHT_ONLY:
        raise SpecError(where, "act_dtype", f"{act} is a storage format; matmuls run in bf16/fp16/fp8/fp4/int8")
    return act


def compute_dtype_of(weight: str, act: str | None) -> str | None:
    """The matmul dtype: fp8 activations (or fp8 weights with none stated) run fp8 GEMMs; fp4
    activations (NVFP4, W4A4 with block scales) run the fp4 GEMM class; a stated 16-bit (or fp32)
    activation dtype is the GEMMs' own, whatever the model ships in (llama.cpp's CUDA backend
    runs its dequantised and fp16 GEMMs in fp16 on a bf16 Llama 3, where GeForce cards accumulate
    at twice the bf16 rate); None: the model's serving dtype."""
    if act == "fp4":
        return "fp4"
    if act == "fp8" or (weight == "fp8" and act is None):
        return "fp8"
    return act


def kv_dtype_of(weight: str, kv: str | None, model: str) -> str | None:
    """The KV dtype of a row: the one it states, else what its checkpoint gives the engine's
    ``kv_cache_dtype auto``. Weights quantised to fp8 or fp4 after training (NVIDIA ModelOpt,
    whose examples/llm_ptq/hf_ptq.py quantises the KV cache to fp8 unless told otherwise,
    ``--kv_cache_qformat`` default "fp8"; Neural Magic's FP8-KV) ship KV scales, so an fp8
    cache; a model whose own checkpoint is fp8 (DeepSeek-V3/R1: its quantization_config names
    weight blocks only) caches at the model dtype (None: the model's serving dtype)."""
    if kv:
        return kv
    return "fp8" if weight in ("fp8", "fp4") and not _ships_fp8(model) else None


@functools.cache
def _ships_fp8(model: str) -> bool:
    from calc.spec.catalog import load_model

    return load_model(model).default_weight_dtype == "fp8"


def load_rows(path: Path = PUBLISHED) -> tuple[list[Row], list[tuple[str, str]]]:
    """Rows the calculator can predict, and (id, why not) for the rest."""
    import csv

    rows, skipped = [], []
    models, hws = model_catalog(), hardware_catalog()
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            rid = r["id"]
            if not r.get("publisher"):
                raise SpecError(str(path), "publisher", f"row {rid} names no publisher")
            if r["metric"] not in METRICS:
                raise SpecError(str(path), "metric", f"unknown metric {r['metric']!r} in row {rid}")
            model = MODEL_ALIASES.get(r["model"], r["model"])
            T, G = csv_number(r["input_len"]), csv_number(r["output_len"])
            why = None
            if model not in models:
                why = f"model {r['model']} not in the catalog"
            elif r["gpu"] not in hws:
                why = f"gpu {r['gpu']} not in the catalog"
            elif T is None or G is None:
                why = "input or output length not published"
            if why:
                skipped.append((rid, why))
                continue
            gpus = int(csv_number(r["num_gpus"]) or 1)
            tp = csv_number(r["tp"])
            # llama.cpp splits layers across GPUs (pipeline) unless told otherwise
            tp, pp = (int(tp), 1) if tp is not None else (1, gpus)
            w = r["weight_dtype"]
            act = act_dtype_of(r["act_dtype"], f"{path}: row {rid}")
            served = served_of(r.get("timing"), f"{path}: row {rid}", required=r["metric"] in TIMED)
            rows.append(Row(
                id=rid, publisher=r["publisher"], engine=r["engine"], preset=ENGINE_OF.get(r["engine"], "default"),
                model=model, hardware=r["gpu"], weight_dtype=w, kv_dtype=kv_dtype_of(w, r["kv_dtype"], model),
                compute_dtype=compute_dtype_of(w, act), gpus=gpus, tp=tp, pp=pp,
                batch=int(csv_number(r["batch"])) if csv_number(r["batch"]) else None,
                concurrency=int(csv_number(r["concurrency"])) if csv_number(r["concurrency"]) else None,
                prompt_len=max(int(T), 1), output_len=max(int(G), 1), metric=r["metric"], value=float(r["value"]),
                engine_version=r.get("engine_version") or "", served=served,
            ))
    return rows, skipped


TIMED = ("ttft_s", "e2e_s")  # the metrics a client's timing can hold the serving stack's time in


def served_of(text: str | None, where: str, required: bool = True) -> bool:
    """A ``timing`` cell (published.csv, under_load.csv): "server" (True) or "offline" (False);
    empty is allowed where not ``required`` (a row of a metric no server time can be in)."""
    text = (text or "").strip()
    if text not in ("server", "offline", "") or (required and not text):
        raise SpecError(where, "timing", f"{text!r}: expected server or offline"
                                         f"{' (this row must say which)' if required else ''}")
    return text == "server"
