"""A pure decode step's time as a piecewise-linear function of the batch's total context.

N sequences each adding ``rows`` positions (a decode token, or a speculative verification of
k + 1) after contexts summing to u, every layer global (no attention window): their features
(calc.serving.steps.stepmodel.StepFeatures.decoding) are x(u) = x0 + u x1, with x0 fixed by N and rows
(tokens N rows, pairs N rows (rows + 1) / 2 + rows u, positions read N rows + u). Every row of the
step model's product S x is then affine in u, so each operator's max(compute, memory) and each
all-reduce's cheapest algorithm change at a few breakpoints, and between two breakpoints the
step time and its shares by bound are a + b u exactly. ``decode_line`` finds them once per
(N, rows) (cached on the step model), so a run of k decode steps costs a search and two products
instead of building a [features, k] matrix; tests/calc/serving/test_decodeline.py checks it against
StepModel.time_and_shares. Models with attention windows (positions read min(kv + rows, W) per
sequence) are not affine in u: they keep the general path (``decode_line`` returns None).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

import numpy as np

from calc.serving.steps.stepmodel import StepFeatures, StepModel


@dataclass(frozen=True)
class DecodeLine:
    """time(u) = t0[p] + t1[p] u and shares(u) = s0[:, p] + s1[:, p] u on piece p, the pieces split
    at ``bp`` (ascending; piece p holds bp[p - 1] < u <= bp[p])."""

    bp: np.ndarray  # [P - 1]
    t0: np.ndarray  # [P]
    t1: np.ndarray
    s0: np.ndarray  # [3, P]: compute, memory, communication (calc.cost.roofline.BOUNDS)
    s1: np.ndarray
    bp_list: list  # bp, t0, t1 as Python lists for the one-step path
    t0_list: list
    t1_list: list
    s0_lists: list  # [P] of s0[:, p] as a list, s1 the same (a run's shares, in scalars)
    s1_lists: list

    def run(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(step times [k], shares [3, k]) of steps at total contexts ``u`` [k]."""
        u = np.asarray(u, float)
        lo = bisect_left(self.bp_list, float(np.minimum.reduce(u, axis=None)))
        if lo == bisect_left(self.bp_list, float(np.maximum.reduce(u, axis=None))):
            # every step on one piece (a run's usual case): its coefficients broadcast, no gathers
            return self.t0_list[lo] + self.t1_list[lo] * u, self.s0[:, lo, None] + self.s1[:, lo, None] * u
        p = np.searchsorted(self.bp, u)
        return self.t0[p] + self.t1[p] * u, self.s0[:, p] + self.s1[:, p] * u

    def ascending(self, u: np.ndarray):
        """(step times [k], shares(j): the shares [3] (a list) summed over the first j steps) of steps at
        ascending total contexts ``u`` [k] (a run's): the times are run(u)'s; on one piece the
        shares are summed in closed form, j s0 + s1 sum(u[:j]), so a run the scheduler cuts
        short never prices the shares of the steps it does not take."""
        lo = bisect_left(self.bp_list, float(u[0]))
        if lo == bisect_left(self.bp_list, float(u[-1])):
            s0, s1 = self.s0_lists[lo], self.s1_lists[lo]
            return self.t0_list[lo] + self.t1_list[lo] * u, lambda j: _affine(s0, s1, j, float(np.add.reduce(u[:j])))
        return with_prefix_shares(*self.run(u))

    def steps_until(self, s: float, N: int, ahead: list, extra: float, t_arr) -> tuple[int, float, list] | None:
        """calc.serving.steps.timer.until(*ascending(s + N * ahead), extra, t_arr) in scalars, or None
        when the steps span more than one piece: the same products and the same sequential sum of
        the step times (the contexts are whole numbers, so their sum is exact in any order)."""
        bp = self.bp_list
        lo = bisect_left(bp, s + N * ahead[0])
        if lo != bisect_left(bp, s + N * ahead[-1]):
            return None
        a, b = self.t0_list[lo], self.t1_list[lo]
        total = u_sum = 0.0
        k = 0
        for x in ahead:
            u = s + N * x
            total += a + b * u + extra
            u_sum += u
            k += 1
            if t_arr is not None and total >= t_arr:
                break
        return k, total, _affine(self.s0_lists[lo], self.s1_lists[lo], k, u_sum)

    def time(self, u: float) -> float:
        """One step's time at total context ``u``."""
        p = bisect_left(self.bp_list, u)
        return self.t0_list[p] + self.t1_list[p] * u


