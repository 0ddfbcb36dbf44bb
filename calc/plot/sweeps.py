"""Charts over a sweep (a calc.cost.sweep DataFrame): TTFT, TPOT, throughput and its Pareto
frontier, KV memory, TP scaling."""

from __future__ import annotations

import math

import numpy as np

from calc.core.errors import SpecError
from calc.core.units import GB, MILLI
from calc.plot.base import NOFIT, SERIES_COLORS, SERIES_KEYS, _figure, _finish

# --------------------------------------------------------------------------- sweep charts


def _label(key: str, value) -> str:
    return {"model": "{}", "hardware": "{}", "weight_dtype": "weights {}", "kv_dtype": "KV {}", "tp": "TP {}",
            "batch": "B={}", "prompt_len": "T={}", "output_len": "G={}"}[key].format(value)


def _series(frame, x: str, ignore=()):
    """Split a sweep frame into one series per combination of the inputs that vary (besides x).
    Returns [(label, rows sorted by x)] and the text of the inputs that do not vary."""
    keys = [k for k in SERIES_KEYS if k != x and k not in ignore and frame[k].nunique() > 1]
    fixed = [k for k in SERIES_KEYS if k != x and k not in ignore and frame[k].nunique() == 1]
    groups = frame.groupby(keys, sort=False) if keys else [((), frame)]
    out = []
    for key, rows in groups:
        key = key if isinstance(key, tuple) else (key,)
        label = ", ".join(_label(k, v) for k, v in zip(keys, key, strict=True))
        out.append((label or f"{rows.model.iloc[0]} on {rows.hardware.iloc[0]}", rows.sort_values(x)))
    return out, ", ".join(_label(k, frame[k].iloc[0]) for k in fixed)


def _check_frame(frame, need: tuple[str, ...]):
    if frame is None or len(frame) == 0:
        raise SpecError("sweep", None, "the grid is empty: nothing to plot")
    missing = [c for c in (*SERIES_KEYS, *need) if c not in frame.columns]
    if missing:
        raise SpecError("sweep", None, f"the frame lacks column(s) {', '.join(missing)} (use calc.sweep)")


def _yscale(ax, values) -> None:
    """Log when the plotted values span more than 20x, else linear from zero."""
    v = np.asarray([x for x in values if np.isfinite(x) and x > 0], dtype=float)
    if v.size and v.max() / v.min() > 20:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0, top=1.08 * v.max() if v.size else 1.0)


