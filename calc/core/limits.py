"""The stated ranges every input number must fall in, in one place.

A number read from a file or an option is finite and within these ranges before any work
starts; the spec models reference them in their Field bounds and the CLI checks option
values against them. The bounds are generous physical limits (no 1e9-layer model, no
1e9-request simulation, no infinite price), not tuning knobs; a size guard names its limit
and the environment variable that raises it.
"""

from __future__ import annotations

import math
import os

from calc.core.errors import SpecError

# --- model shape (the largest public models are far inside these)
MAX_LAYERS = 4096                # DeepSeek-V3 has 61, Llama 3.1 405B 126
MAX_DIM = 1 << 22                # hidden, intermediate, head dim, LoRA ranks: 4.2 M
MAX_VOCAB = 1 << 24              # 16.8 M tokens (Gemma 3 has 262 k)
MAX_HEADS = 1 << 16
MAX_EXPERTS = 1 << 16
MAX_CONTEXT = 1 << 30            # positions (Llama 4 Scout: 10 M)

# --- hardware (per device)
MAX_MEMORY_GB = 1e6              # 1 PB
MAX_BANDWIDTH_TB_S = 1e4         # memory bandwidth; H200: 4.8
MAX_LINK_GB_S = 1e6              # interconnect / PCIe per direction
MAX_PEAK_TFLOPS = 1e6            # B200 dense fp4: 9 000
MAX_OVERHEAD_US = 1e7            # 10 s per kernel / step / link latency
MAX_PRICE_USD_H = 1e6            # USD per GPU-hour
MAX_CACHE_MB = 1e6
MAX_WATTS = 1e6

# --- scenarios and simulations
MAX_TOKENS = MAX_CONTEXT         # a prompt or output length
MAX_BATCH = 1 << 24              # sequences per batch
MAX_PARALLEL = 1 << 16           # TP / PP / EP degree, GPUs
MAX_IMBALANCE = 1e3              # MoE busiest-over-mean routed tokens
MAX_SECONDS = 1e9                # SLO targets, times in a CSV
MAX_SEED = 2**32 - 1             # numpy's SeedSequence takes any non-negative int; 32 bits is plenty
MAX_GENERIC = 1e15               # any other number a spec holds

# --- the range each command-line option's values must fall in (low, high)
OPTION_RANGES = {
    "--batch": (1, MAX_BATCH),
    "--prompt-len": (1, MAX_TOKENS),
    "--output-len": (1, MAX_TOKENS),
    "--seq-len": (1, MAX_TOKENS),
    "--context": (1, MAX_TOKENS),
    "--tp": (1, MAX_PARALLEL),
    "--pp": (1, MAX_PARALLEL),
    "--ep": (1, MAX_PARALLEL),
    "--gpus": (1, MAX_PARALLEL),
    "--cached-requests": (0, MAX_BATCH),
    "--group-size": (1, MAX_DIM),
    "--imbalance": (1.0, MAX_IMBALANCE),
    "--spec-k": (1, 1024),                   # draft tokens per verification step
    "--spec-heads": (1, MAX_LAYERS),         # draft-head layers (its width: --spec-heads L:W, up to MAX_DIM)
    "--spec-heads width": (1, MAX_DIM),
}

# --- size guards (raise with the environment variable named in the message)
SCENARIOS_ENV = "ROOFLINE_MAX_SCENARIOS"
REQUESTS_ENV = "ROOFLINE_MAX_REQUESTS"
SIMULATED_ENV = "ROOFLINE_MAX_SIMULATED"
ROWS_ENV = "ROOFLINE_MAX_CSV_ROWS"
FILE_BYTES_ENV = "ROOFLINE_MAX_FILE_MB"
YAML_BYTES_ENV = "ROOFLINE_MAX_YAML_KB"
_DEFAULTS = {SCENARIOS_ENV: 2_000, REQUESTS_ENV: 20_000, SIMULATED_ENV: 500_000, ROWS_ENV: 20_000, FILE_BYTES_ENV: 64,
             YAML_BYTES_ENV: 256}


MAX_CAP = 10**12  # no guard is raised past this (a 10^12-row CSV or 10^12 requests runs for days)


def cap(env: str) -> int:
    """The size limit named by ``env``: the default when unset or empty, else its value, which
    must be a whole number from 1 to MAX_CAP (anything else is an error, never the default
    silently, since the guard's message tells the user to set it)."""
    raw = os.environ.get(env, "").strip()
    if not raw:
        return _DEFAULTS[env]
    if not raw.isdigit() or len(raw) > 13 or not 1 <= int(raw) <= MAX_CAP:
        shown = raw if len(raw) <= 20 else f"{raw[:20]}..."
        raise SpecError(env, None, f"must be a whole number from 1 to {MAX_CAP:,}, got {shown!r}")
    return int(raw)


def max_scenarios() -> int:
    """Scenarios one estimate, intensity or plot may evaluate (and values one option may list):
    2,000 keep them to seconds (10,000 estimates of DeepSeek-V3 take 15 CPU-s); sweep, the
    command for grids, has its own cap (calc.cost.sweep.MAX_SCENARIOS, raised by --yes)."""
    return cap(SCENARIOS_ENV)


def max_requests() -> int:
    """Requests one simulation may draw."""
    return cap(REQUESTS_ENV)


def max_simulated() -> int:
    """Requests x candidate configurations one plan may simulate (the bundled chat workload:
    2,000 x 72 = 144,000, about 4 s)."""
    return cap(SIMULATED_ENV)


def max_csv_rows() -> int:
    """Rows a calibration CSV or trace may hold."""
    return cap(ROWS_ENV)


def max_file_bytes() -> int:
    """Bytes an input file (YAML, JSON, CSV) may hold."""
    return cap(FILE_BYTES_ENV) * 1_000_000


def max_yaml_bytes() -> int:
    """Bytes a YAML spec (model, hardware, workload, preset, kernel table, sidecar) may hold: 256 kB.
    The largest shipped spec is 9 kB and a 10,000-cell kernel table about 150 kB, while the
    pure-Python YAML loader (kept for its recursion limit, calc.spec.yamlio) reads only about
    0.1-0.3 MB/s on a 2-core machine: a 15 MB file ran for minutes, 256 kB takes 1-3 s."""
    return cap(YAML_BYTES_ENV) * 1_000


def too_many(what: str, n: int, limit: int, env: str) -> str:
    """The message of a size guard: the count, the limit and how to raise it."""
    return f"{n:,} {what} exceeds the limit of {limit:,} (set {env} to raise it)"


def bad_number(value: object, high: float, low: float | None = None) -> str | None:
    """Why ``value`` is not a finite number within [low, high] (None when it is fine)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value}"
    if abs(value) > high:
        return f"{short(value)} is out of range (at most {short(high)})"
    if low is not None and value < low:
        return f"{short(value)} is out of range (at least {short(low)})"
    return None


def short(value: float) -> str:
    """A number as a message shows it (a huge integer as its size, not its digits)."""
    if isinstance(value, int) and value.bit_length() > 40:  # str() of > 4300 digits raises
        bits = value.bit_length()
        return f"{float(value):.3g}" if bits < 1000 else f"an integer of about {int(bits * 0.30103) + 1} digits"
    return f"{value:g}" if isinstance(value, float) else str(value)


def host_available_bytes() -> float | None:
    """Host memory free for new work now: /proc/meminfo's MemAvailable (None where the system has
    none to read, e.g. not Linux): what a guard against filling the memory compares with."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        return None
    return None