def with_prefix_shares(t: np.ndarray, s: np.ndarray):
    """(step times [k], shares(j): the shares [3, k] summed over the first j steps) of a priced run."""
    return t, lambda j: np.add.reduce(s[:, :j], axis=1)


def _affine(s0: list, s1: list, j: int, u: float) -> list:
    """[a j + b u for each bound]: j steps' shares on one piece, in scalars."""
    return [a * j + b * u for a, b in zip(s0, s1, strict=True)]


def _unit_features(sm: StepModel, rows: int):
    """(x at one sequence less its per-sequence part, x per sequence, x per unit of total context,
    S x1): N sequences at total context u have features xc + N xn + u x1, experts aside (cached)."""
    key = ("decode_unit", rows)
    if key not in sm.cache:
        one, two, ctx = (sm.vector(StepFeatures.decoding(sm.windows, np.full(n, kv), 0.0, rows))
                         for n, kv in ((1, 0.0), (2, 0.0), (1, 1.0)))
        one[3] = two[3] = ctx[3] = 0.0
        x1 = ctx - one  # the pairs and positions read per position of context
        xn = two - one
        sm.cache[key] = (one - xn, xn, x1, sm._phase("decode").S @ x1)
    return sm.cache[key]


def decode_line(sm: StepModel, N: int, rows: int = 1) -> DecodeLine | None:
    """The DecodeLine of N sequences adding ``rows`` positions each (None when a layer has a window)."""
    key = ("decode_line", N, rows)
    hit = sm.cache.get(key, sm)  # sm: not looked up yet (None is an answer: windowed)
    if hit is not sm:
        return hit
    if any(W is not None for W in sm.windows) or N <= 0 or sm._phase("decode").tables:  # tables: not affine
        sm.cache[key] = None
        return None
    c = sm._phase("decode")
    xc, xn, x1, y1 = _unit_features(sm, rows)
    x0 = xc + N * xn  # x(u) = x0 + u x1: the features at total context 0 (whole numbers: exact) ...
    x0[3] = sm._experts(float(N * rows))  # ... the busiest GPU's experts (not affine in N)
    y0 = c.S @ x0
    n, G, A = c.n_ops, c.n_groups, c.n_algos
    cut = [(y0[n:2 * n] - y0[:n]) / np.where(y1[:n] != y1[n:2 * n], y1[:n] - y1[n:2 * n], np.nan)]
    g0, g1 = y0[2 * n + 2:].reshape(G, A), y1[2 * n + 2:].reshape(G, A)
    for i in range(A):
        for j in range(i + 1, A):
            d1 = g1[:, i] - g1[:, j]
            cut.append((g0[:, j] - g0[:, i]) / np.where(d1 != 0, d1, np.nan))
    bp = np.concatenate(cut)
    bp = np.unique(bp[np.isfinite(bp) & (bp > 0)])
    # one point inside each piece decides which term is active there
    mid = np.concatenate([bp[:1] / 2, (bp[1:] + bp[:-1]) / 2, bp[-1:] * 2 + 1]) if bp.size else np.ones(1)
    comp = y0[:n, None] + y1[:n, None] * mid
    mem = y0[n:2 * n, None] + y1[n:2 * n, None] * mid
    on_c = comp >= mem  # [n, P]
    c0 = np.where(on_c, y0[:n, None], 0.0).sum(axis=0)
    c1 = np.where(on_c, y1[:n, None], 0.0).sum(axis=0)
    m0 = np.where(on_c, 0.0, y0[n:2 * n, None]).sum(axis=0)
    m1 = np.where(on_c, 0.0, y1[n:2 * n, None]).sum(axis=0)
    if G:
        best = np.argmin(g0[:, :, None] + g1[:, :, None] * mid, axis=1)  # [G, P]
        gr = np.arange(G)[:, None]
        q0, q1 = g0[gr, best].sum(axis=0), g1[gr, best].sum(axis=0)
    else:
        q0 = q1 = np.zeros(mid.size)
    a0, a1 = y0[2 * n], y1[2 * n]  # overheads and affine communication
    k0, k1 = y0[2 * n + 1] + q0, y1[2 * n + 1] + q1  # the communication share
    t0, t1 = c0 + m0 + a0 + q0, c1 + m1 + a1 + q1
    s0, s1 = np.stack([c0, m0, k0]), np.stack([c1, m1, k1])
    line = DecodeLine(bp, t0, t1, s0, s1, bp.tolist(), t0.tolist(), t1.tolist(), s0.T.tolist(), s1.T.tolist())
    sm.cache[key] = line
    return line
