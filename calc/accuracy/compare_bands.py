"""Bands for `roofline compare`: each predicted metric's 80% range, to say whether the run's
measurement fell inside it (calc.spec.bands: the published bands, or the profile's own).

A run's regime: the metric's family, its load level (a fixed batch or llama-bench: pass; N
concurrent clients: N in flight; an arrival rate: rate x the predicted mean e2e in flight, by
Little's law, the e2e from TTFT + (G - 1) TPOT where the run has none; a burst: every request in flight, up to max_num_seqs), the preset's engine, the
run's precision class and GPU family.
"""

from __future__ import annotations

import math

from calc.spec.bands import (
    Found,
    Regime,
    bands_for,
    gpu_family,
    load_level,
    metric_family,
    precision_class,
)
from calc.spec.catalog import arch_of_name


def _load(sc, pred: dict[str, float]) -> str:
    run = sc.run
    if run.format == "llama-bench" or run.load == "batch":
        return "pass"
    if run.load == "concurrency":
        return load_level(in_flight=run.concurrency)
    if run.load == "rate":
        e2e = pred.get("e2e_mean_s", math.nan)
        if not math.isfinite(e2e):  # TTFT + (G - 1) TPOT, where the run measured those instead
            e2e = pred.get("ttft_mean_s", math.nan) + (float(sc.output_lens.mean()) - 1) * pred.get("tpot_mean_s", math.nan)
        ramp = getattr(run, "ramp_up", None)
        rate = run.rate_per_s if ramp is None else _ramp_mean_rate(*ramp)
        return load_level(in_flight=rate * e2e) if math.isfinite(e2e) else "saturated"
    return load_level(in_flight=min(run.num_requests or sc.max_num_seqs, sc.max_num_seqs))


def _ramp_mean_rate(strategy: str, lo: float, hi: float) -> float:
    """vLLM's ramp-up rate averaged over the run's progress 0..1: (lo + hi) / 2 for a linear ramp,
    (hi - lo) / ln(hi / lo) for an exponential one (lo (hi / lo)^p integrated over p)."""
    if strategy == "linear" or hi == lo:
        return (lo + hi) / 2
    return (hi - lo) / math.log(hi / lo)


def run_bands(sc, preset, dtypes, pred: dict[str, float]) -> tuple[dict[str, Found], str]:
    """metric -> its band, for every predicted metric with a family; and whence the bands came."""
    from calc.spec.catalog import load_hardware

    if preset.ideal:
        return {}, "the ideal roofline has no bands"
    hw = load_hardware(sc.hardware).with_engine(preset)
    table, source = bands_for(hw)
    if table is None:
        return {}, source
    engine = preset.name.removesuffix("-fit")
    load = _load(sc, pred)
    out = {}
    for m in pred:
        family = metric_family(m)
        if family is None:
            continue
        found = table.lookup(Regime(family, load, engine, precision_class(dtypes.weight, dtypes.compute),
                                    gpu_family(hw.name), arch_of_name(sc.model)))
        if found is not None:
            out[m] = found
    return out, source
