"""The JSON contract of `roofline estimate` (DESIGN.md), built in one place, and its text form."""

from __future__ import annotations

import math

import numpy as np

from calc.core import text as render
from calc.core.units import usd_per_million_tokens
from calc.cost.latency import Estimate
from calc.cost.roofline import PhaseCost
from calc.cost.speculative import SpecEstimate


def _at(value, i: tuple):
    arr = np.asarray(value)
    v = arr[i] if arr.ndim else arr
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, np.str_):
        return str(v)
    f = float(v)
    return None if math.isnan(f) else f


def _phase(ph: PhaseCost, i: tuple) -> dict:
    return {
        "flops": _at(ph.flops, i),
        "linear_flops": _at(ph.linear_flops, i),
        "attention_flops": _at(ph.attention_flops, i),
        "other_flops": _at(ph.other_flops, i),
        "bytes": _at(ph.bytes, i),
        "bytes_by_stream": {k: _at(v, i) for k, v in ph.stream_bytes().items()},
        "intensity": _at(ph.intensity, i),
        "compute_s": _at(ph.compute_s, i),
        "memory_s": _at(ph.memory_s, i),
        "time_s": _at(ph.time_s, i),
        "bound": _at(ph.bound, i),
    }


def _speculative(sp: SpecEstimate, i: tuple) -> dict:
    c = sp.config
    return {
        "draft": sp.draft_name,
        "draft_kind": "model" if c.draft is not None else "heads",
        "draft_tp": sp.draft_tp,
        "k": c.k,
        "acceptance": c.acceptance,
        "tokens_per_step": sp.tokens_per_step,
        "draft_step_s": _at(sp.draft_step_s, i),
        "verify_step_s": _at(sp.verify_step_s, i),
        "step_s": _at(sp.step_mean_s, i),
        "tpot_s": _at(sp.tpot_s, i),
        "plain_tpot_s": _at(sp.plain_tpot_s, i),
        "speedup": _at(sp.speedup, i),
        "ttft_s": _at(sp.ttft_s, i),
        "e2e_s": _at(sp.e2e_s, i),
        "output_tokens_per_s": _at(sp.output_tokens_per_s, i),
        "draft_weight_bytes": sp.draft_weight_bytes,
        "draft_kv_cache_bytes": _at(sp.draft_kv_cache_bytes, i),
        "memory_total_bytes": _at(sp.memory_total_bytes, i),
        "fits": _at(sp.fits, i),
    }


def _add_bands(rec: dict, est: Estimate, bands) -> None:
    """Each banded time or rate's ``<name>_band_s`` / ``<name>_band_per_s`` pair beside it (the
    measurement's 80% range, calc.spec.bands), prefill and decode ``time_band_s``, and the ``band`` block;
    ``bands`` is (table or None, whence)."""
    from calc.spec.bands import BANDED, band_block, band_name, is_rate, regime_of

    table, source = bands
    if table is None or est.ideal:
        rec["band"] = None
        rec["band_note"] = "the ideal roofline has no bands" if est.ideal else source
        return
    found = {}
    hw, dt = est.hardware, est.dtypes

    def put(block: dict, name: str, family: str, label: str) -> None:
        f = table.lookup(regime_of(family, hw, dt.weight, dt.compute, model=est.model))
        if f is None or block.get(name) is None:
            return
        lo, hi = f.interval(block[name], is_rate(name))
        block[band_name(name)] = [float(lo), float(hi)]
        found[label] = f

    for name, family in BANDED:
        put(rec, name, family, name)
    put(rec["prefill"], "time_s", "ttft", "prefill.time_s")
    put(rec["decode"], "time_s", "decode", "decode.time_s")
    rec["band"] = band_block(table, source, found)


