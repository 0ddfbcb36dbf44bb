"""The kernels an operator runs, by the shape a measured kernel table is looked up with.

calc.cost.operators attaches these to its operators (``OpCost.calls``); calc.cost.kernels
times them from a profile's tables. Axes follow calc.spec.kernel_tables.KERNEL_AXES.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from calc.spec.model import ModelSpec


@dataclass(frozen=True)
class KernelCall:
    """A kernel an operator runs, by the shape a measured table is looked up with
    (calc.spec.kernel_tables.KERNEL_AXES): ``count`` calls of ``kernel`` at ``axes``. ``groups``:
    the axes' last axis lists a ragged step's sequence groups, one call each, their times summed."""

    kernel: str
    axes: tuple[tuple[str, object], ...]
    count: object = 1.0
    op: str | None = None
    groups: bool = False


def attention_calls(ps, window, heads, kv_heads, head_dim, chunks: bool = False) -> tuple[KernelCall, ...]:
    """The table lookup of a standard attention kernel: prefill over (B, T, Hq, Hkv, D, W) after P
    cached positions (W: the keys the last query sees), a decode step over (B, S, Hq, Hkv, D) with S
    capped to W - 1 under a window.

    ``ps`` may be one part of a ragged step (Pass.part; ``chunks``: its prompt chunks, else its decode
    groups), as an engine runs it: the decode groups as ONE batched decode call over all their query
    rows at their mean context (the same keys read), each prompt chunk as its own prefill call after
    its cached positions. An absent part has no call (count 0)."""
    common = (("Hq", heads), ("Hkv", kv_heads), ("D", head_dim))
    past = ps.past if window is None else np.minimum(ps.past, window - 1)
    keys = ps.new + ps.past if window is None else np.minimum(window, ps.new + ps.past)
    if ps.ragged and chunks:
        live = (ps.batch > 0).astype(float)
        return (KernelCall("attention_prefill", (("B", np.maximum(ps.batch, 1.0)), ("T", ps.new), *common,
                                                 ("W", keys), ("P", ps.past)), live, groups=True),)
    if ps.ragged:
        rows = ps.total(ps.batch * ps.new)
        mean = ps.total(ps.batch * ps.new * past) / np.maximum(rows, 1.0)
        return (KernelCall("attention_decode", (("B", np.maximum(rows, 1.0)), ("S", mean), *common),
                           np.minimum(rows, 1.0)),)
    if ps.phase == "decode":
        return (KernelCall("attention_decode", (("B", ps.batch), ("S", past), *common)),)
    return (KernelCall("attention_prefill", (("B", ps.batch), ("T", ps.new), *common, ("W", keys), ("P", ps.past))),)


def expert_calls(model: ModelSpec, rows, H, Fe, experts, act_bytes: float, routed) -> tuple[KernelCall, ...]:
    """The kernels each expert hit runs, as a loop over experts runs them (transformers' MoE blocks
    and validate/reference.py): its MLP's matmuls (gated: gate_up, down) and activation on the
    ``rows`` routed to it, the gather of those rows, the routing-weight multiply and the index_add
    of the result (each ~3 x rows x H elements), and the scan of the ``routed`` (token, slot)
    choices that finds them (int64 read, bool written: 9 bytes each)."""
    gated = model.mlp.kind == "gated"
    up = 2 * Fe if gated else Fe
    act = rows * (3 if gated else 2) * Fe * act_bytes
    return (KernelCall("matmul", (("M", rows), ("K", H), ("N", up)), experts),
            KernelCall("matmul", (("M", rows), ("K", Fe), ("N", H)), experts),
            KernelCall("stream", (("bytes", act),), experts, op="act"),
            KernelCall("stream", (("bytes", 3 * rows * H * act_bytes),), 3 * experts, op="add"),
            KernelCall("stream", (("bytes", 9.0 * routed),), experts, op="add"))