def _line_chart(frame, x: str, y, *, xlabel: str, ylabel: str, what: str, note: str | None = None, ignore=(),
                xval=None, xscale: str = "log", yscale: str = "auto", legend_extra=(), fits=None, out=None,
                after=None, band=None):
    """One line per series: ``y(rows)`` against ``xval(rows)`` (default: column ``x``), rows
    sorted by column ``x``; points that do not fit in device memory crossed out.
    ``fits(rows)`` says which points fit (default: the sweep's ``fits``: weights + KV + the
    prefill's activations within device memory). ``after(ax, series)`` adds chart-specific
    artists before the legend. ``band``: (low, high) column names of the prediction band (calc.spec.bands),
    shaded around each line in y's units (``y`` applied to them) where the frame has them."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    _check_frame(frame, (x, "memory_fits"))
    fig, ax = _figure()
    series, scenario = _series(frame, x, ignore)
    ys, nofit, shaded = [], False, False
    for j, (label, rows) in enumerate(series):
        color = SERIES_COLORS[j % len(SERIES_COLORS)]
        xv = np.asarray(xval(rows) if xval else rows[x], dtype=float)
        yv = np.asarray(y(rows), dtype=float)
        ys += list(yv)
        ax.plot(xv, yv, "-o", color=color, ms=4, lw=1.6, label=label, gid=f"series:{label}")
        if band is not None and band[0] in rows:
            lo, hi = (np.asarray(y(rows.assign(**{band[2]: rows[c]})), dtype=float) for c in band[:2])
            ax.fill_between(xv, lo, hi, color=color, alpha=0.15, lw=0, gid=f"band:{label}")
            for edge, v in (("lo", lo), ("hi", hi)):
                ax.plot(xv, v, "-", color=color, lw=0.5, alpha=0.5, gid=f"band_{edge}:{label}")
            shaded = True
        bad = ~np.asarray(fits(rows) if fits else rows.memory_fits, dtype=bool)
        if bad.any():
            nofit = True
            ax.scatter(xv[bad], yv[bad], marker="x", s=60, color="black", zorder=4, gid=f"nofit:{label}")
    if xscale != "linear":
        ax.set_xscale("log", base=2 if xscale == "log2" else 10)
    if after is not None:
        after(ax, series)
    if yscale == "log":
        ax.set_yscale("log")
    else:
        _yscale(ax, ys)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    handles, _ = ax.get_legend_handles_labels()
    if nofit:
        handles.append(Line2D([], [], color="black", marker="x", ls="", label="does not fit in device memory"))
    handles += [Line2D([], [], **style) for style in legend_extra]
    if shaded:
        handles.append(Patch(color="#777777", alpha=0.3, label="80% band: where held-out measurements fell"))
    return _finish(fig, ax, f"{what}\n{scenario}" if scenario else what, note, out, handles)


# (low column, high column, the column y reads): a band is drawn through the line's own y function
TTFT_BAND = ("ttft_band_lo_s", "ttft_band_hi_s", "ttft_s")
TPOT_BAND = ("tpot_band_lo_s", "tpot_band_hi_s", "tpot_s")  # tpot-context: one decode step, G = 2


def ttft_chart(frame, out=None):
    """TTFT (prefill + sampling) against prompt length T, one line per series."""
    return _line_chart(frame, "prompt_len", lambda r: r.ttft_s / MILLI, xlabel="prompt length T (tokens)",
                       ylabel="TTFT (ms)", what="Time to first token vs prompt length", ignore=("output_len",),
                       band=TTFT_BAND,
                       note="TTFT = prefill of B x T tokens + sampling; no queueing, tokenisation or network. "
                            + NOFIT, out=out)


def tpot_batch_chart(frame, out=None):
    """TPOT (mean decode step over the G - 1 steps) against batch size B."""
    return _line_chart(frame, "batch", lambda r: r.tpot_s / MILLI, xlabel="batch B (sequences)",
                       ylabel="TPOT (ms per output token)", what="Time per output token vs batch", xscale="log2",
                       band=TPOT_BAND,
                       note="TPOT: mean decode-step time over the G - 1 steps at contexts T .. T+G-2. " + NOFIT,
                       out=out)


def tpot_context_chart(frame, out=None):
    """One decode step's time against the context S it attends over (sweep rows with T = S, G = 2)."""
    return _line_chart(frame, "prompt_len", lambda r: r.decode_time_s / MILLI,
                       xlabel="context S (cached tokens per sequence)", ylabel="TPOT (ms per output token)",
                       what="Time per output token vs context", ignore=("output_len",),
                       band=TPOT_BAND[:2] + ("decode_time_s",),
                       note="One decode step at context S: one new token per sequence, attending over S + 1 "
                            "positions. " + NOFIT, out=out)


def pareto(points) -> list[tuple[float, float]]:
    """(latency, throughput) points that no other point beats on both lower latency and higher throughput."""
    front, best = [], -math.inf
    for px, py in sorted(points, key=lambda p: (p[0], -p[1])):
        if py > best:
            front.append((float(px), float(py)))
            best = py
    return front


def throughput_chart(frame, out=None):
    """Output tokens/s per GPU against TPOT over batch sizes (the latency-throughput curve),
    with the Pareto frontier of the scenarios that fit in memory."""

    def tpot_ms(rows):
        return rows.tpot_s.to_numpy(dtype=float) / MILLI

    def per_gpu(rows):
        return (rows.output_tokens_per_s / rows.gpus).to_numpy(dtype=float)

    def frontier(ax, series):
        pts = []
        for _, rows in series:
            ok = rows.memory_fits.to_numpy(dtype=bool)
            pts += list(zip(tpot_ms(rows)[ok], per_gpu(rows)[ok], strict=True))
            for bx, by, b in zip(tpot_ms(rows), per_gpu(rows), rows.batch, strict=True):
                ax.annotate(str(b), (bx, by), xytext=(3, -9), textcoords="offset points", fontsize=6,
                            color="#666666")
        front = pareto(pts)
        if front:
            fx, fy = zip(*front, strict=True)
            ax.plot(fx, fy, "-", color="#888888", lw=7, alpha=0.35, zorder=1, label="Pareto frontier (fits)",
                    gid="frontier")

    return _line_chart(frame, "batch", per_gpu, xval=tpot_ms, xlabel="TPOT (ms per output token)",
                       ylabel="output tokens/s per GPU", what="Throughput vs latency over batch size",
                       note="Each point is a batch size B (labelled); throughput = B x G / e2e, per GPU of the "
                            "replica. Frontier: no point that fits has both lower TPOT and higher throughput. " + NOFIT,
                       out=out, after=frontier)


