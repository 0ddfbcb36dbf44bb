"""How close the calculator comes to published measurements: `roofline accuracy`.

Every row of reports/accuracy/published.csv (engine, model, dtypes, GPU, split,
batch or concurrency, lengths, metric, value) is predicted three ways:

- ideal: the pure roofline (data-sheet peaks, no efficiencies, no overheads);
- default: the catalog profiles with the row engine's preset (calc/data/engines.yaml);
- fitted: the presets' kernel-level parameters refitted on the "fit" half of the rows.

The rows are split in half deterministically (by a hash of the row id); the error
reported for the fitted parameters is on the other, held-out half, so the figure
is not a fit to itself. A row's metric maps to the request model as follows:

decode_tokens_per_s   1 / TPOT at the row's batch (1 if absent) over its lengths
prefill_tokens_per_s  B * T / TTFT
ttft_s, tpot_s, e2e_s  the request model's TTFT, TPOT, e2e at the row's batch
output_tokens_per_s   a fixed batch: B * G / e2e; a concurrency or "max load": the
                      continuous-batching steady state (calc.serving.capacity) with that many
                      running requests, or as many as the KV cache holds; times
                      data-parallel replicas (GPUs / (TP x PP))
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from calc.core.errors import SpecError
from calc.spec.catalog import REPO_ROOT, hardware_catalog, load_hardware, load_model, model_catalog
from calc.spec.engine import EngineSpec, engines

PUBLISHED = REPO_ROOT / "reports" / "accuracy" / "published.csv"
ENGINE_OF = {"tensorrt-llm": "trtllm", "nim": "trtllm", "vllm": "vllm", "sglang": "sglang",
             "llama.cpp": "llama.cpp", "hf": "hf", "mlc-llm": "default", "exllama": "default"}
MODEL_ALIASES = {"codellama/CodeLlama-7b-hf": "codellama-7b"}
GROUP_SIZE = {"llama.cpp": 32}  # GGUF Q4_0/Q8_0 blocks: 32 weights per fp16 scale
OWN_KERNELS = ("llama.cpp",)  # engines whose matmuls are not cuBLAS/CUTLASS/hipBLASLt
MAX_LOAD_BATCH = 2048  # engines' running-batch cap when a row gives none (TRT-LLM's max_batch_size default)
FITTED = ("attention", "gemm_m_half", "memory_half_mb", "kernel_overhead_us", "step_overhead_us",
          "request_overhead_us", "compute_scale", "memory_scale")
# Physical ranges the fit may not leave: launch gaps with CUDA graphs are ~1-5 us and eager
# launches ~5-20 us per kernel; a serving step's CPU work is 0.02-2 ms; shares are <= 1.
BOUNDS = {"attention": (0.2, 1.0), "compute_scale": (0.1, 1.0), "memory_scale": (0.1, 1.0),
          "kernel_overhead_us": (0.2, 20.0), "step_overhead_us": (20.0, 2000.0),
          "request_overhead_us": (0.0, 50_000.0), "gemm_m_half": (0.0, 256.0), "memory_half_mb": (0.0, 16.0)}
# Metrics measured from a client, so they include the serving stack's per-request time.
CLIENT_SIDE = ("ttft_s", "e2e_s")


@dataclass(frozen=True)
class Row:
    id: str
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
    half: str  # "fit" or "held-out"


def _num(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def half_of(row_id: str) -> str:
    """Deterministic split: the first byte of the id's SHA-256, even -> fit."""
    return "fit" if hashlib.sha256(row_id.encode()).digest()[0] % 2 == 0 else "held-out"


