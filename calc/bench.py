"""Speed figures the issues promise, printed: `python -m calc.bench`.

1. Cold `roofline estimate` (a fresh process, imports included), median of 5.
2. Vectorized throughput: one million (B, T, S) scenarios through the prefill and
   decode-step operator model and roofline in one call.
3. `calc.sweep` over a million (B, T, G) requests (prefill, TPOT averaged over the
   decode steps, memory) into a DataFrame; writing it as CSV is timed apart.
"""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np

from calc import load_hardware, load_model
from calc.cost.dtypes import Dtypes
from calc.cost.efficiency import Efficiency
from calc.cost.latency import decode_cost, prefill_cost
from calc.cost.sweep import CHUNK

_TIMER = """
import statistics, subprocess, sys, time
cmd, runs = sys.argv[2:], int(sys.argv[1])
times = []
for _ in range(runs):
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    times.append(time.perf_counter() - t0)
print(statistics.median(times))
"""


def cold_estimate_s(runs: int = 5) -> float:
    """Median wall time of the installed console script next to this interpreter (what a
    user runs; a version manager's shim in front of it adds its own start-up), else
    ``python -m calc.cli.app``. The clock runs in a bare interpreter, apart from this process.
    On a shared 2-core machine the figure moves by +-0.1 s with other load."""
    from pathlib import Path

    script = Path(sys.executable).with_name("roofline")
    head = [str(script)] if script.exists() else [sys.executable, "-m", "calc.cli.app"]
    cmd = [*head, "estimate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm"]
    out = subprocess.run([sys.executable, "-c", _TIMER, str(runs), *cmd], check=True, capture_output=True, text=True)
    return float(out.stdout)


def scenarios_per_s(n: int = 1_000_000, model: str = "llama-3.1-8b", hardware: str = "h100-sxm") -> float:
    m, hw = load_model(model), load_hardware(hardware)
    rng = np.random.default_rng(0)
    B = rng.integers(1, 257, n).astype(float)
    T = rng.integers(1, 8193, n).astype(float)
    S = rng.integers(1, 32769, n).astype(float)
    dt, eff = Dtypes.resolve(m), Efficiency.of(hw)
    t0 = time.perf_counter()
    for i in range(0, n, CHUNK):  # cache-sized chunks of one vectorised call each
        sl = slice(i, i + CHUNK)
        pre = prefill_cost(m, hw, B[sl], T[sl], dt, eff)[0]
        dec = decode_cost(m, hw, B[sl], S[sl], dt, eff)
        _ = (pre.time_s, pre.bound, dec.time_s, dec.bound, pre.flops, dec.bytes)
    return n / (time.perf_counter() - t0)


def sweep_million_s() -> tuple[float, float, int]:
    """(seconds to build the DataFrame, seconds to write it as CSV, rows)."""
    import tempfile

    from calc import sweep
    from calc.render.frames import write_frame

    t0 = time.perf_counter()
    df = sweep("llama-3.1-8b", "h100-sxm", batch=list(range(1, 101)), prompt_len=list(range(128, 12929, 128)),
               output_len=list(range(16, 1601, 16)))
    built = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        write_frame(df[["batch", "prompt_tokens", "output_tokens", "ttft_s", "tpot_s"]], f"{d}/s.csv")
        written = time.perf_counter() - t0
    return built, written, len(df)


def main() -> None:
    print(f"cold `roofline estimate` (median of 5 processes): {cold_estimate_s():.3f} s   (target < 0.5 s)")
    print(f"vectorized (B, T, S) phase scenarios:              {scenarios_per_s():,.0f} /s (target >= 1,000,000 /s)")
    built, written, rows = sweep_million_s()
    print(f"calc.sweep over {rows:,} requests -> DataFrame:   {built:.2f} s   (target < 5 s)")
    print(f"  writing 5 of its columns as CSV:                {written:.2f} s   (pandas text formatting)")


if __name__ == "__main__":
    main()
