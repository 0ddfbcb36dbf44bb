"""What an operator costs and the shape of the pass it runs in: the values every formula returns.

An OpCost holds the values of ONE layer (or one occurrence) and ``layers``, how many times
it runs per pass; totals multiply the two. Every field broadcasts over numpy arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import Literal

import numpy as np

from calc.cost.calls import KernelCall

OpKind = Literal["linear", "attention", "other", "comm"]  # which FLOP count an operator adds to
Peak = Literal["matmul", "attention", "vector", "link"]  # which roof bounds it
Phase = Literal["prefill", "decode"]

_ZERO = np.float64(0.0)


@dataclass(frozen=True)
class OpCost:
    """One operator of one layer. ``peak`` picks the roof: matmul, attention or vector."""

    name: str
    kind: OpKind
    layers: int
    linear_flops: np.ndarray = _ZERO
    attention_flops: np.ndarray = _ZERO
    other_flops: np.ndarray = _ZERO
    weight_bytes: np.ndarray = _ZERO
    kv_read_bytes: np.ndarray = _ZERO
    kv_write_bytes: np.ndarray = _ZERO
    act_read_bytes: np.ndarray = _ZERO
    act_write_bytes: np.ndarray = _ZERO
    comm_bytes: np.ndarray = _ZERO  # bytes this GPU sends over the link
    comm_hops: float = 0.0  # latency hops of the collective
    collective: str = ""  # allreduce | all_to_all | send | gather (comm operators)
    message_bytes: np.ndarray = _ZERO  # the collective's message (its algorithm sets what is sent)
    group: int = 1  # GPUs taking part in the collective
    # M of each matmul (linear operators): the tokens it multiplies; attention: queries per sequence
    rows: np.ndarray = _ZERO
    in_features: float = 0.0  # K of a matmul (0: unknown)
    out_features: float = 0.0  # N of a matmul (0: unknown)
    sequences: np.ndarray = _ZERO  # attention: sequences in the pass
    present: np.ndarray = np.float64(1.0)  # 1: the operator runs; 0: an empty half of a ragged step's attention
    kernels: float = 1.0
    peak: Peak = "matmul"
    overlappable: bool = False
    calls: tuple[KernelCall, ...] = ()  # the kernels a measured table times (empty: none tabulated)
    # a matmul's own dtypes where they are not the pass's (calc.cost.dtypes.Dtypes: lm_head and the
    # linears a checkpoint leaves unquantised run 16-bit beside fp8/fp4/int GEMMs); None: the pass's
    dtypes: object | None = None

    @cached_property
    def flops(self) -> np.ndarray:
        return self.linear_flops + self.attention_flops + self.other_flops

    @cached_property
    def bytes(self) -> np.ndarray:
        """Memory traffic (communication is not memory traffic)."""
        return (self.weight_bytes + self.kv_read_bytes + self.kv_write_bytes
                + self.act_read_bytes + self.act_write_bytes)


STREAMS = ("weight_bytes", "kv_read_bytes", "kv_write_bytes", "act_read_bytes", "act_write_bytes")
FLOP_FIELDS = ("linear_flops", "attention_flops", "other_flops")


@dataclass(frozen=True)
class Pass:
    """The shape of one forward pass: B sequences, n new tokens each, p cached positions,
    ``logits`` positions per sequence that get logits (1: the last, as engines do).

    ``ragged``: the last axis of (batch, new, past) lists the sequence groups of ONE
    pass (a continuous-batching step mixing prefill chunks and decode tokens); every
    per-pass total sums over it, so weights are read once for all of them. ``phase``
    then names how MLA runs attention ("prefill": expanded, "decode": absorbed), and
    ``logits`` may be one count per group (a verification's k + 1 beside chunks' 1).
    """

    batch: np.ndarray
    new: np.ndarray
    past: np.ndarray
    phase: Phase  # MLA uses the absorbed form in decode
    logits: int = 1
    ragged: bool = False
    decode_rows: int = 1  # ragged: a group of at most this many new positions runs the decode kernel

    def total(self, per_group):
        """Sum over the sequence-group axis of a ragged pass; identity otherwise."""
        return np.sum(per_group, axis=-1) if self.ragged else per_group

    @cached_property
    def tokens(self) -> np.ndarray:
        """B * n: rows of every activation matrix."""
        return self.total(self.batch * self.new)

    @cached_property
    def logit_rows(self) -> np.ndarray:
        """B * min(n, logits): rows that reach lm_head."""
        return self.total(self.batch * np.minimum(self.new, self.logits))

    def part(self, chunks: bool) -> Pass:
        """The groups of a ragged pass that run the prefill attention kernel (``chunks``: more than
        ``decode_rows`` new positions, prompt chunks) or the decode one (the rest: decode tokens and
        verifications), as engines split a step between their prefill and decode kernels (vLLM v1
        ``split_decodes_and_prefills``, its decode threshold 1 + the speculative tokens). Other
        groups get batch 0."""
        chunk = self.new > self.decode_rows
        return replace(self, batch=self.batch * (chunk if chunks else ~chunk))

    def pairs(self, window) -> np.ndarray:
        """(query, key) pairs of the pass: B * attention_pairs(n, p, W), summed."""
        return self.total(self.batch * attention_pairs(self.new, self.past, window))

    def attended(self, window) -> np.ndarray:
        """Cached positions read: B * min(p + n, W), summed."""
        return self.total(self.batch * positions_attended(self.new, self.past, window))


def attention_pairs(new, past, window=None):
    """(query, key) pairs per sequence: sum_{i=1..n} min(p + i, W).

    Causal: query i of the new ones (1-based) sees the p cached positions and the
    first i new ones, capped at the window W. Without a window: n*p + n(n+1)/2.
    With one: the first m = clip(W - p, 0, n) queries see p + i, the rest see W.
    """
    n = np.asarray(new, dtype=float)
    p = np.asarray(past, dtype=float)
    if window is None:
        return n * p + n * (n + 1) / 2
    m = np.clip(window - p, 0, n)
    return m * p + m * (m + 1) / 2 + (n - m) * window


def positions_attended(new, past, window=None):
    """Distinct cached positions the pass reads per sequence: min(p + n, W)."""
    total = np.asarray(past, dtype=float) + np.asarray(new, dtype=float)
    return total if window is None else np.minimum(total, window)


def accumulate(terms) -> np.ndarray:
    """Sum of arrays/scalars, adding in place into one buffer (no temporary per term)."""
    acc = None
    for term in terms:
        if acc is None:
            acc = np.array(term, dtype=float)
        elif np.broadcast_shapes(acc.shape, np.shape(term)) != acc.shape:
            acc = acc + term  # the sum is larger than the buffer: a new one
        else:
            acc += term
    return _ZERO if acc is None else acc


def total(ops: list[OpCost], field: str) -> np.ndarray:
    """Sum of a field over all operators, times each operator's layer count."""
    return accumulate(getattr(op, field) * op.layers if op.layers != 1 else getattr(op, field) for op in ops)