def load_rows(path: Path = PUBLISHED) -> tuple[list[Row], list[tuple[str, str]]]:
    """Rows the calculator can predict, and (id, why not) for the rest."""
    import csv

    rows, skipped = [], []
    models, hws = model_catalog(), hardware_catalog()
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            rid = r["id"]
            model = MODEL_ALIASES.get(r["model"], r["model"])
            T, G = _num(r["input_len"]), _num(r["output_len"])
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
            gpus = int(_num(r["num_gpus"]) or 1)
            tp = _num(r["tp"])
            # llama.cpp splits layers across GPUs (pipeline) unless told otherwise
            tp, pp = (int(tp), 1) if tp is not None else (1, gpus)
            w = r["weight_dtype"]
            act = r["act_dtype"] or None
            rows.append(Row(
                id=rid, engine=r["engine"], preset=ENGINE_OF.get(r["engine"], "default"), model=model,
                hardware=r["gpu"], weight_dtype=w, kv_dtype=r["kv_dtype"] or (w if w == "fp8" else None),
                compute_dtype="fp8" if act == "fp8" or (w == "fp8" and act is None) else None,
                gpus=gpus, tp=tp, pp=pp, batch=int(_num(r["batch"])) if _num(r["batch"]) else None,
                concurrency=int(_num(r["concurrency"])) if _num(r["concurrency"]) else None,
                prompt_len=max(int(T), 1), output_len=max(int(G), 1), metric=r["metric"],
                value=float(r["value"]), half=half_of(rid),
            ))
    return rows, skipped


