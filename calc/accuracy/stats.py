"""Error figures: median and p90 of |error|, and bias as the median predicted/measured time.

error = predicted / measured - 1 on the row's own metric. Bias is stated in time, so that
"above 1" means pessimistic for every metric: predicted / measured for times (TTFT, TPOT,
e2e), measured / predicted for rates (tokens/s), whose time is their inverse.
"""

from __future__ import annotations

import math

import numpy as np

TIME_METRICS = ("ttft_s", "tpot_s", "e2e_s")
# Metrics grouped by the phase they measure, for the per-phase figures and the bias targets.
PHASE = {"ttft_s": "TTFT", "prefill_tokens_per_s": "TTFT", "tpot_s": "decode", "decode_tokens_per_s": "decode",
         "e2e_s": "e2e", "output_tokens_per_s": "throughput", "output_tokens_per_s_per_gpu": "throughput",
         "total_tokens_per_s": "throughput"}


def error(predicted: float, measured: float) -> float:
    """Signed relative error of a prediction, (predicted - measured) / measured."""
    return predicted / measured - 1.0


def time_ratio(predicted: float, measured: float, metric: str) -> float:
    """Predicted over measured time: > 1 pessimistic (slower than measured)."""
    return predicted / measured if metric in TIME_METRICS else measured / predicted


def stats(errors) -> dict:
    """n, median and 90th percentile of |error| over the finite errors."""
    a = np.abs(np.asarray([e for e in errors if math.isfinite(e)], dtype=float))
    if a.size == 0:
        return {"n": 0, "median": float("nan"), "p90": float("nan")}
    return {"n": int(a.size), "median": float(np.median(a)), "p90": float(np.percentile(a, 90))}


def bias(ratios) -> float:
    """Median of predicted/measured time ratios (1: unbiased); nan with none finite."""
    a = np.asarray([r for r in ratios if math.isfinite(r) and r > 0], dtype=float)
    return float(np.median(a)) if a.size else float("nan")
