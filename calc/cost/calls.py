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
    (calc.spec.kernel_tables.KERNEL_AXES): ``count`` calls of ``kernel`` at ``axes``."""

    kernel: str
    axes: tuple[tuple[str, object], ...]
    count: object = 1.0
    op: str | None = None


def attention_calls(ps, window, heads, kv_heads, head_dim) -> tuple[KernelCall, ...]:
    """The table lookup of a standard attention kernel: prefill over (B, T, Hq, Hkv, D, W),
    a decode step over (B, S, Hq, Hkv, D) with S capped to W - 1 under a window."""
    if ps.ragged:
        return ()
    common = (("Hq", heads), ("Hkv", kv_heads), ("D", head_dim))
    if ps.phase == "decode":
        past = ps.past if window is None else np.minimum(ps.past, window - 1)
        return (KernelCall("attention_decode", (("B", ps.batch), ("S", past), *common)),)
    w = ps.new + ps.past if window is None else np.minimum(window, ps.new + ps.past)
    return (KernelCall("attention_prefill", (("B", ps.batch), ("T", ps.new), *common, ("W", w))),)


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
