"""Prediction bands: how far a prediction may be from what will be measured, as data.

A band is the empirical distribution of held-out residuals (calc.accuracy.bands builds it
from the leave-one-source-out scoring of `roofline accuracy`, never from in-sample fits):

    residual r = log(predicted time / measured time)   (a rate: log(measured / predicted))

so r > 0 means the prediction was pessimistic (slower than measured), for times and rates
alike, and the residuals of TTFT and prefill tokens/s rows pool into one family. The band
keeps the 10% and 90% quantiles of r (QUANTILES, the central 80%): a new prediction x of a
time then brackets the measurement between x * exp(-r90) and x * exp(-r10); of a rate
between x * exp(r10) and x * exp(r90).

Bands are grouped by regime, from the broadest group to the most specific:

    all > family > family/load > family/load/arch > .../engine > .../precision > .../gpu

(family: ttft, decode, e2e, throughput; load: LOAD_LEVELS; arch: dense or moe; engine: the preset's name;
precision: precision_class; gpu: GPU_FAMILY). A group is stored only when it rests on at
least MIN_ROWS residuals (the published bands: from at least MIN_SOURCES publishers); a
lookup takes the most specific stored group of the regime, so a regime with too few rows
falls back to the next broader one, and the band says which group and how many rows it
came from. The lookup widens the band's log half-width by the table's factor for the
group it came from, else for the regime's scale key (its family and load level), calibrated so that bands cover
their 80% of rows held out by source. The published bands ship as
calc/data/bands.yaml; a calibrated local profile carries its own (``bands:``), from its
held-out validation (`roofline validate`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import numpy as np
from pydantic import Field

from calc.core.units import INTEGER_WEIGHTS
from calc.spec.base import SpecModel

BANDS_FILE = Path(__file__).resolve().parents[1] / "data" / "bands.yaml"
QUANTILES = (0.1, 0.9)  # the 80% band
COVERAGE = QUANTILES[1] - QUANTILES[0]
MIN_ROWS = 20  # residuals a group needs to be stored: each 10% tail then rests on >= 2 rows
# Publishers the published bands' groups need: a band is for a source not yet seen, and one
# publisher's rows share its setup (a band from them alone is as narrow as that setup's scatter).
MIN_SOURCES = 3
# The regime, broadest key first. The load level comes next to the family: a prediction under a
# queue errs by the queue model's error on top of the pass model's, so a per-pass band falls back
# to other per-pass rows before it takes in rows of its architecture under load.
KEYS = ("family", "load", "arch", "engine", "precision", "gpu")
FAMILIES = ("ttft", "decode", "e2e", "throughput")
# Load levels: a fixed batch with no queue (one pass after another, as `estimate` models),
# requests in flight (client concurrency, or the mean in flight of an open loop), and
# requests offered at an unbounded rate (offline throughput benchmarks).
LOAD_LEVELS = ("pass", "low", "medium", "high", "saturated")
LOW_MAX, MEDIUM_MAX = 4, 32  # in flight: low <= 4 < medium <= 32 < high
# Catalog GPUs by architecture, for the per-family bands and figures.
GPU_FAMILY = {"a100-40gb": "Ampere", "a100-80gb-sxm": "Ampere", "a10g": "Ampere", "rtx-3080": "Ampere",
              "rtx-3090": "Ampere", "l4": "Ada", "l40s": "Ada", "rtx-4090": "Ada", "h100-sxm": "Hopper",
              "h100-pcie": "Hopper", "h200": "Hopper", "b200": "Blackwell", "gb200": "Blackwell",
              "mi300x": "CDNA3", "mi325x": "CDNA3"}


def metric_family(metric: str) -> str | None:
    """The family a metric's residuals pool into: TTFT (and prefill tokens/s), decode (TPOT, ITL,
    decode tokens/s), e2e, throughput (output/total tokens/s, requests/s); None: not a time or rate."""
    if metric.startswith(("ttft", "prefill")):
        return "ttft"
    if metric.startswith(("tpot", "itl", "decode")):
        return "decode"
    if metric.startswith("e2e"):
        return "e2e"
    if metric.endswith("_per_s") or "_per_s_" in metric:
        return "throughput"
    return None


def is_rate(metric: str) -> bool:
    return "_per_s" in metric


def load_level(batch: int | None = None, in_flight: float | None = None) -> str:
    """A fixed ``batch`` -> "pass"; requests in flight (concurrency) -> low / medium / high;
    neither -> "saturated" (offered at an unbounded rate)."""
    if batch:
        return "pass"
    if in_flight is None or not math.isfinite(in_flight):
        return "saturated"
    return "low" if in_flight <= LOW_MAX else "medium" if in_flight <= MEDIUM_MAX else "high"


def precision_class(weight_dtype: str | None, compute_dtype: str | None) -> str:
    """fp8 (fp8 matmuls), fp4 (fp4 weights), int-weight (int8/int4 weights, 16-bit matmuls),
    16bit (bf16/fp16), fp32; "other" for what none of these names."""
    w, c = weight_dtype or "", compute_dtype or weight_dtype or ""
    if c == "fp8" or (w == "fp8" and not compute_dtype):
        return "fp8"
    if w in ("fp4", "mxfp4"):
        return "fp4"
    if w in INTEGER_WEIGHTS:
        return "int-weight"
    if c in ("bf16", "fp16") or w in ("bf16", "fp16"):
        return "16bit"
    return "fp32" if c == "fp32" or w == "fp32" else "other"


def gpu_family(hardware: str) -> str:
    """The architecture of a catalog GPU, lower case as in group names ("other": not in GPU_FAMILY)."""
    return GPU_FAMILY.get(hardware, "other").lower()


@dataclass(frozen=True)
class Regime:
    """What a prediction is of: its family, model architecture (arch_of), load level, engine
    preset, precision class, GPU family."""

    family: str
    load: str
    engine: str
    precision: str
    gpu: str
    arch: str

    def groups(self) -> list[str]:
        """Group names, most specific first, ending with "all"."""
        parts = [getattr(self, k) for k in KEYS]
        return ["/".join(parts[:k]) for k in range(len(parts), 0, -1)] + ["all"]

    @property
    def scale_key(self) -> str:
        """The key of the band's widening: its family and load level ("decode/high")."""
        return f"{self.family}/{self.load}"