def estimate_records(est: Estimate, spec: SpecEstimate | None = None, bands=None) -> list[dict]:
    """One contract dict per scenario (B, T, G broadcast together), in C order; with ``spec``,
    a ``speculative`` block beside the contract keys (which it leaves as they are); with ``bands``
    ((table or None, whence): calc.spec.bands.bands_for), the prediction bands beside each time and rate."""
    shape = np.shape(est.batch)
    hw = est.hardware
    usd_h = hw.price.usd_per_hour * est.parallel.gpus if hw.price is not None else None  # all the request's GPUs
    out = []
    for i in np.ndindex(shape) if shape else [()]:
        G = _at(est.output_len, i)
        rec = {
            "model": est.model.name,
            "hardware": hw.name,
            "batch": int(_at(est.batch, i)),
            "prompt_len": int(_at(est.prompt_len, i)),
            "output_len": int(G),
            "weight_dtype": est.dtypes.weight,
            "kv_dtype": est.dtypes.kv,
            "compute_dtype": est.dtypes.compute,
            "compute_runs_as": hw.runs_as(est.dtypes.compute),  # the peak that applies (the chip may lack the dtype)
            "attention": est.attention,
            "ideal": est.ideal,
            "calibrated": hw.calibration is not None,
            "kernel_tables": len(hw.kernel_set) if not est.ideal else 0,
            "threads": hw.threads,
            "tp": est.parallel.tp,
            "pp": est.parallel.pp,
            "ep": est.parallel.ep,
            "gpus": est.parallel.gpus,
            "weight_bytes": est.weight_bytes,
            "kv_cache_bytes": _at(est.kv_cache_bytes, i),
            "prefill": _phase(est.prefill, i),
            "decode": {"context": int(_at(est.prompt_len, i)), **_phase(est.decode, i)},
            "ttft_s": _at(est.ttft_s, i),
            "serving_overhead_s": est.serving_overhead_s,
            "tpot_s": _at(est.tpot_s, i) if G > 1 else None,
            "e2e_s": _at(est.e2e_s, i),
            "output_tokens_per_s": _at(est.output_tokens_per_s, i),
            "total_tokens_per_s": _at(est.total_tokens_per_s, i),
            "ridge_point": hw.ridge_point(est.dtypes.compute),
            "usd_per_hour": usd_h,
            "usd_per_million_output_tokens": (None if usd_h is None else
                                              _at(usd_per_million_tokens(usd_h, est.output_tokens_per_s), i)),
            "communication": {
                "prefill": {"bytes": _at(est.prefill.comm_bytes, i), "time_s": _at(est.prefill.comm_s, i)},
                "decode": {"bytes": _at(est.decode.comm_bytes, i), "time_s": _at(est.decode.comm_s, i)},
            },
            "memory": {
                "weights_bytes": _at(est.memory.weights_bytes, i),
                "kv_cache_bytes": _at(est.memory.kv_cache_bytes, i),
                "activation_bytes": _at(est.memory.activation_bytes, i),
                "total_bytes": _at(est.memory.total_bytes, i),
                "capacity_bytes": est.memory.capacity_bytes,
                "fits": _at(est.memory.fits, i),
                "shortfall_bytes": _at(est.memory.shortfall_bytes, i),
            },
        }
        if est.parallel.pp > 1:
            rec["pipeline"] = {
                "prefill_stage_s": _at(est.stage_s(est.prefill), i),
                "decode_stage_s": _at(est.stage_s(est.decode), i),
                "output_tokens_per_s": _at(est.pipelined_output_tokens_per_s, i),
            }
        if spec is not None:
            rec["speculative"] = _speculative(spec, i)
        if bands is not None:
            _add_bands(rec, est, bands)
        out.append(rec)
    return out


def flat_record(rec: dict) -> dict:
    """Nested contract dict -> one flat CSV row (prefill.time_s -> prefill_time_s)."""
    flat: dict = {}
    for k, v in rec.items():
        if isinstance(v, dict):
            for k2, v2 in flat_record(v).items():
                flat[f"{k}_{k2}"] = v2
        else:
            flat[k] = v
    return flat


def _fit_line(m: dict) -> str:
    used = f"{render.nbytes(m['total_bytes'])} of {render.nbytes(m['capacity_bytes'])}"
    if m["fits"]:
        return f"fits: {used} ({render.percent(m['total_bytes'] / m['capacity_bytes'])})"
    return f"DOES NOT FIT: {used}, short by {render.nbytes(m['shortfall_bytes'])}"


def _compute(rec: dict) -> str:
    """The compute dtype as it runs: "fp8", or "bf16 (no fp8 on a100-80gb-sxm)"."""
    asked, runs = rec["compute_dtype"], rec.get("compute_runs_as", rec["compute_dtype"])
    return asked if runs == asked else f"{runs} (no {asked} on {rec['hardware']})"


