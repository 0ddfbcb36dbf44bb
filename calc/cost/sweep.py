"""Grids of scenarios -> one pandas DataFrame, vectorised through the estimators.

The categorical axes (model, hardware, dtypes, TP) are a short Python loop; the
numeric axes (batch, prompt length, output length) are one broadcast numpy call
per combination, evaluated in cache-sized chunks. Columns carry their unit in
the name (``_s``, ``_bytes``, ``_flops``, ``_tokens``, ``_per_s``, ``_usd``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from calc.core import limits
from calc.core.errors import SpecError, TooLarge
from calc.core.progress import Progress, silent
from calc.core.units import usd_per_million_tokens
from calc.cost.latency import estimate
from calc.cost.roofline import BOUNDS
from calc.cost.setup import Setup
from calc.cost.speculative import speculative
from calc.spec.hardware import HardwareSpec
from calc.spec.model import ModelSpec

MAX_SCENARIOS = 1_000_000  # a million scenarios take seconds; 4 million minutes and GBs
MAX_SCENARIOS_YES = 100_000_000  # the most --yes runs
# Peak memory of a sweep per scenario: a million scenarios x 46 columns (bands, no speculative
# columns) peaked at 1.07-1.14 GB resident, into CSV and into Parquet (2-core VM, 2026-12-03):
# the blocks' arrays, the table and its writer's copy. The guard below refuses what would not fit.
PEAK_BYTES_PER_SCENARIO = 1100
BLOCK = 262_144  # scenarios per call over a grid's axes (the decode nodes make 8x as many values)


def _listify(value) -> list:
    if value is None:
        return [None]
    if isinstance(value, (str, int, float)) or not isinstance(value, Sequence):
        return [value]
    return list(value)


def grid_size(**axes) -> int:
    return int(np.prod([len(_listify(v)) for v in axes.values()], dtype=float))


# Text columns of few values, held as codes until the frame is built: column -> labels.
TEXT = {"prefill_bound": BOUNDS, "decode_bound": BOUNDS}
INTEGER = ("batch", "prompt_len", "output_len", "decode_context")


def _band_columns(est, cols: dict, table) -> dict[str, np.ndarray]:
    """<name>_band_lo_s / _band_hi_s (rates: _band_lo_per_s / _band_hi_per_s) for each banded prediction."""
    from calc.spec.bands import BANDED, band_name, is_rate, regime_of

    out = {}
    for name, family in BANDED:
        found = table.lookup(regime_of(family, est.hardware, est.dtypes.weight, est.dtypes.compute, model=est.model))
        if found is not None:
            lo, hi = found.interval(cols[name], is_rate(name))
            stem, unit = band_name(name).rsplit("_band", 1)
            out[f"{stem}_band_lo{unit}"], out[f"{stem}_band_hi{unit}"] = lo, hi
    return out


def columns(est, model, hw, tp, spec=None, bands=None) -> dict[str, np.ndarray]:
    """The DataFrame columns of one vectorised estimate, each in a shape that broadcasts to the
    scenarios' (text columns as codes into TEXT's labels); with ``spec`` (a SpecConfig) the
    speculative-decoding columns too; with ``bands`` (a calc.spec.bands.BandTable) the band columns."""
    gpus = est.parallel.gpus
    out_tps = est.output_tokens_per_s
    cols = {
        "batch": est.batch, "prompt_len": est.prompt_len, "output_len": est.output_len,
        "ttft_s": est.ttft_s, "tpot_s": est.tpot_s, "e2e_s": est.e2e_s,
        "output_tokens_per_s": out_tps, "total_tokens_per_s": est.total_tokens_per_s,
        "prefill_flops": est.prefill.flops, "prefill_bytes": est.prefill.bytes,
        "prefill_intensity": est.prefill.intensity, "prefill_bound": est.prefill.bound_code,
        "decode_context": est.prompt_len, "decode_time_s": est.decode.time_s,
        "decode_flops": est.decode.flops, "decode_bytes": est.decode.bytes,
        "decode_intensity": est.decode.intensity, "decode_bound": est.decode.bound_code,
        "communication_decode_time_s": est.decode.comm_s,
        "memory_weights_bytes": est.memory.weights_bytes, "memory_kv_cache_bytes": est.memory.kv_cache_bytes,
        "memory_activation_bytes": est.memory.activation_bytes, "memory_total_bytes": est.memory.total_bytes,
        "memory_capacity_bytes": est.memory.capacity_bytes, "memory_fits": est.memory.fits,
        "kv_cache_bytes": est.kv_cache_bytes,
    }
    if hw.price is not None:
        cols["usd_per_hour"] = hw.price.usd_per_hour * gpus
        cols["usd_per_million_output_tokens"] = usd_per_million_tokens(hw.price.usd_per_hour * gpus, out_tps)
    if bands is not None and not est.ideal:
        cols.update(_band_columns(est, cols, bands))
    if spec is not None:
        sp = speculative(est, spec)
        cols.update(spec_tokens_per_step=sp.tokens_per_step, spec_tpot_s=sp.tpot_s, spec_speedup=sp.speedup,
                    spec_ttft_s=sp.ttft_s, spec_output_tokens_per_s=sp.output_tokens_per_s,
                    spec_memory_total_bytes=sp.memory_total_bytes, spec_fits=sp.fits)
    return cols


def _dtype(name: str, value) -> np.dtype:
    return np.dtype(np.int64) if name in INTEGER else np.asarray(value).dtype


def _text(codes: np.ndarray, labels) -> object:
    """A text column from codes into labels, built without a Python string per row: as an
    Arrow dictionary decoded in C++ when pandas keeps text in Arrow, else as objects."""
    import pandas as pd

    labels = [str(x) for x in labels]
    dtype = pd.Series(labels[:1]).dtype
    if getattr(dtype, "storage", None) == "pyarrow":
        import pyarrow as pa

        arr = pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32()), pa.array(labels, pa.large_string()))
        return pd.Series(arr.cast(pa.large_string()), dtype=dtype)
    return pd.Series(np.array(labels, dtype=object)[codes], dtype=dtype)


def _blocks(nb: int, nt: int, ng: int):
    """(batch slice, prompt slice) blocks of about BLOCK scenarios each, in the nested row order:
    whole prompt x output planes for several batches, or, when one plane is larger, slices of
    the prompts of one batch."""
    plane = nt * ng
    if plane <= BLOCK:
        step = max(1, BLOCK // plane)
        for i in range(0, nb, step):
            yield slice(i, i + step), slice(0, nt)
        return
    step = max(1, BLOCK // ng)
    for i in range(nb):
        for j in range(0, nt, step):
            yield slice(i, i + 1), slice(j, j + step)


def sweep(model: ModelSpec | list[ModelSpec], hardware: HardwareSpec | list[HardwareSpec], batch=1,
          prompt_len=512, output_len=128, *, weight_dtype=None, kv_dtype=None, compute_dtype=None, tp=1, pp=1,
          attention=None, ideal=False, max_scenarios: int = MAX_SCENARIOS, spec=None, bands=None,
          progress: Progress = silent, **options):
    """Every combination of the given values -> a DataFrame with one row per scenario.

    Each argument takes one value or a list; model and hardware are specs (``calc.sweep``
    resolves names and an engine preset); ``options`` (group_size, ep, imbalance) pass to
    the estimator unchanged. Rows are in the nested order model, hardware, weight dtype,
    KV dtype, TP, batch, prompt, output. ``spec`` (a calc.cost.speculative.SpecConfig) adds
    the spec_* columns: speculative TPOT, speedup, tokens per step, TTFT, throughput, memory.
    ``bands`` (hardware spec -> calc.spec.bands.BandTable or None) adds each time's and rate's band,
    ``ttft_band_lo_s``/``ttft_band_hi_s``, ``output_tokens_band_lo_per_s``/..., where the table has one.
    ``progress(done, total, label)`` after each block.
    """
    import pandas as pd

    axes = dict(model=model, hardware=hardware, weight_dtype=weight_dtype, kv_dtype=kv_dtype, tp=tp, pp=pp,
                batch=batch, prompt_len=prompt_len, output_len=output_len)
    n = grid_size(**axes)
    if n == 0:
        raise SpecError("sweep", None, "the grid is empty: give at least one value for every axis")
    if n > max_scenarios:
        raise TooLarge("sweep", f"the grid has {n:,} scenarios, more than the limit of {max_scenarios:,}",
                       "max_scenarios")
    free = limits.host_available_bytes()
    if free is not None and n * PEAK_BYTES_PER_SCENARIO > free:
        raise SpecError("sweep", None, f"the grid's {n:,} scenarios need about {n * PEAK_BYTES_PER_SCENARIO / 1e9:.1f} GB "
                        f"for their table, more than the {free / 1e9:.1f} GB free now: sweep fewer values at once")
    bv, tv, gv = (np.asarray(_listify(v), float) for v in (batch, prompt_len, output_len))
    per_batch = tv.size * gv.size
    frames = []
    done = 0
    for m_ref, h_ref, wd, kd, tp_n, pp_n in itertools.product(
            _listify(model), _listify(hardware), _listify(weight_dtype), _listify(kv_dtype), _listify(tp),
            _listify(pp)):
        m, hw = m_ref, h_ref
        table = bands(hw) if bands is not None else None
        setup = Setup.of(weight_dtype=wd, kv_dtype=kd, compute_dtype=compute_dtype, attention=attention,
                         ideal=ideal, tp=tp_n, pp=pp_n, **options)
        cols: dict[str, np.ndarray] = {}
        total = bv.size * per_batch
        row = 0
        for bs, ts in _blocks(bv.size, tv.size, gv.size):
            # one call over the block's axes (B x T x G, not expanded): rows in nested order
            est = estimate(m, hw, bv[bs, None, None], tv[None, ts, None], gv[None, None, :], setup)
            shape, size = np.shape(est.batch), np.size(est.batch)
            for k, v in columns(est, m, hw, tp_n, spec, table).items():
                if k not in cols:
                    cols[k] = np.empty(total, dtype=_dtype(k, v))
                np.copyto(cols[k][row:row + size].reshape(shape), v, casting="unsafe")
            row += size
            done += size
            progress(done, n, f"{m.name} on {hw.name}")
        head = {"model": m.name, "hardware": hw.name, "weight_dtype": est.dtypes.weight, "kv_dtype": est.dtypes.kv,
                "compute_dtype": est.dtypes.compute}
        ints = {"tp": int(tp_n), "pp": int(pp_n), "gpus": int(tp_n) * int(pp_n)}
        zeros = np.zeros(total, np.int8)
        data = {k: _text(zeros, [v]) for k, v in head.items()}
        data.update({k: np.full(total, v, np.int64) for k, v in ints.items()})
        data.update({k: _text(v, TEXT[k]) if k in TEXT else v for k, v in cols.items()})
        frame = pd.DataFrame(data, copy=False)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
