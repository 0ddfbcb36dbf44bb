"""What every chart shares: constants, the figure and its saving, option helpers, and reading
a figure's plotted data back (``plotted_data``). matplotlib is imported inside functions."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from calc.core.errors import SpecError
from calc.core.files import atomic_write, check_writable

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
SERIES_KEYS = ("model", "hardware", "weight_dtype", "kv_dtype", "tp", "batch", "prompt_len", "output_len")


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
    """Write the figure as PNG or SVG (by suffix), atomically, laid out once, its labels decluttered."""
    path = check_out(out)
    lay_out(fig)
    fmt = path.suffix.lower()[1:]
    return atomic_write(path, lambda fh: fig.savefig(fh, format=fmt, dpi=DPI,
                                                     metadata={"Date": None} if fmt == "svg" else None))


def _figure():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=FIGSIZE_IN, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


# Where a label may go around its point, in offset points, tried in turn when it would cover
# another label: the point's four corners, then further out.
_SPOTS = ((-8, 8, "right"), (8, 8, "left"), (-8, -14, "right"), (8, -14, "left"), (-8, 22, "right"),
          (8, 22, "left"), (-8, -28, "right"), (8, -28, "left"), (0, 36, "center"), (0, -42, "center"))


def lay_out(fig) -> int:
    """Lay the figure out once, its labels decluttered, and keep that layout (savefig would lay a
    constrained figure out twice more: in a pass with rendering off, then in the drawn frame);
    returns declutter's count of labels still overlapping."""
    left, moved = _declutter(fig)
    engine = fig.get_layout_engine()
    if engine is not None:
        if moved or left is None:  # the labels moved (they count in the layout), or none was laid out
            engine.execute(fig)
        fig.set_layout_engine(None)
    return left or 0


def declutter(fig) -> int:
    """Move annotations that would cover an earlier one (in the order drawn) to the first free
    spot around their point; returns how many still overlap (0: every label readable). Runs on
    the laid-out figure, just before it is written."""
    return _declutter(fig)[0] or 0


def _declutter(fig) -> tuple[int | None, int]:
    """declutter's work: (labels still overlapping, None when there are none to lay out; labels
    moved where the layout sees it: out of the axes, or into their margins)."""
    from matplotlib.text import Annotation

    notes = [[t for t in ax.texts if isinstance(t, Annotation) and t.get_visible()] for ax in fig.axes]
    if not any(notes):
        return None, 0  # nothing to move: no layout pass needed before the figure is written
    renderer = fig.canvas.get_renderer()
    engine = fig.get_layout_engine()
    if engine is not None:
        engine.execute(fig)  # the layout the labels' extents need, without drawing the artists
    else:
        fig.draw_without_rendering()
    left = moved = 0
    for ax, texts in zip(fig.axes, notes, strict=True):
        placed = []
        for t in texts:
            box = t.get_window_extent(renderer)
            if any(box.overlaps(b) for b in placed) and t.anncoords == "offset points":
                before = box
                spot = _free_spot(t, renderer, placed, ax.bbox)
                if spot is None:
                    left += 1
                else:
                    t.xyann, _ = spot[:2], t.set_ha(spot[2])
                box = t.get_window_extent(renderer)
                # a label inside the axes before and after does not change the layout's margins
                moved += not (_inside(before, ax.bbox) and _inside(box, ax.bbox))
            placed.append(box)
    return left, moved


def _free_spot(t, renderer, placed, frame) -> tuple | None:
    """The first of _SPOTS where ``t`` covers no placed label, one inside the axes' ``frame``
    first (such a move leaves the layout's margins as they were); None when every spot is taken
    (``t`` is left at the last one tried)."""
    free = None
    for dx, dy, ha in _SPOTS:
        t.xyann, _ = (dx, dy), t.set_ha(ha)
        box = t.get_window_extent(renderer)
        if not any(box.overlaps(b) for b in placed):
            if _inside(box, frame):
                return dx, dy, ha
            free = free or (dx, dy, ha)
    return free


def _inside(box, frame) -> bool:
    return frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1


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
    from matplotlib.collections import PolyCollection

    axes = []
    for ax in fig.axes:
        series: dict[str, dict] = {}
        for line in ax.get_lines():
            if line.get_gid():
                series[line.get_gid()] = {"x": _nums(line.get_xdata()), "y": _nums(line.get_ydata())}
        for coll in ax.collections:
            if coll.get_gid() and not isinstance(coll, PolyCollection):  # shaded areas: their edge lines carry them
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



# --------------------------------------------------------------------------- option values


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


