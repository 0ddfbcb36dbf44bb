"""The predicted-vs-measured chart of `roofline compare --out`: one point per (run, metric),
log-log, the diagonal and +-25% bands; one panel per kind of metric (TTFT, TPOT and ITL, e2e,
throughputs), so a run whose TTFT is off and whose TPOT is right reads as such."""

from __future__ import annotations

import math

from calc.core.files import atomic_write
from calc.plot.base import DPI, MARKERS, SERIES_COLORS

# panel kind -> title; calc.render.compare.metric_kind sorts each metric into one
PANELS = {"ttft": "TTFT (time to first token)", "tpot": "TPOT and ITL (time per output token)",
          "e2e": "e2e (request latency)", "rate": "throughputs (tokens/s, requests/s)"}


def compare_chart(points: list[tuple[str, str, float, float]], out, title: str = "roofline compare") -> bytes:
    """``points``: (group label, panel kind of PANELS, measured, predicted) in SI units. Writes
    the chart to ``out`` and returns its bytes (for a report that embeds it)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator

    fig = Figure(figsize=(10.0, 8.0), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = {kind: fig.add_subplot(2, 2, i + 1) for i, kind in enumerate(PANELS)}
    groups = sorted({g for g, *_ in points})
    style = {g: (SERIES_COLORS[i % len(SERIES_COLORS)], MARKERS[i % len(MARKERS)]) for i, g in enumerate(groups)}
    labelled: set[str] = set()
    for kind, ax in axes.items():
        sel = [(g, m, p) for g, k, m, p in points if k == kind and m > 0 and p > 0 and math.isfinite(p)]
        for g in groups:
            xs = [m for gg, m, _ in sel if gg == g]
            ys = [p for gg, _, p in sel if gg == g]
            if xs:
                color, marker = style[g]
                ax.scatter(xs, ys, color=color, marker=marker, s=28, label=None if g in labelled else g)
                labelled.add(g)
        if sel:
            lo = min(min(m, p) for _, m, p in sel) / 1.5
            hi = max(max(m, p) for _, m, p in sel) * 1.5
            ax.plot([lo, hi], [lo, hi], color="#222222", lw=1)
            for f in (0.75, 1.25):
                ax.plot([lo, hi], [lo * f, hi * f], color="#999999", lw=0.8, ls=":")
            ax.set_xlim(lo, hi)
            ax.set_ylim(lo, hi)
            ax.set_xscale("log")
            ax.set_yscale("log")
            short = FuncFormatter(lambda v, _: f"{v:g}")  # 0.2, not 2 x 10^-1 (which overlap on a narrow range)
            for axis in (ax.xaxis, ax.yaxis):
                axis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
                axis.set_major_formatter(short)
                axis.set_minor_formatter(short)
        else:
            ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes, color="#777777")
            ax.set_xticks([])
            ax.set_yticks([])
        unit = "per s" if kind == "rate" else "s"
        ax.set_xlabel(f"measured ({unit})")
        ax.set_ylabel(f"predicted ({unit})")
        ax.set_title(PANELS[kind], fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
    handles, labels = [], []
    for ax in axes.values():
        h, lab = ax.get_legend_handles_labels()
        handles += h
        labels += lab
    if handles:
        fig.legend(handles, labels, loc="outside right upper", fontsize=7, frameon=False)
    fig.suptitle(f"{title}: dotted lines at +-25%", fontsize=10)
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    png = buf.getvalue()
    atomic_write(out, png, "--out")
    return png
