"""Neighbour checks of a measured kernel table: no cell slower than a larger neighbour.

Every axis of a kernel table is a size (rows, widths, heads, context, bytes), so a kernel's time
does not fall as one grows: a cell slower than its next-larger neighbour along some axis, by more
than a tolerance, was measured badly (on a busy CPU: a thread team waiting out a scheduler time
slice at a barrier, which the descheduling check misses because spinning threads burn CPU time).
Such cells are measured again (validate.kernels.measure_tables), and what is left is recorded in
the table's provenance and printed.
"""

from __future__ import annotations

import numpy as np

REMEASURE = 1.5  # a cell slower than a larger neighbour by more than this is measured again
BREAK = 2.0  # what a profile may keep (issue 21: no cell breaks monotonicity by more than 2x)
ROUNDS = 2  # re-measurements of the cells still over REMEASURE


def breaks(axes: dict[str, list[float]], seconds, tol: float = REMEASURE) -> dict[int, float]:
    """Row-major cell index -> its worst ratio to a larger neighbour, for the cells over ``tol``."""
    shape = tuple(len(v) for v in axes.values())
    t = np.asarray(seconds, float).reshape(shape)
    worst = np.ones(shape)
    for ax, n in enumerate(shape):
        if n < 2:
            continue
        cur = np.take(t, range(n - 1), axis=ax)
        nxt = np.take(t, range(1, n), axis=ax)
        ratio = np.where(nxt > 0, cur / nxt, 1.0)
        idx = [slice(None)] * len(shape)
        idx[ax] = slice(0, n - 1)
        worst[tuple(idx)] = np.maximum(worst[tuple(idx)], ratio)
    flat = worst.ravel()
    return {int(i): float(flat[i]) for i in np.nonzero(flat > tol)[0]}


def worst_break(axes: dict[str, list[float]], seconds) -> float:
    """The largest ratio of a cell to a larger neighbour (1.0: monotone)."""
    b = breaks(axes, seconds, 1.0)
    return max(b.values(), default=1.0)
