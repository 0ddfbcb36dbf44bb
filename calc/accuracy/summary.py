"""The figures `roofline accuracy` prints: the done-when lines and the grouped error tables."""

from __future__ import annotations

import math
from collections.abc import Callable

from calc.accuracy.harness import MODELS, Result
from calc.accuracy.stats import PHASE, bias, stats
from calc.core import text as render

TARGET_MEDIAN, TARGET_P90, TARGET_BIAS, TARGET_ROWS = 0.12, 0.25, 0.05, 250
GROUPINGS: tuple[tuple[str, Callable[[Result], str]], ...] = (
    ("metric", lambda r: r.row.metric), ("phase", lambda r: PHASE[r.row.metric]),
    ("engine", lambda r: r.row.engine), ("GPU family", lambda r: r.row.family),
    ("mechanism", lambda r: r.row.mechanism),
    ("publisher", lambda r: r.row.publisher))


def _cell(s: dict) -> str:
    return f"{100 * s['median']:.0f}% / {100 * s['p90']:.0f}%" if s["n"] else "-"


def _ratio(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{x:.2f}"


def phase_bias(results: list[Result], which: str, phase: str) -> float:
    return bias([r.time_ratio(which) for r in results if PHASE[r.row.metric] == phase])


def done_when(results: list[Result], rows_in_file: int, loso: bool = True) -> list[str]:
    """The issue's targets, each with its figure as measured and whether it is met
    (``loso`` False: the current model was not refitted, so the figures are not held out)."""
    s = stats([r.error("current") for r in results])
    mark = lambda ok: "met" if ok else "NOT met"  # noqa: E731
    tag = "LOSO" if loso else "NO FIT"
    lines = [f"{tag + ' median |error|':<22}{100 * s['median']:5.1f}%  (target <= {100 * TARGET_MEDIAN:.0f}%: "
             f"{mark(s['median'] <= TARGET_MEDIAN)})",
             f"{tag + ' p90 |error|':<22}{100 * s['p90']:5.1f}%  (target <= {100 * TARGET_P90:.0f}%: "
             f"{mark(s['p90'] <= TARGET_P90)})"]
    for phase in ("TTFT", "decode"):
        b = phase_bias(results, "current", phase)
        ok = math.isfinite(b) and abs(b - 1) <= TARGET_BIAS
        lines.append(f"{phase + ' bias':<22}{_ratio(b):>6}  (median predicted/measured time, target 1 +- "
                     f"{TARGET_BIAS:.2f}: {mark(ok)})")
    unpredicted = len(results) - s["n"]
    lines.append(f"{'rows':<22}{rows_in_file:6d}  ({len(results)} predictable, {unpredicted} of them with no "
                 f"prediction (KV cache does not fit); target >= {TARGET_ROWS}: {mark(rows_in_file >= TARGET_ROWS)})")
    return lines


def overall_table(results: list[Result]) -> str:
    """The three models, and the presets as committed now (no refit, not held out)."""
    head = ["model", "n", "median |error|", "p90 |error|", "TTFT bias", "decode bias"]
    rows = []
    for which, label in (*MODELS, ("presets", "presets as committed, no refit")):
        s = stats([r.error(which) for r in results])
        rows.append([label, s["n"], f"{100 * s['median']:.1f}%", f"{100 * s['p90']:.1f}%",
                     _ratio(phase_bias(results, which, "TTFT")), _ratio(phase_bias(results, which, "decode"))])
    return render.table(rows, head)


def grouped_table(results: list[Result], title: str, key: Callable[[Result], str]) -> str:
    """Median / p90 |error| of each model, and the current model's bias, per group."""
    rows = []
    for g in sorted({key(r) for r in results}):
        sub = [r for r in results if key(r) == g]
        cells = [g, str(len(sub))] + [_cell(stats([r.error(w) for r in sub])) for w, _ in MODELS]
        cells.append(_ratio(bias([r.time_ratio("current") for r in sub])))
        rows.append(cells)
    return render.table(rows, [title, "n", *[f"{label}: median / p90" for _, label in MODELS], "current bias"])


def figures(results: list[Result], rows_in_file: int, loso: bool = True, groupings=GROUPINGS) -> str:
    """Everything the command prints: done-when lines, the three models, per-group tables."""
    parts = ["\n".join(done_when(results, rows_in_file, loso)), overall_table(results)]
    parts += [grouped_table(results, title, key) for title, key in groupings]
    return "\n\n".join(parts)
