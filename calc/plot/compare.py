"""The predicted-vs-measured chart of `roofline compare --out`: one point per (run, metric),
log-log, the diagonal and +-25% bands; times and rates on separate panels."""

from __future__ import annotations

import math

from calc.plot.base import DPI, MARKERS, SERIES_COLORS, save


def compare_chart(points: list[tuple[str, str, float, float]], out, title: str = "roofline compare") -> object:
    """``points``: (group label, kind "time" | "rate", measured, predicted) in SI units."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10.0, 4.8), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = {"time": fig.add_subplot(1, 2, 1), "rate": fig.add_subplot(1, 2, 2)}
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
        unit = "s" if kind == "time" else "per s"
        ax.set_xlabel(f"measured ({unit})")
        ax.set_ylabel(f"predicted ({unit})")
        ax.set_title("latencies (TTFT, TPOT, ITL, e2e)" if kind == "time" else "throughputs (tokens/s, requests/s)",
                     fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
    handles, labels = [], []
    for ax in axes.values():
        h, lab = ax.get_legend_handles_labels()
        handles += h
        labels += lab
    if handles:
        fig.legend(handles, labels, loc="outside right upper", fontsize=7, frameon=False)
    fig.suptitle(f"{title}: dotted lines at +-25%", fontsize=10)
    save(fig, out)
    return fig
