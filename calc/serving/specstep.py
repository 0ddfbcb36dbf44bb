"""Speculative decoding in the step model (calc.cost.speculative gives the formulas).

A decoding sequence at context S takes, per step, k draft decode steps (the draft model, or
the draft heads as a small decoder: calc.cost.speculative.draft_of) and one target
verification pass over k + 1 new positions after S cached ones, logits for all k + 1
(calc.cost.speculative.verify_cost). It emits (1 - alpha^(k+1)) / (1 - alpha) tokens on
average (calc.cost.speculative.expected_tokens).

In step-model features (calc.serving.stepmodel), the verification of N decoding sequences is
their decode features with TOKENS = N (k + 1), experts touched at N (k + 1) tokens and, for
global attention, pairs = sum (k+1) S + (k+1)(k+2)/2 and positions read = sum S + k + 1: exact;
a pure decode step is timed by a step model fitted on verification passes (all k + 1 positions
reach lm_head: calc.serving.stepmodel.verify_model). Sliding-window layers take (k + 1) times
the decode pairs (short of the exact count by at most k (k + 1) / 2 per sequence near the
window's edge). A step that also carries prefill chunks runs them in the same target pass
(timed by the ordinary step model: its verified positions beyond the first do not reach
lm_head there, an undercount of N k logit rows), and the draft prefills them too (its KV must
cover the prompt): the draft's first pass of the step is ragged (chunks + one token per
decoding sequence), the other k - 1 are decode steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from calc.cost.operators import experts_touched
from calc.serving.stepmodel import (
    EXPERTS,
    ONE,
    SEQUENCES,
    TOKENS,
    StepModel,
    attention_windows,
    pairs_row,
    read_row,
)


def verify_delta(model, k: int, x_dec: np.ndarray) -> np.ndarray:
    """What turning the decode tokens of features ``x_dec`` [F] or [F, j] into verifications of
    k + 1 positions adds (EXPERTS left at 0: it depends on the whole step's tokens)."""
    d = np.zeros_like(x_dec, dtype=float)
    N = x_dec[SEQUENCES]
    d[TOKENS] = N * k
    for j, w in enumerate(attention_windows(model)):
        p, r = pairs_row(j), read_row(j)
        if w is None:
            d[p] = k * (x_dec[p] - N) + N * (k + 1) * (k + 2) / 2 - N
            d[r] = N * k
        else:
            d[p] = k * x_dec[p]
            d[r] = np.minimum(x_dec[r] + N * k, N * w) - x_dec[r]
    return d


def with_experts(model, x: np.ndarray) -> np.ndarray:
    """x with EXPERTS recomputed from its TOKENS row (MoE: experts the step's tokens touch)."""
    m = model.moe
    if m is not None:
        x = x.copy()
        x[EXPERTS] = experts_touched(m.num_experts, m.experts_per_token, x[TOKENS])
    return x


@dataclass(frozen=True)
class SpecSteps:
    """Step times of a replica running speculative decoding."""

    target: StepModel
    verify: StepModel  # the target's verification passes (calc.serving.stepmodel.verify_model)
    draft: StepModel
    k: int
    tokens_per_step: float

    def verify_x(self, x: np.ndarray, x_dec: np.ndarray) -> np.ndarray:
        """Target features of a step whose features are ``x`` (decode tokens counted once) and
        whose decoding sequences alone have features ``x_dec``."""
        return with_experts(self.target.model, x + verify_delta(self.target.model, self.k, x_dec))

    def decode_s(self, x_dec: np.ndarray, xd_dec: np.ndarray) -> np.ndarray:
        """A pure decode step: target verification + k draft steps (``xd_dec``: the draft's features)."""
        return (self.verify.time_of(self.verify_x(x_dec, x_dec), "decode")
                + self.k * self.draft.time_of(xd_dec, "decode"))

    def mixed_s(self, x: np.ndarray, x_dec: np.ndarray, xd: np.ndarray, xd_dec: np.ndarray | None) -> float:
        """A step with prefill chunks: ``x``/``xd`` the target's/draft's features of the whole
        ragged step (decode tokens once), ``x_dec``/``xd_dec`` of its decoding sequences alone
        (None: no decodes)."""
        if xd_dec is None:
            return float(self.target.time_of(x, "prefill") + self.draft.time_of(xd, "prefill"))
        return float(self.target.time_of(self.verify_x(x, x_dec), "prefill") + self.draft.time_of(xd, "prefill")
                     + (self.k - 1) * self.draft.time_of(xd_dec, "decode"))

    def terms(self, x_dec: np.ndarray, xd_dec: np.ndarray) -> np.ndarray:
        """(compute, memory, comm) seconds of a pure decode step, for the bound tally."""
        t = np.asarray(self.verify.terms_of(self.verify_x(x_dec, x_dec), "decode"), float)
        return t + self.k * np.asarray(self.draft.terms_of(xd_dec, "decode"), float)


def decode_x(model, kv: np.ndarray, ahead=0.0) -> np.ndarray:
    """Decode features [F, j] of sequences at contexts kv + ahead_j (one column per ahead_j)."""
    a = np.atleast_1d(np.asarray(ahead, float))
    N = float(kv.size)
    windows = attention_windows(model)
    x = np.empty((4 + 2 * len(windows), a.size))
    x[ONE], x[TOKENS], x[SEQUENCES] = 1.0, N, N
    m = model.moe
    x[EXPERTS] = experts_touched(m.num_experts, m.experts_per_token, N) if m else 0.0
    s = float(kv.sum())
    for j, w in enumerate(windows):
        v = s + N * (a + 1) if w is None else np.minimum(kv[None, :] + a[:, None] + 1, w).sum(axis=1)
        x[pairs_row(j)] = v
        x[read_row(j)] = v
    return x
