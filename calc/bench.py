"""Speed figures the issues promise, printed: `python -m calc.bench`.

1. Cold `roofline estimate` (a fresh process, imports included), median of 5.
2. Vectorized throughput: one million (B, T, S) scenarios through the prefill and
   decode-step operator model and roofline in one call.
3. Full request estimates (prefill, TPOT averaged over the decode steps, memory)
   for one million (B, T, G) scenarios.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

import numpy as np

from calc import load_hardware, load_model
from calc.latency import decode_cost, estimate, prefill_cost
from calc.operators import Dtypes
from calc.roofline import Efficiency


def cold_estimate_s(runs: int = 5) -> float:
    cmd = [sys.executable, "-m", "calc.cli", "estimate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm"]
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def scenarios_per_s(n: int = 1_000_000, model: str = "llama-3.1-8b", hardware: str = "h100-sxm") -> float:
    m, hw = load_model(model), load_hardware(hardware)
    rng = np.random.default_rng(0)
    B = rng.integers(1, 257, n).astype(float)
    T = rng.integers(1, 8193, n).astype(float)
    S = rng.integers(1, 32769, n).astype(float)
    dt, eff = Dtypes.resolve(m), Efficiency.of(hw)
    t0 = time.perf_counter()
    pre = prefill_cost(m, hw, B, T, dt, eff)[0]
    dec = decode_cost(m, hw, B, S, dt, eff)
    _ = (pre.time_s, pre.bound, dec.time_s, dec.bound, pre.flops, dec.bytes)
    return n / (time.perf_counter() - t0)


def requests_per_s(n: int = 1_000_000, model: str = "llama-3.1-8b", hardware: str = "h100-sxm") -> float:
    m, hw = load_model(model), load_hardware(hardware)
    rng = np.random.default_rng(1)
    B = rng.integers(1, 257, n).astype(float)
    T = rng.integers(1, 8193, n).astype(float)
    G = rng.integers(1, 4097, n).astype(float)
    t0 = time.perf_counter()
    est = estimate(m, hw, B, T, G)
    _ = (est.ttft_s, est.tpot_s, est.e2e_s, est.memory.fits)
    return n / (time.perf_counter() - t0)


def main() -> None:
    print(f"cold `roofline estimate` (median of 5 processes): {cold_estimate_s():.3f} s   (target < 0.5 s)")
    print(f"vectorized (B, T, S) phase scenarios:              {scenarios_per_s():,.0f} /s (target >= 1,000,000 /s)")
    print(f"vectorized full requests (TTFT, TPOT over G-1, memory): {requests_per_s():,.0f} /s")


if __name__ == "__main__":
    main()
