"""Charts: the roofline picture and the sweep charts, as matplotlib Figures.

Every chart function returns a ``matplotlib.figure.Figure`` (Agg canvas, no
pyplot state) and, given ``out``, saves it as PNG or SVG by suffix, atomically.
Plotted artists carry a ``gid`` ("series:<label>", "roof:<hw>:memory", ...), so
``plotted_data(fig)`` reads the numbers back from the figure itself: tests and
the gallery's JSON compare data, never pixels. Display units: ms, GB (1e9),
TFLOP/s, tokens/s; the axis labels name them.

matplotlib and pandas are imported inside the functions (``import calc`` stays light).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np

from calc.errors import SpecError
from calc.files import atomic_write, check_writable
from calc.units import GB, MILLI, TERA

KINDS = ("roofline", "ttft", "tpot-batch", "tpot-context", "throughput", "kv-memory", "breakdown", "tp")
SUFFIXES = (".png", ".svg")
FIGSIZE_IN = (9.0, 5.5)
DPI = 100
PHASE_COLORS = {"prefill": "#1f77b4", "decode": "#ff7f0e"}
ROOF_COLORS = ("#222222", "#2ca02c", "#9467bd", "#8c564b", "#e377c2")
MARKERS = ("o", "s", "^", "D", "v")
SERIES_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf",
                 "#bcbd22", "#7f7f7f")
NOFIT = "Crossed out: weights + KV + the prefill's activations (B x T tokens in one pass) exceed device memory."
SERIES_KEYS = ("model", "hardware", "weight_dtype", "kv_dtype", "tp", "batch", "prompt_tokens", "output_tokens")


# --------------------------------------------------------------------------- output


def check_out(out) -> Path:
    """The --out path: a .png or .svg in a folder that exists and is writable."""
    if out is None or str(out) == "":
        raise SpecError("--out", None, "required: an image file name ending in .png or .svg")
    path = Path(out)
    if path.suffix.lower() not in SUFFIXES:
        raise SpecError("--out", None, f"{path}: use a .png or .svg file name")
    return check_writable(path)


def save(fig, out) -> Path:
    """Write the figure as PNG or SVG (by suffix), atomically."""
    path = check_out(out)
    fmt = path.suffix.lower()[1:]
    return atomic_write(path, lambda fh: fig.savefig(fh, format=fmt, dpi=DPI,
                                                     metadata={"Date": None} if fmt == "svg" else None))


def _figure():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=FIGSIZE_IN, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _finish(fig, ax, title: str, note: str | None, out, handles=None) -> object:
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    else:
        labels = [h.get_label() for h in handles]
    if handles:
        fig.legend(handles, labels, loc="outside right upper", fontsize=8, frameon=False)
    if note:
        import textwrap

        lines = textwrap.wrap(note, 175)
        fig.get_layout_engine().set(rect=(0, 0.022 * len(lines) + 0.008, 1, 1 - 0.022 * len(lines) - 0.008))
        fig.text(0.008, 0.006, "\n".join(lines), va="bottom", ha="left", fontsize=7, color="#555555")
    if out is not None:
        save(fig, out)
    return fig


# --------------------------------------------------------------------------- reading a figure back


def _nums(values) -> list:
    out = []
    for v in np.asarray(values, dtype=float).ravel():
        out.append(float(f"{v:.6g}") if math.isfinite(v) else None)
    return out


def plotted_data(fig) -> dict:
    """The numbers a figure shows, from its artists: lines and scatters by gid, bars by label."""
    axes = []
    for ax in fig.axes:
        series: dict[str, dict] = {}
        for line in ax.get_lines():
            if line.get_gid():
                series[line.get_gid()] = {"x": _nums(line.get_xdata()), "y": _nums(line.get_ydata())}
        for coll in ax.collections:
            if coll.get_gid():
                off = np.asarray(coll.get_offsets(), dtype=float).reshape(-1, 2)
                entry = {"x": _nums(off[:, 0]), "y": _nums(off[:, 1])}
                sizes = coll.get_sizes()
                if len(sizes) == len(off) and len(off) > 1:
                    entry["size"] = _nums(sizes)
                series[coll.get_gid()] = entry
        for cont in ax.containers:
            patches = list(cont)
            series[f"bars:{cont.get_label()}"] = {
                "x": _nums([p.get_x() + p.get_width() / 2 for p in patches]),
                "y": _nums([p.get_height() for p in patches]),
                "bottom": _nums([p.get_y() for p in patches]),
            }
        item = {"title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
                "xscale": ax.get_xscale(), "yscale": ax.get_yscale(), "series": series}
        if ax.containers:
            item["xticklabels"] = [t.get_text() for t in ax.get_xticklabels()]
        axes.append(item)
    w, h = fig.get_size_inches() * DPI
    return {"width_px": round(w), "height_px": round(h), "axes": axes}


# --------------------------------------------------------------------------- the roofline chart


def _op_points(cost) -> tuple[list, list]:
    """(intensity, achieved FLOP/s, share of phase time, name) per operator; and the names left out."""
    total = float(cost.time_s)
    pts, left_out = [], []
    for t in cost.ops:
        op = t.op
        flops, time_s, intensity = float(op.flops), float(t.time_s), float(t.intensity)
        if op.kind == "comm" or flops <= 0 or time_s <= 0 or not math.isfinite(intensity):
            left_out.append(op.name)
            continue
        pts.append((intensity, flops / time_s, float(t.total_time_s) / total, op.name))
    return pts, left_out


def roofline_chart(model, hardware, batch=1, prompt_len=512, context=None, *, weight_dtype=None, kv_dtype=None,
                   tp=1, phases=("prefill", "decode"), datasheet=True, out=None):
    """Log-log roofline: per hardware the memory roof (bandwidth x memory efficiency) and a
    compute roof per dtype the operators run at (peak x compute efficiency), ridge points
    labelled, data-sheet roofs dashed; each operator of the prefill (T = prompt_len) and
    decode step (context S) at (FLOP/byte, FLOP/time), area by share of the phase's time;
    whole phases bigger and outlined. Communication operators have no intensity: left out."""
    from matplotlib.lines import Line2D

    from calc.breakdown import phase_for
    from calc.catalog import load_hardware, load_model
    from calc.roofline import Efficiency, peak_for

    spec = load_model(model)
    hws = [load_hardware(h) for h in _as_list(hardware)]
    if not hws:
        raise SpecError("--hardware", None, "no hardware given")
    batch, prompt_len = _whole(batch, "--batch"), _whole(prompt_len, "--prompt-len")
    context = prompt_len if context is None else _whole(context, "--context")
    phases = tuple(phases)
    if not phases or any(p not in PHASE_COLORS for p in phases):
        raise SpecError("--phase", None, f"must be prefill, decode or both, got {', '.join(phases) or 'none'}")
    fig, ax = _figure()
    opts = dict(weight_dtype=weight_dtype, kv_dtype=kv_dtype, tp=tp)
    drawn, left_out, handles = [], set(), []
    for i, hw in enumerate(hws):
        for phase in phases:
            cost, dt = phase_for(spec, hw, phase, batch, prompt_len if phase == "prefill" else context, **opts)
            pts, skipped = _op_points(cost)
            left_out.update(skipped)
            drawn.append((i, hw, phase, cost, dt, pts))
    xs = [p[0] for d in drawn for p in d[5]] + [float(d[3].intensity) for d in drawn]
    ridges = []
    roofs = {}
    for i, hw in enumerate(hws):
        dt = next(d[4] for d in drawn if d[0] == i)
        eff = Efficiency.of(hw).for_dtype(dt.compute)
        bw = hw.memory_bandwidth_bytes_per_s
        peaks: dict[float, list[str]] = {}
        for name, cls in ((dt.compute, "matmul"), (dt.attention_compute, "attention")):
            names = peaks.setdefault(peak_for(hw, dt, cls), [])
            if name not in names:
                names.append(name)
        roofs[i] = (hw, eff, bw, peaks)
        ridges += [p * eff.compute / (bw * eff.memory) for p in peaks] + [p / bw for p in peaks]
    x_lo, x_hi = min(min(xs), 1.0) / 3, max(max(xs), *ridges) * 4
    ax.set_xlim(x_lo, x_hi)
    for i, (hw, eff, bw, peaks) in roofs.items():
        color = ROOF_COLORS[i % len(ROOF_COLORS)]
        top = max(peaks)
        for scale_c, scale_m, style, kind in ((eff.compute, eff.memory, "-", "roof"), (1.0, 1.0, "--", "datasheet")):
            if kind == "datasheet" and not datasheet:
                continue
            alpha, lw = (1.0, 1.6) if kind == "roof" else (0.45, 1.0)
            mem = bw * scale_m
            ax.plot([x_lo, top * scale_c / mem], [x_lo * mem / TERA, top * scale_c / TERA], style, color=color,
                    lw=lw, alpha=alpha, gid=f"{kind}:{hw.name}:memory")
            for j, (peak, names) in enumerate(sorted(peaks.items(), reverse=True)):
                ridge = peak * scale_c / mem
                ax.plot([ridge, x_hi], [peak * scale_c / TERA] * 2, style if j == 0 else ":" if kind == "roof"
                        else "--", color=color, lw=lw, alpha=alpha, gid=f"{kind}:{hw.name}:{'/'.join(names)}")
                if kind == "roof":
                    ax.scatter([ridge], [peak * scale_c / TERA], marker="|", s=120, color=color, zorder=4,
                               gid=f"ridge:{hw.name}:{'/'.join(names)}")
                    ax.annotate(f"ridge {ridge:.0f}", (ridge, peak * scale_c / TERA),
                                xytext=(-4, 5), textcoords="offset points", ha="right", fontsize=7, color=color)
        main = max(peaks)
        handles.append(Line2D([], [], color=color, marker=MARKERS[i % len(MARKERS)], markerfacecolor="none",
                              label=f"{hw.name}: {bw * eff.memory / 1e12:.2f} TB/s, "
                                    f"{'/'.join(peaks[main])} {main * eff.compute / TERA:.0f} TFLOP/s, "
                                    f"ridge {main * eff.compute / (bw * eff.memory):.0f} FLOP/B"))
    for i, hw, phase, cost, _dt, pts in drawn:
        marker, color = MARKERS[i % len(MARKERS)], PHASE_COLORS[phase]
        x = np.array([p[0] for p in pts])
        y = np.array([p[1] for p in pts]) / TERA
        share = np.array([p[2] for p in pts])
        ax.scatter(x, y, s=12 + 600 * share, c=color, marker=marker, alpha=0.7, edgecolors="white",
                   linewidths=0.5, zorder=3, gid=f"ops:{hw.name}:{phase}")
        px, py = float(cost.intensity), float(cost.flops / cost.time_s) / TERA
        ax.scatter([px], [py], s=200, c=color, marker=marker, alpha=0.8, edgecolors="black", linewidths=1.8, zorder=5,
                   gid=f"phase:{hw.name}:{phase}")
        if i == 0:
            ax.annotate(phase, (px, py), xytext=(10, -12), textcoords="offset points", fontsize=8, weight="bold")
        if len(hws) == 1:  # name the operators that take a tenth of the phase or more
            for xi, yi, si, name in pts:
                if si >= 0.1:
                    ax.annotate(f"{name} {si:.0%}", (xi, yi / TERA), xytext=(-8, 8), textcoords="offset points",
                                ha="right", fontsize=7, color="#333333")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved TFLOP/s (operator FLOPs / operator time)")
    handles += [Line2D([], [], color=PHASE_COLORS[p], marker="o", ls="", label=f"{p} operators") for p in phases]
    handles.append(Line2D([], [], color="#999999", marker="o", ls="", markersize=11, markeredgecolor="black",
                          markeredgewidth=1.8, label="whole phase"))
    if datasheet:
        handles.append(Line2D([], [], color="#777777", ls="--", label="data-sheet roofs"))
    dt = drawn[0][4]
    what = " and ".join(f"prefill T={prompt_len}" if p == "prefill" else f"decode at S={context}" for p in phases)
    title = (f"{spec.name}: batch {batch}, {what}\n"
             f"weights {dt.weight}, KV {dt.kv}, compute {dt.compute}" + (f", TP {tp}" if tp > 1 else ""))
    comm = sorted(n for n in left_out if n.startswith(("tp.", "ep.", "pp.")))
    other = sorted(n for n in left_out if n not in comm)
    comm_share = ", ".join(f"{float(cost.comm_s / cost.time_s):.0%} of {phase}"
                           for i, _hw, phase, cost, _dt, _pts in drawn if i == 0)
    note = ("Marker area: share of the phase's time. Solid roofs: data sheet x the profile's efficiencies "
            "(dotted: the attention dtype). Left out: ")
    note += "; ".join(filter(None, [
        f"communication ({', '.join(comm)}: no arithmetic intensity; {comm_share} on {hws[0].name}, counted in "
        "the whole-phase points)" if comm else "", f"{', '.join(other)} (0 FLOPs)" if other else ""])) or "nothing"
    return _finish(fig, ax, title, note + ".", out, handles)


# --------------------------------------------------------------------------- sweep charts


def _label(key: str, value) -> str:
    return {"model": "{}", "hardware": "{}", "weight_dtype": "weights {}", "kv_dtype": "KV {}", "tp": "TP {}",
            "batch": "B={}", "prompt_tokens": "T={}", "output_tokens": "G={}"}[key].format(value)


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
                after=None):
    """One line per series: ``y(rows)`` against ``xval(rows)`` (default: column ``x``), rows
    sorted by column ``x``; points that do not fit in device memory crossed out.
    ``fits(rows)`` says which points fit (default: the sweep's ``fits``: weights + KV + the
    prefill's activations within device memory). ``after(ax, series)`` adds chart-specific
    artists before the legend."""
    from matplotlib.lines import Line2D

    _check_frame(frame, (x, "fits"))
    fig, ax = _figure()
    series, scenario = _series(frame, x, ignore)
    ys, nofit = [], False
    for j, (label, rows) in enumerate(series):
        color = SERIES_COLORS[j % len(SERIES_COLORS)]
        xv = np.asarray(xval(rows) if xval else rows[x], dtype=float)
        yv = np.asarray(y(rows), dtype=float)
        ys += list(yv)
        ax.plot(xv, yv, "-o", color=color, ms=4, lw=1.6, label=label, gid=f"series:{label}")
        bad = ~np.asarray(fits(rows) if fits else rows.fits, dtype=bool)
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
    return _finish(fig, ax, f"{what}\n{scenario}" if scenario else what, note, out, handles)


def ttft_chart(frame, out=None):
    """TTFT (prefill + sampling) against prompt length T, one line per series."""
    return _line_chart(frame, "prompt_tokens", lambda r: r.ttft_s / MILLI, xlabel="prompt length T (tokens)",
                       ylabel="TTFT (ms)", what="Time to first token vs prompt length", ignore=("output_tokens",),
                       note="TTFT = prefill of B x T tokens + sampling; no queueing, tokenisation or network. "
                            + NOFIT, out=out)


def tpot_batch_chart(frame, out=None):
    """TPOT (mean decode step over the G - 1 steps) against batch size B."""
    return _line_chart(frame, "batch", lambda r: r.tpot_s / MILLI, xlabel="batch B (sequences)",
                       ylabel="TPOT (ms per output token)", what="Time per output token vs batch", xscale="log2",
                       note="TPOT: mean decode-step time over the G - 1 steps at contexts T .. T+G-2. " + NOFIT,
                       out=out)


def tpot_context_chart(frame, out=None):
    """One decode step's time against the context S it attends over (sweep rows with T = S, G = 2)."""
    return _line_chart(frame, "prompt_tokens", lambda r: r.decode_step_s / MILLI,
                       xlabel="context S (cached tokens per sequence)", ylabel="TPOT (ms per output token)",
                       what="Time per output token vs context", ignore=("output_tokens",),
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
            ok = rows.fits.to_numpy(dtype=bool)
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
        return (rows.weights_bytes_per_gpu + rows.kv_cache_bytes_per_gpu).to_numpy(dtype=float)

    def extra(ax, series):
        for j, (label, rows) in enumerate(series):
            color = SERIES_COLORS[j % len(SERIES_COLORS)]
            xv = rows.prompt_tokens.to_numpy(dtype=float)
            ax.plot(xv, held(rows) / GB, "--", color=color, lw=1.2, gid=f"weights_kv:{label}")
            whole = rows.kv_cache_bytes.to_numpy(dtype=float)
            if np.any(np.abs(whole - rows.kv_cache_bytes_per_gpu.to_numpy(dtype=float)) > 0.01 * whole):
                ax.plot(xv, whole / GB, ":", color=color, lw=1.4, gid=f"kv_model:{label}")
        for k, hw in enumerate(dict.fromkeys(frame.hardware)):
            cap = float(frame[frame.hardware == hw].capacity_bytes_per_gpu.iloc[0]) / GB
            ax.axhline(cap, color="#444444", lw=1.2, ls=(0, (6, 2, 1, 2)), gid=f"capacity:{hw}")
            ax.annotate(f"{hw} capacity {cap:.0f} GB", (0.01, cap), xycoords=("axes fraction", "data"),
                        xytext=(0, 3 + 9 * k), textcoords="offset points", fontsize=7, color="#444444")

    return _line_chart(frame, "prompt_tokens", lambda r: r.kv_cache_bytes_per_gpu / GB, ignore=("output_tokens",),
                       xlabel="context held (tokens per sequence)", ylabel="GB per GPU (1 GB = 1e9 bytes)",
                       what="KV-cache memory vs context", after=extra, yscale="log", out=out,
                       fits=lambda rows: held(rows) <= rows.capacity_bytes_per_gpu.to_numpy(dtype=float),
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
                       note="Labels: speed-up over the smallest TP. Each GPU reads 1/TP of the weights but every "
                            "layer adds two all-reduces, whose latency does not shrink with TP.", out=out)


# --------------------------------------------------------------------------- phase breakdown

GROUP_COLORS = {
    "attention projections": "#1f77b4", "attention (QK^T, PV)": "#d62728", "MLP matmuls": "#2ca02c",
    "MoE (router, experts)": "#17becf", "lm_head": "#9467bd", "elementwise, embedding, sampling": "#bcbd22",
    "communication": "#7f7f7f", "step overhead": "#000000",
}


def op_group(name: str, kind: str) -> str:
    """The bar segment an operator belongs to."""
    if kind == "comm":
        return "communication"
    if kind == "attention":
        return "attention (QK^T, PV)"
    if name.startswith("moe."):
        return "MoE (router, experts)"
    if name.startswith("mlp.") and kind == "linear":
        return "MLP matmuls"
    if name == "lm_head":
        return "lm_head"
    return "attention projections" if kind == "linear" else "elementwise, embedding, sampling"


def breakdown_shares(model, hardware, phase, batch, seq_len, **options) -> tuple[dict[str, float], float]:
    """Share of a pass's time per operator group (summing to 1) and the pass time in seconds."""
    from calc.breakdown import ops_records

    recs, summary = ops_records(model, hardware, phase, batch, seq_len, **options)
    shares: dict[str, float] = dict.fromkeys(GROUP_COLORS, 0.0)
    for r in recs:
        if r["kind"] != "overhead":  # the step overhead row gets its own group below
            shares[op_group(r["op"], r["kind"])] += r["share"]
    shares["step overhead"] = summary["step_overhead_s"] / summary["time_s"]
    return shares, summary["time_s"]


def breakdown_chart(model, hardware, batch=1, prompt_len=512, context=None, *, weight_dtype=None, kv_dtype=None,
                    tp=1, out=None):
    """Stacked bars: share of the prefill (T = prompt_len) and decode-step (context S) time per
    operator group, for each model x hardware; the phase time above each bar."""
    from calc.catalog import load_hardware, load_model

    specs = [load_model(m) for m in _as_list(model)]
    hws = [load_hardware(h) for h in _as_list(hardware)]
    if not specs or not hws:
        raise SpecError("--model" if not specs else "--hardware", None, "no value given")
    batch, prompt_len = _whole(batch, "--batch"), _whole(prompt_len, "--prompt-len")
    context = prompt_len if context is None else _whole(context, "--context")
    opts = dict(weight_dtype=weight_dtype, kv_dtype=kv_dtype, tp=tp)
    bars, names = [], []
    for spec, hw in itertools.product(specs, hws):
        for phase, n in (("prefill", prompt_len), ("decode", context)):
            bars.append(breakdown_shares(spec, hw, phase, batch, n, **opts))
            who = ", ".join(filter(None, [spec.name if len(specs) > 1 else "", hw.name if len(hws) > 1 else ""]))
            names.append(f"{who}\n{phase}" if who else phase)
    fig, ax = _figure()
    pos = np.arange(len(bars), dtype=float) + np.repeat(np.arange(len(bars) // 2) * 0.5, 2)
    bottom = np.zeros(len(bars))
    for group, color in GROUP_COLORS.items():
        h = np.array([b[0][group] for b in bars]) * 100
        if h.any():
            ax.bar(pos, h, 0.7, bottom=bottom, color=color, label=group)
            bottom += h
    from calc import render

    for p, (_, time_s) in zip(pos, bars, strict=True):
        ax.annotate(render.seconds(time_s), (p, 100), xytext=(0, 3), textcoords="offset points", ha="center",
                    fontsize=8)
    ax.set_xticks(pos, names)
    ax.set_ylim(0, 108)
    ax.set_ylabel("share of the phase's time (%)")
    dt_name = f"weights {weight_dtype or specs[0].serving_dtype}, KV {kv_dtype or specs[0].serving_dtype}"
    title = (f"Where the time goes: {', '.join(s.name for s in specs) if len(specs) > 1 else specs[0].name}"
             f"{'' if len(hws) > 1 else ' on ' + hws[0].name}\nbatch {batch}, prefill T={prompt_len}, decode at "
             f"S={context}, {dt_name}" + (f", TP {tp}" if tp > 1 else ""))
    return _finish(fig, ax, title, "Above each bar: the phase's time (prefill = TTFT; decode = one step).", out)


# --------------------------------------------------------------------------- kinds: defaults, sweeps, dispatch


def _as_list(value) -> list:
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def _whole(value, option: str) -> int:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise SpecError(option, None, f"must be a whole number, got {value!r}") from None
    if not v.is_integer() or v < 1:
        raise SpecError(option, None, f"must be a whole number >= 1, got {value!r}")
    return int(v)


def _one(values, option: str, kind: str, default=None, required: bool = False):
    """The single value an option takes for the roofline and breakdown charts."""
    values = _as_list(values)
    if not values:
        if required:
            raise SpecError(option, None, "no value given")
        return default
    if len(values) > 1:
        raise SpecError(option, None, f"the {kind} chart takes one value, got {len(values)}")
    return values[0]


def _doubling(lo: int, hi: int) -> list[int]:
    """lo, 2 lo, 4 lo, ... up to hi, and hi itself when the last doubling falls well short."""
    out = [lo * 2**i for i in range(int(math.log2(hi / lo)) + 1)]
    return out + [hi] if hi > 1.5 * out[-1] else out


def _max_context(models) -> int:
    from calc.catalog import load_model

    return min(load_model(m).max_context for m in models)


# Which of the numeric options each kind reads (model, hardware, dtypes and TP apply to all; a
# list draws one line per value, and the chart's own axis is the list it sweeps).
OPTIONS = {
    "ttft": ("batch", "prompt_len", "tp"),
    "tpot-batch": ("batch", "prompt_len", "output_len", "tp"),
    "tpot-context": ("batch", "context", "tp"),
    "throughput": ("batch", "prompt_len", "output_len", "tp"),
    "kv-memory": ("batch", "context", "tp"),
    "tp": ("batch", "prompt_len", "output_len", "tp"),
    "roofline": ("batch", "prompt_len", "context", "tp"),
    "breakdown": ("batch", "prompt_len", "context", "tp"),
}


def check_kind(kind: str) -> str:
    if kind not in KINDS:
        import difflib

        close = difflib.get_close_matches(kind, KINDS, n=2, cutoff=0.5)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise SpecError("KIND", None, f"unknown chart {kind!r}; {hint}known: {', '.join(KINDS)}")
    return kind


def sweep_for(kind: str, model="llama-3.1-8b", hardware="h100-sxm", *, batch=None, prompt_len=None,
              output_len=None, context=None, weight_dtype=None, kv_dtype=None, tp=None):
    """The calc.sweep frame a sweep chart plots, with the chart's default axis values."""
    from calc.sweeps import sweep

    check_kind(kind)
    given = {"batch": batch, "prompt_len": prompt_len, "output_len": output_len, "context": context, "tp": tp}
    for name, value in given.items():
        if _as_list(value) and name not in OPTIONS[kind]:
            raise SpecError(f"--{name.replace('_', '-')}", None, f"does not apply to the {kind} chart")
    models = _as_list(model)
    if not models:
        raise SpecError("--model", None, "no model given")
    top = _max_context(models)
    batch, prompt_len, output_len = _as_list(batch), _as_list(prompt_len), _as_list(output_len)
    tp = _as_list(tp) or [1]
    if kind == "ttft":
        prompt_len, output_len = prompt_len or _doubling(128, min(32768, top)), [1]
    elif kind in ("tpot-context", "kv-memory"):
        # TPOT at context S: a request of T = S prompt tokens and G = 2 (one decode step at S);
        # KV held at context S: T = S, G = 1.
        prompt_len = _as_list(context) or (_doubling(1024, min(131072, top)) if kind == "kv-memory"
                                            else _doubling(512, min(131072, top - 1)))
        output_len = [2 if kind == "tpot-context" else 1]
        if max(prompt_len) + output_len[0] - 1 > top:
            raise SpecError("--context", None, f"{max(prompt_len)} exceeds the longest context this chart can "
                                               f"evaluate for the model(s): {top - output_len[0] + 1}")
    elif kind == "tpot-batch":
        batch = batch or _doubling(1, 256)
    elif kind == "throughput":
        batch = batch or _doubling(1, 512)
    elif kind == "tp":
        tp = _as_list(tp) if given["tp"] is not None else [1, 2, 4, 8]
    return sweep(model=models, hardware=_as_list(hardware), batch=batch or [1], prompt_len=prompt_len or [512],
                 output_len=output_len or [128], weight_dtype=_as_list(weight_dtype) or [None],
                 kv_dtype=_as_list(kv_dtype) or [None], tp=tp)


SWEEP_CHARTS = {
    "ttft": ttft_chart, "tpot-batch": tpot_batch_chart, "tpot-context": tpot_context_chart,
    "throughput": throughput_chart, "kv-memory": kv_memory_chart, "tp": tp_chart,
}


def make_chart(kind: str, model="llama-3.1-8b", hardware="h100-sxm", *, batch=None, prompt_len=None,
               output_len=None, context=None, weight_dtype=None, kv_dtype=None, tp=None, phases=None, out=None):
    """Any chart kind from option values (one value, or a list where the chart draws one line per value)."""
    check_kind(kind)
    if out is not None:
        check_out(out)
    if phases is not None and kind != "roofline":
        raise SpecError("--phase", None, f"applies to the roofline chart only, not {kind}")
    if kind in ("roofline", "breakdown"):
        if output_len is not None:
            raise SpecError("--output-len", None, f"does not apply to the {kind} chart")
        opts = dict(batch=_one(batch, "--batch", kind, 1), prompt_len=_one(prompt_len, "--prompt-len", kind, 512),
                    context=_one(context, "--context", kind), weight_dtype=_one(weight_dtype, "--weight-dtype", kind),
                    kv_dtype=_one(kv_dtype, "--kv-dtype", kind), tp=_whole(_one(tp, "--tp", kind, 1), "--tp"), out=out)
        if kind == "breakdown":
            return breakdown_chart(model, hardware, **opts)
        return roofline_chart(_one(model, "--model", kind, required=True), hardware, phases=phases or ("prefill", "decode"), **opts)
    frame = sweep_for(kind, model, hardware, batch=batch, prompt_len=prompt_len, output_len=output_len,
                      context=context, weight_dtype=weight_dtype, kv_dtype=kv_dtype, tp=tp)
    return SWEEP_CHARTS[kind](frame, out=out)