def kv_memory_chart(frame, out=None):
    """Per GPU: KV cache (solid) and weights + KV (dashed) against the context held, with each
    device's capacity; dotted: the whole model's KV where TP splits it over GPUs. A point is
    crossed out where weights + KV exceed the device (prefill activations left out: a server
    chunks long prefills)."""

    def held(rows):
        return (rows.memory_weights_bytes + rows.memory_kv_cache_bytes).to_numpy(dtype=float)

    def extra(ax, series):
        for j, (label, rows) in enumerate(series):
            color = SERIES_COLORS[j % len(SERIES_COLORS)]
            xv = rows.prompt_len.to_numpy(dtype=float)
            ax.plot(xv, held(rows) / GB, "--", color=color, lw=1.2, gid=f"weights_kv:{label}")
            whole = rows.kv_cache_bytes.to_numpy(dtype=float)
            if np.any(np.abs(whole - rows.memory_kv_cache_bytes.to_numpy(dtype=float)) > 0.01 * whole):
                ax.plot(xv, whole / GB, ":", color=color, lw=1.4, gid=f"kv_model:{label}")
        for k, hw in enumerate(dict.fromkeys(frame.hardware)):
            cap = float(frame[frame.hardware == hw].memory_capacity_bytes.iloc[0]) / GB
            ax.axhline(cap, color="#444444", lw=1.2, ls=(0, (6, 2, 1, 2)), gid=f"capacity:{hw}")
            ax.annotate(f"{hw} capacity {cap:.0f} GB", (0.01, cap), xycoords=("axes fraction", "data"),
                        xytext=(0, 3 + 9 * k), textcoords="offset points", fontsize=7, color="#444444")

    return _line_chart(frame, "prompt_len", lambda r: r.memory_kv_cache_bytes / GB, ignore=("output_len",),
                       xlabel="context held (tokens per sequence)", ylabel="GB per GPU (1 GB = 1e9 bytes)",
                       what="KV-cache memory vs context", after=extra, yscale="log", out=out,
                       fits=lambda rows: held(rows) <= rows.memory_capacity_bytes.to_numpy(dtype=float),
                       legend_extra=[dict(color="#777777", ls="--", label="weights + KV per GPU"),
                                     dict(color="#777777", ls=":", label="whole-model KV (all GPUs)")],
                       note="Solid: KV cache per GPU. Dashed: weights + KV per GPU; crossed out where they exceed the "
                            "device (prefill activations left out). Dotted: the whole model's KV where TP splits it "
                            "(MLA's latent cache is replicated on every TP rank).")


def tp_chart(frame, out=None):
    """TPOT against the tensor-parallel degree, with ideal 1/TP scaling from the smallest TP dashed."""

    def ideal(ax, series):
        for j, (label, rows) in enumerate(series):
            tps, tpot = rows.tp.to_numpy(dtype=float), rows.tpot_s.to_numpy(dtype=float) / MILLI
            ax.plot(tps, tpot[0] * tps[0] / tps, "--", color=SERIES_COLORS[j % len(SERIES_COLORS)], lw=1,
                    alpha=0.7, gid=f"ideal:{label}")
            for t, v in zip(tps[1:], tpot[1:], strict=True):
                ax.annotate(f"x{tpot[0] / v:.2f}", (t, v), xytext=(4, 4), textcoords="offset points", fontsize=7,
                            color=SERIES_COLORS[j % len(SERIES_COLORS)])
        ax.set_xticks(sorted(set(frame.tp)), [str(t) for t in sorted(set(frame.tp))])

    return _line_chart(frame, "tp", lambda r: r.tpot_s / MILLI, xlabel="tensor-parallel degree TP (GPUs)",
                       ylabel="TPOT (ms per output token)", what="Time per output token vs tensor parallelism",
                       xscale="log2", after=ideal, legend_extra=[dict(color="#777777", ls="--", label="ideal 1/TP")],
                       band=TPOT_BAND,
                       note="Labels: speed-up over the smallest TP. Each GPU reads 1/TP of the weights but every "
                            "layer adds two all-reduces, whose latency does not shrink with TP.", out=out)


