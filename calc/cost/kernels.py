"""Operator times from measured kernel tables (calc.spec.kernel_tables), where a profile has them.

A table holds seconds over a grid of shapes. Its times are turned into rates, work / time
(work: 2MKN FLOPs for a matmul, 4 D FLOPs per (query, key) pair and head for attention,
bytes for streaming kernels, gathers, sampling and collectives), and the rate at a
queried shape is interpolated multilinearly in log(rate) over log(axes); outside the
grid each axis is clamped to its end (the rate stays the edge's, so time scales with
work). No shape takes less than the table's fastest cell: below the grid a kernel's time
is its launch floor, not a shrinking share of the edge's (on an H200, RoPE of one decode
token at the edge's rate came to 1.6 us, its 7 kernels' floor in a CUDA graph is 12.6 us).
At a grid point the table's own time comes back exactly. An operator whose
kernels have no table is timed by the analytical model (calc.cost.roofline); the
roofline clamps every measured time so no operator runs faster than the profile's peaks.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from calc.cost.calls import KernelCall
from calc.cost.dtypes import Dtypes
from calc.cost.opcost import OpCost, attention_pairs
from calc.spec.kernel_tables import KernelSet, KernelTable


def work(kernel: str, axes: dict[str, np.ndarray]) -> np.ndarray:
    """What a kernel does at a shape: FLOPs for matmul and attention, bytes for the rest."""
    if kernel == "matmul":
        return 2.0 * axes["M"] * axes["K"] * axes["N"]
    if kernel.startswith("attention") and "pairs" in axes:  # a ragged step's call: its pairs
        return 4.0 * axes["D"] * axes["Hq"] * axes["pairs"]
    if kernel == "attention_prefill":  # T new positions after P cached, a query seeing at most W keys
        pairs = attention_pairs(axes["T"], axes.get("P", 0.0), axes.get("W"))
        return 4.0 * axes["D"] * axes["Hq"] * axes["B"] * pairs
    if kernel == "attention_decode":
        return 4.0 * axes["D"] * axes["Hq"] * axes["B"] * (axes["S"] + 1.0)
    return np.asarray(axes["bytes"], dtype=float)


_FORMS: dict[int, tuple[KernelTable, tuple]] = {}  # id -> (table, its interpolation form); tables are immutable


def _log_rates(table: KernelTable) -> tuple[tuple[np.ndarray, ...], np.ndarray, float]:
    """(log axis values per axis, log rate per grid cell, the fastest cell's seconds): the table in
    interpolation form."""
    hit = _FORMS.get(id(table))
    if hit is not None and hit[0] is table:
        return hit[1]
    names = list(table.axes)
    grids = [np.asarray(table.axes[n], dtype=float) for n in names]
    mesh = np.meshgrid(*grids, indexing="ij")
    seconds = np.asarray(table.seconds, dtype=float).reshape([len(g) for g in grids])
    rate = work(table.kernel, dict(zip(names, mesh, strict=True))) / seconds
    form = (tuple(np.log(g) for g in grids), np.log(rate), float(seconds.min()))
    if len(_FORMS) > 256:
        _FORMS.clear()
    _FORMS[id(table)] = (table, form)
    return form


def _lookup(kernel: str, axes: dict[str, object], base: dict | None = None) -> dict[str, np.ndarray]:
    """The query as float arrays (over ``base``, axes already converted), with the table coordinates
    a ragged step's call implies (KernelCall): S = pairs / B - 1 for a decode call, T = tokens / B
    for a prefill one."""
    q = dict(base) if base else {}
    q.update((k, np.asarray(v, dtype=float)) for k, v in axes.items())
    if "pairs" in q and "B" in q:
        per = np.maximum(q["B"], 1e-30)
        if kernel == "attention_decode":
            q["S"] = q["pairs"] / per - 1.0
        elif "tokens" in q:
            q["T"] = q["tokens"] / per
    return q


def _interpolate(logs, log_rate: np.ndarray, coords) -> np.ndarray:
    """log_rate (a grid over ``logs``) interpolated multilinearly at ``coords`` (log axis values,
    broadcast), each clamped to its axis's ends."""
    lo, frac = [], []
    for g, x in zip(logs, coords, strict=True):
        if len(g) == 1:
            lo.append(np.zeros(x.shape, dtype=int))
            frac.append(np.zeros(x.shape))
            continue
        x = np.clip(x, g[0], g[-1])
        i = np.clip(np.searchsorted(g, x, side="right") - 1, 0, len(g) - 2)
        lo.append(i)
        frac.append((x - g[i]) / (g[i + 1] - g[i]))
    out = np.zeros(coords[0].shape if coords else ())
    for corner in itertools.product((0, 1), repeat=len(logs)):
        weight = np.ones(out.shape)
        idx = []
        for bit, i, f, g in zip(corner, lo, frac, logs, strict=True):
            weight = weight * (f if bit else 1.0 - f)
            idx.append(np.minimum(i + bit, len(g) - 1))
        out = out + weight * log_rate[tuple(idx)]
    return out


def _coords(names, q) -> list[np.ndarray]:
    return np.broadcast_arrays(*(np.log(np.maximum(q[n], 1e-30)) for n in names))


def table_time(table: KernelTable, axes: dict[str, object]) -> np.ndarray:
    """Seconds of one call at ``axes`` (arrays broadcast): work / rate, the log-rate interpolated
    multilinearly in log(axes) and clamped to the grid, and never under the table's fastest cell.
    Axes the table lacks are ignored."""
    logs, log_rate, floor = _log_rates(table)
    q = _lookup(table.kernel, axes)
    return np.maximum(work(table.kernel, q) / np.exp(_interpolate(logs, log_rate, _coords(table.axes, q))), floor)


@dataclass(frozen=True)
class TableSlice:
    """A table read with some axes fixed (``fixed``, the query's constant axes): its log-rates
    interpolated along the fixed axes once, so each call interpolates over the axes left
    (``names``) alone. Multilinear interpolation is linear along each axis apart, so ``time`` is
    table_time's, to rounding, at a fraction of its work (a ragged step's calls, where only M,
    or B and the pairs, vary)."""

    kernel: str
    names: tuple[str, ...]
    logs: tuple[np.ndarray, ...]
    log_rate: np.ndarray
    floor: float
    fixed: dict

    def time(self, axes: dict[str, object]) -> np.ndarray:
        q = _lookup(self.kernel, axes, self.fixed)
        if len(self.names) == 1:  # one axis left: np.interp is the same interpolation, clamped alike
            (n,) = self.names
            rate = np.interp(np.log(np.maximum(q[n], 1e-30)), self.logs[0], self.log_rate)
        else:
            rate = _interpolate(self.logs, self.log_rate, _coords(self.names, q))
        return np.maximum(work(self.kernel, q) / np.exp(rate), self.floor)


def table_slice(table: KernelTable, fixed: dict[str, object]) -> TableSlice:
    """``table`` with the axes that ``fixed`` gives (directly, not derived from varying ones) folded in."""
    logs, log_rate, floor = _log_rates(table)
    names = list(table.axes)
    q = _lookup(table.kernel, fixed)
    keep = [i for i, n in enumerate(names) if n not in q]
    mesh = np.meshgrid(*(logs[i] for i in keep), indexing="ij")
    shape = mesh[0].shape if mesh else ()
    coords = [mesh[keep.index(i)] if i in keep else np.full(shape, np.log(max(float(q[n]), 1e-30)))
              for i, n in enumerate(names)]
    return TableSlice(table.kernel, tuple(names[i] for i in keep), tuple(logs[i] for i in keep),
                      _interpolate(logs, log_rate, coords), floor, q)


def stream_op(name: str) -> tuple[str, str | None] | None:
    """(kernel, op) of a table that times an elementwise operator, by its name; None: none does."""
    leaf = [p for p in name.split(".") if p != "local"][-1]  # "mlp.act_mul", "qk_norm.local" (sliding layers)
    if name == "embedding":
        return "embedding", None
    if name == "sample":
        return "sample", None
    if "norm" in leaf:
        return "stream", "norm"
    if leaf.startswith("rope"):
        return "stream", "rope"
    if leaf.startswith("act"):
        return "stream", "act"
    if leaf.startswith(("residual_add", "position_embedding")):
        return "stream", "add"
    return None


def _dtype(call_kernel: str, dt: Dtypes) -> str:
    if call_kernel == "matmul":
        return dt.compute
    if call_kernel.startswith("attention"):
        return dt.attention_compute
    return dt.act


def op_calls(op: OpCost) -> tuple[KernelCall, ...]:
    """The kernel calls a table would time ``op`` by: its own, or an elementwise operator's stream
    kernel by its name (none: the analytical model times it)."""
    if op.calls or op.kind != "other":
        return op.calls
    found = stream_op(op.name)
    return () if found is None else (KernelCall(found[0], (("bytes", op.bytes),), op=found[1]),)


def measured_time(op: OpCost, dt: Dtypes, tables: KernelSet) -> np.ndarray | None:
    """Seconds of one occurrence of ``op`` from the tables, or None when one of its kernels has none."""
    calls = op_calls(op)
    if not calls:
        return None
    total = np.float64(0.0)
    for c in calls:
        table = call_table(c, dt, tables)
        if table is None:
            return None
        total = total + np.asarray(c.count, dtype=float) * table_time(table, dict(c.axes))
    return total


def call_table(call: KernelCall, dt: Dtypes, tables: KernelSet) -> KernelTable | None:
    """The table that times ``call`` at the pass's dtypes (None: none does)."""
    return tables.find(call.kernel, _dtype(call.kernel, dt), call.op)
