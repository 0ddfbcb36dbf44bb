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
    "mxfp4": "fp4",
}

# Dtypes a weight may be stored in but that are never a matmul's compute dtype
# on their own (weight-only quantisation dequantises to the compute dtype).
WEIGHT_ONLY = frozenset({"int4"})
# weight dtypes stored with one fp16 scale per group of weights (--group-size applies to them)
GROUP_SCALED = ("int8", "int4", "fp4")
DEFAULT_GROUP_SIZE = 128  # weights per scale: AWQ/GPTQ checkpoints' usual group


def canonical_dtype(name: str) -> str:
    """Map any accepted spelling to the canonical name; raise ValueError otherwise."""
    key = str(name).strip().lower().replace("torch.", "")
    key = _ALIASES.get(key, key)
    if key not in DTYPE_BYTES:
        known = ", ".join(DTYPE_BYTES)
        raise ValueError(f"unknown dtype {name!r} (known: {known})")
    return key


def dtype_bytes(name: str) -> float:
    """Bytes per element of a dtype (0.5 for 4-bit types)."""
    return DTYPE_BYTES[canonical_dtype(name)]


def serving_dtype(name: str) -> str:
    """The dtype a serving engine's "auto" runs a checkpoint in: fp32 becomes bf16."""
    key = canonical_dtype(name)
    return "bf16" if key == "fp32" else key