class Band(SpecModel):
    """The residual quantiles of one group: log(predicted / measured time) at QUANTILES."""

    rows: int = Field(ge=1)
    log_lo: float
    log_hi: float
    sources: int = Field(default=1, ge=1)  # publishers (or held-out models) the rows came from

    def interval(self, value, rate: bool):
        """(low, high) bracketing the measurement of a prediction ``value`` (array or scalar)."""
        x = np.asarray(value, dtype=float)
        if rate:
            return x * math.exp(self.log_lo), x * math.exp(self.log_hi)
        return x * math.exp(-self.log_hi), x * math.exp(-self.log_lo)

    def half_width(self, rate: bool) -> float:
        """Half the band's width relative to its prediction."""
        lo, hi = self.interval(1.0, rate)
        return float(hi - lo) / 2

    @property
    def log_centre(self) -> float:
        return (self.log_lo + self.log_hi) / 2

    @property
    def log_half(self) -> float:
        """Half the band's width in log space (what a widening multiplies)."""
        return (self.log_hi - self.log_lo) / 2

    def widened(self, factor: float) -> Band:
        """The band with its half-width (in log space, about its centre) times ``factor``."""
        if factor == 1.0:
            return self
        mid, half = self.log_centre, self.log_half * factor
        return self.model_copy(update={"log_lo": mid - half, "log_hi": mid + half})


@dataclass(frozen=True)
class Found:
    """A lookup's answer: the band and the group it came from."""

    group: str
    band: Band

    def interval(self, value, rate: bool):
        return self.band.interval(value, rate)


