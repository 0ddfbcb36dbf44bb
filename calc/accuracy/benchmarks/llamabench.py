"""llama.cpp's `llama-bench -o json|jsonl|csv` (tools/llama-bench/llama-bench.cpp: the
fields of test::get_fields(), written by json_printer, jsonl_printer and csv_printer).

One row per test: `n_prompt` prompt tokens processed in passes of `n_ubatch` (a "pp"
test, n_gen = 0), or `n_gen` tokens generated one at a time (a "tg" test, n_prompt = 0),
or both (a "pg" test), after `n_depth` tokens already in the KV cache (newer builds; 0
before the field existed). `avg_ts` is the mean over repetitions of (n_prompt + n_gen) /
seconds: tokens per second (`avg_ns` the mean time in nanoseconds). `model_type` is
"<arch> <size> <file type>" (llama_model_desc), `type_k`/`type_v` the KV cache types
(ggml type names: f16, q8_0, ...), `n_gpu_layers` the layers offloaded, `split_mode`
how several GPUs share the model (layer, row, none), `gpu_info` the device names joined
by ", ". In the CSV every value is a quoted string; in JSON numbers and booleans are bare.
`flash_attn` says how attention ran: a BOOL until build b9437 (false unless `-fa 1`; JSON
false/true, CSV "0"/"1"), since then an INT, the requested mode (-1 auto, the default, 0 off,
1 on; PR 23714); auto enables flash attention wherever the backend runs the op, as CUDA does
with the KV cache on the GPU (src/llama-context.cpp). Off, attention is unfused: KQ and KQV
matmuls with a softmax between (the llama.cpp preset's default, as builds before b9437 ran
llama-bench); on, one fused kernel.
"""

from __future__ import annotations

import calc.accuracy.benchmarks.schema as S
from calc.accuracy.benchmarks.common import Run, measured
from calc.core import limits
from calc.core.errors import SpecError

REQUIRED = ("n_prompt", "n_gen", "avg_ts")
# llama_model_ftype_name strings -> our weight dtypes (GGUF block quantisation: 32 weights
# per scale, as calc.accuracy.harness.GROUP_SIZE counts it). Types without an equivalent
# here (Q5_K, Q6_K, Q2_K, ...) need --weight-dtype.
FILE_TYPES = {"all F32": "fp32", "F16": "fp16", "BF16": "bf16", "Q8_0": "int8", "Q4_0": "int4", "Q4_1": "int4",
              "Q4_K - Small": "int4", "Q4_K - Medium": "int4", "IQ4_NL - 4.5 bpw": "int4",
              "IQ4_XS - 4.25 bpw": "int4", "MXFP4 MoE": "fp4"}
KV_TYPES = {"f32": "fp32", "f16": "fp16", "bf16": "bf16", "q8_0": "int8", "q4_0": "int4"}
# CUDA/ROCm device names (cudaDeviceProp.name, as gpu_info prints them) -> catalog names
GPU_NAMES = {"NVIDIA H100 80GB HBM3": "h100-sxm", "NVIDIA H100 PCIe": "h100-pcie", "NVIDIA H200": "h200",
             "NVIDIA A100-SXM4-80GB": "a100-80gb-sxm", "NVIDIA A100-SXM4-40GB": "a100-40gb",
             "NVIDIA A10G": "a10g", "NVIDIA L4": "l4", "NVIDIA L40S": "l40s", "NVIDIA B200": "b200",
             "NVIDIA GeForce RTX 4090": "rtx-4090", "NVIDIA GeForce RTX 3090": "rtx-3090",
             "NVIDIA GeForce RTX 3080": "rtx-3080", "AMD Instinct MI300X": "mi300x"}


def is_llamabench(doc) -> bool:
    rows = doc if isinstance(doc, list) else [doc]
    return bool(rows) and all(isinstance(r, dict) and "avg_ts" in r and "n_prompt" in r for r in rows)


def is_llamabench_csv(header: list[str]) -> bool:
    return all(f in header for f in REQUIRED)


