"""Human units and text tables: the only place numbers meet people.

Everything upstream is SI; here FLOPs become "1.23 TFLOP", bytes "16.1 GB",
seconds "12.3 ms". Decimal prefixes (GB = 1e9) throughout.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence

import numpy as np

_PREFIXES = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")]


def si(value: float | None, unit: str = "", digits: int = 3) -> str:
    """1.23e12 -> '1.23 T<unit>' with decimal prefixes; None/nan -> '-'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    v = float(value)
    if v == 0:
        return f"0 {unit}".strip()
    for scale, prefix in _PREFIXES:
        if abs(v) >= scale:
            return f"{v / scale:.{digits}g} {prefix}{unit}".strip()
    return f"{v:.{digits}g} {unit}".strip()


def count(value: float) -> str:
    """Parameter-style count: 8.03e9 -> '8.03 B'."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {suffix}"
    return f"{value:.0f}"


def nbytes(value: float | None) -> str:
    return si(value, "B")


def seconds(value: float | None) -> str:
    """Seconds in the most readable of s / ms / us."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    v = float(value)
    if abs(v) >= 1:
        return f"{v:.3g} s"
    if abs(v) >= 1e-3:
        return f"{v * 1e3:.3g} ms"
    return f"{v * 1e6:.3g} us"


def percent(value: float) -> str:
    return f"{100 * value:.1f}%"


def table(rows: Sequence[Sequence[object]], headers: Sequence[str], align: str | None = None) -> str:
    """A plain aligned text table; ``align`` is one 'l'/'r' per column (default: first l, rest r)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    align = align or "l" + "r" * (len(headers) - 1)

    def line(r: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(r, widths, align, strict=True)).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), sep, *(line(r) for r in cells[1:])])


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]], align: str | None = None) -> str:
    """A GitHub-markdown table; ``align`` has one l or r per column (default: all l); pipes escaped."""
    align = align or "l" * len(headers)

    def cell(c: object) -> str:
        return str(c).replace("|", "\\|")

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |",
             "|" + "|".join("---:" if a == "r" else ":---" for a in align) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _jsonable(obj: object) -> object:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        f = float(obj)
        return None if math.isnan(f) or math.isinf(f) else f
    return obj


def to_json(obj: object) -> str:
    """JSON with numpy scalars/arrays converted and NaN/inf as null."""
    return json.dumps(_jsonable(obj), indent=2)


def to_csv(rows: Iterable[dict]) -> str:
    """Flat dicts -> CSV text (header: the union of the rows' keys; a key a row lacks is empty)."""
    import csv
    import io

    rows = list(rows)
    if not rows:
        return ""
    buf = io.StringIO()
    fields = list(dict.fromkeys(k for r in rows for k in r))  # every row's keys, first seen first
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: _jsonable(v) for k, v in r.items()})
    return buf.getvalue()