class BandTable(SpecModel):
    """Stored groups (each with >= min_rows residuals) and how they were made."""

    coverage: float = Field(default=COVERAGE, gt=0, lt=1)
    quantiles: tuple[float, float] = QUANTILES
    min_rows: int = Field(default=MIN_ROWS, ge=1)
    min_sources: int = Field(default=1, ge=1)
    source: str = ""
    groups: dict[str, Band] = Field(default_factory=dict)
    # Factors on each band's log half-width by Regime.scale_key ("all": any other key), calibrated
    # so that bands cover COVERAGE of rows held out by source (calc.accuracy.bands.widening).
    widen: dict[str, Annotated[float, Field(gt=0)]] = Field(default_factory=dict)
    # The same factors by the group a band came from, where that group alone has enough held-out
    # rows and sources: they take precedence over the scale key's.
    widen_groups: dict[str, Annotated[float, Field(gt=0)]] = Field(default_factory=dict)

    def lookup(self, regime: Regime) -> Found | None:
        """The most specific stored group of the regime, widened by its group's factor, else its
        scale key's (None: not even "all" is stored)."""
        for g in regime.groups():
            if g in self.groups:
                factor = self.widen_groups.get(g) or self.widen.get(regime.scale_key, self.widen.get("all", 1.0))
                return Found(g, self.groups[g].widened(factor))
        return None


def load_bands(path: Path = BANDS_FILE) -> BandTable | None:
    """The published bands (None: no file, e.g. before the first `roofline accuracy`)."""
    from calc.spec.yamlio import build, read_yaml

    if not path.exists():
        return None
    return build(BandTable, read_yaml(path), path)


_PUBLISHED: list = []


def published_bands() -> BandTable | None:
    """calc/data/bands.yaml, read once."""
    if not _PUBLISHED:
        _PUBLISHED.append(load_bands())
    return _PUBLISHED[0]


def bands_for(hw) -> tuple[BandTable | None, str]:
    """The bands that describe predictions on ``hw``, and whence: the profile's own (its held-out
    validation), else the published ones for a GPU; a CPU or TPU profile without bands of its own
    gets none (the published rows are all GPUs)."""
    own = getattr(hw, "bands", None)
    if own is not None:
        return own, f"{hw.name}'s held-out validation"
    if hw.kind != "gpu":
        return None, f"{hw.name} is a {hw.kind} profile without bands of its own (roofline validate writes them)"
    table = published_bands()
    if table is None:
        return None, "no published bands (calc/data/bands.yaml; roofline accuracy writes it)"
    return table, "published measurements, held out by source"


# The predictions a band brackets, with their family: the request's times and rates.
BANDED = (("ttft_s", "ttft"), ("tpot_s", "decode"), ("e2e_s", "e2e"), ("output_tokens_per_s", "throughput"),
          ("total_tokens_per_s", "throughput"))


def band_name(name: str) -> str:
    """The key of a prediction's band: ttft_s -> ttft_band_s, output_tokens_per_s -> output_tokens_band_per_s."""
    if name.endswith("_per_s"):
        return name.removesuffix("_per_s") + "_band_per_s"
    return name.removesuffix("_s") + "_band_s"


def arch_of(model) -> str:
    """"moe" for a mixture-of-experts ModelSpec (routed experts: their own kernels and load
    balance), else "dense" (calc.spec.catalog.arch_of_name for a catalog name)."""
    return "moe" if model.moe is not None and model.moe.num_experts else "dense"


def regime_of(family: str, hw, weight_dtype: str | None, compute_dtype: str | None, load: str = "pass",
              model=None) -> Regime:
    """The regime of a prediction of ``model`` on profile ``hw`` (its engine preset, its GPU
    family) at these dtypes."""
    engine = hw.preset.name if hw.preset is not None else "default"
    return Regime(family, load, engine, precision_class(weight_dtype, compute_dtype), gpu_family(hw.name),
                  arch_of(model))


def band_block(table: BandTable, source: str, found: dict[str, Found]) -> dict:
    """The JSON ``band`` block: nominal coverage, whence, each prediction's group and rows, and at the
    top the fewest rows any of them rests on (with that band's group)."""
    weakest = min(found.items(), key=lambda kv: kv[1].band.rows)[1] if found else None
    return {"coverage": table.coverage, "quantiles": list(table.quantiles), "source": source,
            "rows": weakest.band.rows if weakest else None, "group": weakest.group if weakest else None,
            "by_prediction": {k: {"group": f.group, "rows": f.band.rows} for k, f in found.items()}}