def _flash_attn(r: dict, path: str, where: str) -> bool | None:
    """llama-bench's flash_attn as on (True) or off (False); None when the file leaves it out."""
    v = r.get("flash_attn")
    if v is None:
        return None
    if isinstance(v, bool):
        return v
    text = str(v).strip().lower()
    if text in ("true", "1", "-1", "auto", "on"):
        return True
    if text in ("false", "0", "off"):
        return False
    raise SpecError(path, f"{where}flash_attn", f"expected -1, 0, 1, true or false, got {str(v)[:20]!r}")


def _file_type(model_type: str | None) -> str | None:
    if not model_type:
        return None
    for name, dtype in FILE_TYPES.items():
        if model_type.endswith(" " + name):
            return dtype
    return None


def read(rows: list[dict], path: str) -> list[Run]:
    runs = []
    for i, r in enumerate(rows):
        where = f"row {i + 1}: "
        if not isinstance(r, dict):
            raise SpecError(path, f"row {i + 1}", "must be an object")
        missing = [k for k in REQUIRED if r.get(k) in (None, "")]
        if missing:
            raise SpecError(path, f"row {i + 1}", f"missing {', '.join(missing)} (truncated row?)")
        n_p = S.number(r, "n_prompt", path, where, high=limits.MAX_TOKENS, whole=True, required=True, text=True)
        n_g = S.number(r, "n_gen", path, where, high=limits.MAX_TOKENS, whole=True, required=True, text=True)
        depth = S.number(r, "n_depth", path, where, high=limits.MAX_TOKENS, whole=True, text=True) or 0
        if n_p == 0 and n_g == 0:
            raise SpecError(path, f"{where}n_prompt, n_gen", "both 0: a test of no tokens measured nothing")
        ts = S.number(r, "avg_ts", path, where, above=True, required=True, text=True)
        ubatch = S.number(r, "n_ubatch", path, where, low=1, high=limits.MAX_TOKENS, whole=True, text=True)
        kind = "pp" if n_g == 0 else "tg" if n_p == 0 else "pg"
        metric = {"pp": "prefill_tokens_per_s", "tg": "decode_tokens_per_s", "pg": "tokens_per_s"}[kind]
        label = f"{kind}{n_p or ''}{'+' if kind == 'pg' else ''}{n_g or ''}" + (f"@d{depth}" if depth else "")
        text = {k: S.string(r, k, path, where) for k in ("gpu_info", "model_type", "split_mode", "type_k",
                                                          "model_filename", "build_commit")}
        gpus = [g.strip() for g in str(text["gpu_info"] or "").split(",") if g.strip()]
        cond: dict[str, object] = {"gpu_info": text["gpu_info"], "model_type": text["model_type"],
                                   "n_gpu_layers": S.count(r, "n_gpu_layers", path, where, text=True),
                                   "split_mode": text["split_mode"], "gpus": len(gpus) or None}
        if gpus and gpus[0] in GPU_NAMES and all(g == gpus[0] for g in gpus):
            cond["hardware"] = GPU_NAMES[gpus[0]]
        if (w := _file_type(text["model_type"])) is not None:
            cond["weight_dtype"] = w
        if (kv := KV_TYPES.get(str(text["type_k"] or "").lower())) is not None:
            cond["kv_dtype"] = kv
        if (fa := _flash_attn(r, path, where)) is not None:
            cond["attention"] = "fused" if fa else "unfused"
        build = text["build_commit"]
        # llama.cpp's build: the preset's by_version rules read it (0: built without git, unknown)
        if number := S.count(r, "build_number", path, where, text=True):
            cond["engine_version"] = f"b{number}"
        runs.append(Run(
            file=path, format="llama-bench", served=False, label=f"{i + 1}:{label}", load="batch", batch=1,
            measured=measured(**{metric: ts}), prompt_len=float(n_p), output_len=float(n_g), depth=depth,
            ubatch=ubatch or 512, model_id=text["model_filename"],
            tool_version=f"build {str(r.get('build_number'))[:20]} ({build})" if build else None, conditions=cond,
        ))
    return runs