def estimate_text(rec: dict) -> str:
    """The readable single-scenario table."""
    head = (f"{rec['model']} on {rec['hardware']}: batch {rec['batch']}, prompt {rec['prompt_len']}, "
            f"output {rec['output_len']}; weights {rec['weight_dtype']}, KV {rec['kv_dtype']}, "
            f"compute {_compute(rec)}, attention {rec['attention']}"
            + (", ideal roofline" if rec["ideal"] else "") + (", calibrated profile" if rec["calibrated"] else "")
            + (f", {rec['kernel_tables']} measured kernel tables" if rec.get("kernel_tables") else "")
            + (f" (a CPU profile at {rec['threads']} threads)" if rec.get("threads") else "")
            + (f"; TP {rec['tp']} x PP {rec['pp']}" + (f", EP {rec['ep']}" if rec["ep"] > 1 else "")
               + f" = {rec['gpus']} GPUs (times and memory per GPU)" if rec["gpus"] > 1 or rec["ep"] > 1 else ""))
    rows = []
    for label, ph in (("prefill", rec["prefill"]), (f"decode @ {rec['decode']['context']}", rec["decode"])):
        rows.append([label, render.si(ph["flops"], "FLOP"), render.nbytes(ph["bytes"]),
                     f"{ph['intensity']:.3g}", render.seconds(ph["time_s"]), ph["bound"]])
    phases = render.table(rows, ["phase", "FLOPs", "bytes", "FLOP/B", "time", "bound"])
    tpot = render.seconds(rec["tpot_s"]) if rec["tpot_s"] is not None else "- (one output token)"
    comm = rec["communication"]
    band = rec.get("band")
    extra = []
    if rec["serving_overhead_s"]:
        extra.append(f"serving stack  + {render.seconds(rec['serving_overhead_s'])} per request (receive, tokenise, "
                     "schedule, respond: the engine preset's figure, not in TTFT or e2e)")
    if comm["decode"]["bytes"]:
        extra.append(f"communication  prefill {render.nbytes(comm['prefill']['bytes'])} sent in "
                     f"{render.seconds(comm['prefill']['time_s'])}, decode step {render.nbytes(comm['decode']['bytes'])} "
                     f"in {render.seconds(comm['decode']['time_s'])} (per GPU, in the times above)")
    if "pipeline" in rec:
        p = rec["pipeline"]
        extra.append(f"pipeline  stage {render.seconds(p['decode_stage_s'])} per decode step; with {rec['pp']} "
                     f"micro-batches in flight {p['output_tokens_per_s']:.4g} output tok/s")
    if "speculative" in rec:
        sp = rec["speculative"]
        stpot = render.seconds(sp["tpot_s"]) if sp["tpot_s"] is not None else "-"
        extra.append(f"speculative  draft {sp['draft']} (k {sp['k']}, acceptance {sp['acceptance']:g}): "
                     f"{sp['tokens_per_step']:.3g} tokens per verification step; TPOT {stpot} vs {tpot} plain"
                     + (f" ({sp['speedup']:.2f}x)" if sp["speedup"] is not None else "")
                     + f"; TTFT {render.seconds(sp['ttft_s'])}; {sp['output_tokens_per_s']:.4g} output tok/s; "
                     f"draft weights {render.nbytes(sp['draft_weight_bytes'])} + KV "
                     f"{render.nbytes(sp['draft_kv_cache_bytes'])}, "
                     + ("fits" if sp["fits"] else "DOES NOT FIT") + f" ({render.nbytes(sp['memory_total_bytes'])})")
    m = rec["memory"]
    lines = [
        head,
        "",
        phases,
        f"(ridge point {rec['ridge_point']:.0f} FLOP/B at {rec['compute_runs_as']})",
        "",
        f"TTFT  {render.seconds(rec['ttft_s'])}{_range(rec, 'ttft_band_s')}   TPOT  {tpot}{_range(rec, 'tpot_band_s')}   "
        f"e2e  {render.seconds(rec['e2e_s'])}{_range(rec, 'e2e_band_s')}",
        f"throughput  {rec['output_tokens_per_s']:.4g} output tok/s{_range(rec, 'output_tokens_band_per_s')}, "
        f"{rec['total_tokens_per_s']:.4g} total tok/s",
        *([_band_line(band)] if band else [f"bands  none: {rec['band_note']}"] if "band_note" in rec else []),
        *extra,
        "",
        f"memory  weights {render.nbytes(m['weights_bytes'])} + KV {render.nbytes(m['kv_cache_bytes'])} "
        f"+ activations {render.nbytes(m['activation_bytes'])} = {render.nbytes(m['total_bytes'])}",
        _fit_line(m),
    ]
    return "\n".join(lines)


def _range(rec: dict, key: str) -> str:
    """" (5.9-7.6 ms)": a band in the units of its prediction; "" without one."""
    pair = rec.get(key)
    if not pair:
        return ""
    if key.endswith("_per_s"):
        return f" ({pair[0]:.3g}-{pair[1]:.3g})"
    return f" ({render.seconds(pair[0])}-{render.seconds(pair[1])})"


def _band_line(band: dict) -> str:
    groups = "; ".join(f"{k} {v['group']} ({v['rows']} rows)" for k, v in band["by_prediction"].items()
                       if "." not in k)
    return (f"bands  in brackets, where {100 * band['coverage']:.0f}% of held-out measurements fell ({band['source']}): "
            f"{groups}")


def estimate_rows_text(recs: list[dict]) -> str:
    """One row per scenario when several values were given."""
    rows = [[r["batch"], r["prompt_len"], r["output_len"], render.seconds(r["ttft_s"]),
             render.seconds(r["tpot_s"]), render.seconds(r["e2e_s"]), f"{r['output_tokens_per_s']:.4g}",
             r["prefill"]["bound"], r["decode"]["bound"], render.nbytes(r["memory"]["total_bytes"]),
             "yes" if r["memory"]["fits"] else "NO"] for r in recs]
    headers = ["batch", "prompt", "output", "TTFT", "TPOT", "e2e", "out tok/s", "prefill", "decode", "memory", "fits"]
    if "speculative" in recs[0]:
        for row, r in zip(rows, recs, strict=True):
            sp = r["speculative"]
            row += [render.seconds(sp["tpot_s"]), f"{sp['speedup']:.2f}x" if sp["speedup"] is not None else "-"]
        headers += ["spec TPOT", "speedup"]
    head = f"{recs[0]['model']} on {recs[0]['hardware']} (weights {recs[0]['weight_dtype']}, KV {recs[0]['kv_dtype']})"
    return head + "\n\n" + render.table(rows, headers)