def predict(row: Row, preset: EngineSpec | None) -> float:
    """The row's metric from the calculator; preset None: the ideal roofline."""
    from calc.cost.latency import estimate
    from calc.cost.setup import Setup

    ideal = preset is None or preset.ideal
    # the "ideal" preset: peaks and data-sheet bandwidth, also inside calc.serving.capacity
    hw = load_hardware(row.hardware).with_engine("ideal" if ideal else preset)
    model = load_model(row.model)
    attention = "fused" if ideal else preset.attention_kernel
    kw = dict(weight_dtype=row.weight_dtype, kv_dtype=row.kv_dtype, compute_dtype=row.compute_dtype,
              group_size=GROUP_SIZE.get(row.engine, 128), attention=attention, ideal=ideal, tp=row.tp, pp=row.pp)
    replicas = max(row.gpus // (row.tp * row.pp), 1)
    T, G = row.prompt_len, row.output_len
    m = row.metric
    if m == "output_tokens_per_s" and row.batch is None:
        return replicas * _steady_output(model, hw, row, kw)
    B = row.batch or row.concurrency or 1
    est = estimate(model, hw, B, T, max(G, 2) if m in ("decode_tokens_per_s", "tpot_s") else G, Setup.of(**kw))
    if m == "decode_tokens_per_s":
        return float(1.0 / est.tpot_s)
    if m == "prefill_tokens_per_s":
        return float(B * T / est.ttft_s)
    serving = 0.0 if ideal else preset.request_overhead_us * 1e-6  # named, outside the model's TTFT
    if m == "ttft_s":
        return float(est.ttft_s) + serving
    if m == "tpot_s":
        return float(est.tpot_s)
    if m == "e2e_s":
        return float(est.e2e_s) + serving
    if m == "output_tokens_per_s":
        return replicas * float(est.output_tokens_per_s)
    if m == "total_tokens_per_s":
        return replicas * float(est.total_tokens_per_s)
    raise SpecError(str(PUBLISHED), "metric", f"unknown metric {m!r} in row {row.id}")


def _steady_output(model, hw, row: Row, kw: dict) -> float:
    """Output tokens/s of one replica under continuous batching at the row's concurrency
    (or as many running requests as the KV cache and the engine's cap allow)."""
    from calc.cost.dtypes import Dtypes
    from calc.serving.capacity import Replica, steady_state
    from calc.spec.workload import Serving

    dt = Dtypes.resolve(model, kw["weight_dtype"], kw["kv_dtype"], kw["compute_dtype"], kw["group_size"])
    rep = Replica(model, hw, row.tp, row.concurrency or MAX_LOAD_BATCH, dt, Serving(max_batched_tokens=8192),
                  kw["attention"])
    if not rep.kv.fits:
        return float("nan")
    st = steady_state(rep, np.array([row.prompt_len]), np.array([max(row.output_len, 2)]))
    return float(st.output_tokens_per_s)


@dataclass(frozen=True)
class Result:
    row: Row
    ideal: float
    default: float
    fitted: float

    def error(self, which: str) -> float:
        """Signed relative error of a prediction, (predicted - measured) / measured."""
        return getattr(self, which) / self.row.value - 1.0


def evaluate(rows: list[Row], presets: dict[str, EngineSpec], fitted: dict[str, EngineSpec]) -> list[Result]:
    return [Result(r, predict(r, None), predict(r, presets[r.preset]), predict(r, fitted[r.preset])) for r in rows]


def _loss(rows: list[Row], presets: dict[str, EngineSpec]) -> float:
    """Mean absolute log error: symmetric in over- and under-prediction."""
    errs = []
    for r in rows:
        p = predict(r, presets[r.preset])
        errs.append(abs(math.log(p / r.value)) if p > 0 and math.isfinite(p) else 3.0)
    return float(np.mean(errs))


def fit_presets(rows: list[Row], presets: dict[str, EngineSpec], rounds: int = 2) -> dict[str, EngineSpec]:
    """Coordinate search in log space over each preset's kernel-level parameters, on ``rows``
    (the fit half). Shared parameters (attention, small-GEMM, small-transfer) move together
    for every non-ideal preset; overheads move per engine that has rows."""
    current = dict(presets)
    used = sorted({r.preset for r in rows})
    groups: list[tuple[tuple[str, ...], str]] = [(tuple(used), p) for p in ("attention", "gemm_m_half",
                                                                             "memory_half_mb")]
    groups += [((e,), p) for e in used for p in ("kernel_overhead_us", "step_overhead_us", "request_overhead_us")]
    # Engines with their own matmul kernels (not the vendor's GEMM libraries) get their own scales.
    groups += [((e,), p) for e in used if e in OWN_KERNELS for p in ("compute_scale", "memory_scale")]
    best = _loss(rows, current)
    for _ in range(rounds):
        for names, param in groups:
            for factor in (4.0, 2.0, 1.4, 1 / 1.4, 0.5, 0.25):
                trial = dict(current)
                for n in names:
                    v = getattr(trial[n], param)
                    seed = {"gemm_m_half": 8.0, "memory_half_mb": 0.5, "request_overhead_us": 1000.0}
                    new = (v if v > 0 else seed.get(param, 1.0)) * factor
                    lo, hi = BOUNDS.get(param, (0.0, math.inf))
                    new = min(max(new, lo), hi)
                    trial[n] = trial[n].model_copy(update={param: new})
                loss = _loss(rows, trial)
                if loss < best - 1e-9:
                    best, current = loss, trial
    return _with_default(current)


def _with_default(presets: dict[str, EngineSpec]) -> dict[str, EngineSpec]:
    """The "default" preset: the shared fitted parameters, and the geometric mean of the
    server engines' (vLLM, TensorRT-LLM) overheads: the documented middle ground."""
    servers = [presets[n] for n in ("vllm", "trtllm") if n in presets]
    if "default" not in presets or not servers:
        return presets
    ref = servers[0]
    gm = {p: float(np.exp(np.mean([np.log(max(getattr(e, p), 1e-9)) for e in servers])))
          for p in ("kernel_overhead_us", "step_overhead_us")}
    shared = {p: getattr(ref, p) for p in ("attention", "gemm_m_half", "memory_half_mb")}
    return {**presets, "default": presets["default"].model_copy(update={**shared, **gm})}


def stats(errors) -> dict:
    a = np.abs(np.asarray([e for e in errors if math.isfinite(e)]))
    if a.size == 0:
        return {"n": 0, "median": float("nan"), "p90": float("nan")}
    return {"n": int(a.size), "median": float(np.median(a)), "p90": float(np.percentile(a, 90))}


def run(fit: bool = True) -> tuple[list[Result], list[tuple[str, str]], dict[str, EngineSpec]]:
    rows, skipped = load_rows()
    presets = engines()
    fitted = fit_presets([r for r in rows if r.half == "fit"], presets) if fit else presets
    return evaluate(rows, presets, fitted), skipped, fitted
