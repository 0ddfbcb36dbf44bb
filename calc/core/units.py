"""Units and dtypes: the one place data-sheet units and dtype widths live.

Inside the code everything is SI (FLOPs, bytes, seconds, FLOP/s, bytes/s).
GB and TB are decimal; GiB is binary and named so.
"""

from __future__ import annotations

KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
GiB = 2.0**30
MiB = 2.0**20
TERA = 1e12
GIGA = 1e9
MICRO = 1e-6
MILLI = 1e-3
HOUR_S = 3600.0
MILLION = 1e6


def usd_per_million_tokens(usd_per_hour, tokens_per_s):
    """USD per million tokens at ``tokens_per_s`` for ``usd_per_hour`` (numbers or arrays)."""
    return usd_per_hour / HOUR_S / tokens_per_s * MILLION

# Canonical dtype name -> bytes per element.  Sub-byte widths are fractions,
# never integer-divided.
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "tf32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "fp4": 0.5,
    "mxfp4": 0.5,
}

# Spellings people and config.json files use -> canonical name.
_ALIASES: dict[str, str] = {
    "float32": "fp32",
    "float": "fp32",
    "f32": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "f16": "fp16",
    "float8": "fp8",
    "float8_e4m3fn": "fp8",
    "float8_e4m3": "fp8",
    "e4m3": "fp8",
    "float8_e5m2": "fp8",
    "nvfp4": "fp4",
}

# Dtypes a weight may be stored in but that are never a matmul's compute dtype
# on their own (weight-only quantisation dequantises to the compute dtype).
WEIGHT_ONLY = frozenset({"int4"})
# weight dtypes stored with one fp16 scale per group of weights (--group-size applies to them)
GROUP_SCALED = ("int8", "int4", "fp4")
INTEGER_WEIGHTS = ("int8", "int4")  # the integer ones (GGUF q8_0, q4_0, q4_K ... as the catalog states them)
DEFAULT_GROUP_SIZE = 128  # weights per scale: AWQ/GPTQ checkpoints' usual group
# Block-scaled formats whose block is part of the format: dtype -> (weights per scale, scale bytes).
# OCP Microscaling (MX) v1.0: 32 E2M1 values share one E8M0 scale byte, 4.25 bits a weight
# (OCP MX spec v1.0; https://arxiv.org/abs/2310.10537, Table 1: MXFP4 block 32, scale E8M0).
FIXED_BLOCK: dict[str, tuple[int, float]] = {"mxfp4": (32, 1.0)}
# weights dequantised inside a wider matmul when the compute dtype is 16/32-bit
SCALED_WEIGHTS = GROUP_SCALED + tuple(FIXED_BLOCK)


def canonical_dtype(name: str) -> str:
    """Map any accepted spelling to the canonical name; raise ValueError otherwise."""
    if type(name) is str and name in DTYPE_BYTES:  # already canonical (the cost model's hot path)
        return name
    key = str(name).strip().lower().replace("torch.", "")
    key = _ALIASES.get(key, key)
    if key not in DTYPE_BYTES:
        known = ", ".join(DTYPE_BYTES)
        raise ValueError(f"unknown dtype {name!r} (known: {known})")
    return key


def dtype_bytes(name: str) -> float:
    """Bytes per element of a dtype (0.5 for 4-bit types)."""
    return DTYPE_BYTES[canonical_dtype(name)]


def weight_bytes_per_param(name: str, group_size: int = DEFAULT_GROUP_SIZE) -> float:
    """Bytes a stored weight takes with its scales: bytes(dtype), plus 2 / group_size (one fp16
    scale per group) for int8/int4/fp4, or scale_bytes / block for a fixed-block format
    (mxfp4: 0.5 + 1/32 = 0.53125). fp8 uses per-tensor or per-block fp32 scales (negligible)."""
    key = canonical_dtype(name)
    if key in FIXED_BLOCK:
        block, scale = FIXED_BLOCK[key]
        return DTYPE_BYTES[key] + scale / block
    return DTYPE_BYTES[key] + (2.0 / group_size if key in GROUP_SCALED else 0.0)


def serving_dtype(name: str) -> str:
    """The dtype a serving engine's "auto" runs a checkpoint in: fp32 becomes bf16."""
    key = canonical_dtype(name)
    return "bf16" if key == "fp32" else key
