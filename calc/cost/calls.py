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
    (calc.spec.kernel_tables.KERNEL_AXES): ``count`` calls of ``kernel`` at ``axes``. An attention
    call may state its work as ``pairs`` (query, key pairs over the whole call) beside ``B`` and, for
    a prefill, ``tokens``: the table is then read at S = pairs / B - 1 (decode) or T = tokens / B
    (prefill), every axis affine in a ragged step's features (calc.serving.steps.stepmodel)."""

    kernel: str
    axes: tuple[tuple[str, object], ...]
    count: object = 1.0
    op: str | None = None


def attention_calls(ps, window, heads, kv_heads, head_dim, chunks: bool = False) -> tuple[KernelCall, ...]:
    """The table lookup of a standard attention kernel: prefill over (B, T, Hq, Hkv, D, W) after P
    cached positions (W: the keys the last query sees), a decode step over (B, S, Hq, Hkv, D) with S
    capped to W - 1 under a window.

    ``ps`` may be one part of a ragged step (Pass.part; ``chunks``: its prompt chunks, else its decode
    groups), run as an engine runs it, in one varlen call per part: the decode groups' query rows
    at the mean keys they read, the chunks at their mean length with the pairs they attend (their
    cached keys too). An absent part has no call (count 0)."""
    common = (("Hq", heads), ("Hkv", kv_heads), ("D", head_dim))
    if ps.ragged:
        present = np.minimum(ps.total(ps.batch), 1.0)
        pairs = ps.pairs(window)
        if chunks:
            # W: the layer's window (none: any window the table holds is as wide as no window)
            return (KernelCall("attention_prefill", (("B", ps.total(ps.batch)), ("tokens", ps.tokens), ("pairs", pairs),
                                                     *common, ("W", 1e30 if window is None else window)), present),)
        return (KernelCall("attention_decode", (("B", ps.tokens), ("pairs", pairs), *common), present),)
    if ps.phase == "decode":
        past = ps.past if window is None else np.minimum(ps.past, window - 1)
        return (KernelCall("attention_decode", (("B", ps.batch), ("S", past), *common)),)
    keys = ps.new + ps.past if window is None else np.minimum(window, ps.new + ps.past)
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
