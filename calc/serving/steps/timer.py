"""Step timers: what one scheduler step costs and what it emits, behind one protocol.

The scheduler, the closed form and the floors describe a step by what it runs, whatever the
model: the decoding sequences' cached contexts ``kv`` and the prompt chunks (``new`` tokens after
``past`` cached ones), each with a weight (the closed form's fractional counts; default 1). A
timer prices it and says what a decoding sequence emits; nobody else builds step features.

* ``PlainTimer``: one forward pass of the model (calc.serving.steps.stepmodel), one token per
  decoding sequence per step.
* ``SpecTimer``: speculative decoding (calc.cost.speculative). Per step, each decoding sequence
  at context S is verified by the target over k + 1 positions (all reaching lm_head; the
  decode kernel runs them, vLLM's decode threshold 1 + k), beside any prompt chunks, in one
  pass that pays the engine's step overhead once; the draft runs k passes inside that step,
  each paying ``draft_pass_s`` (calc.cost.speculative.DRAFT_PASS_S): the first is ragged when
  the step carries chunks (the draft's KV must cover the prompt too), the other k - 1 are
  decode passes (none when nothing decodes). The draft's passes are priced at context S.
  Step j (the replica-wide acceptance clock) emits floor(E (j + 1)) - floor(E j) tokens per
  decoding sequence, E = (1 - alpha^(k+1)) / (1 - alpha), so every request averages E (the
  per-request spread of accepted runs is left out: it changes the tail, not the means); a
  verification takes k + 1 slots of the token budget (as vLLM counts them).

Every method returns (seconds [steps], seconds under each of calc.cost.roofline.BOUNDS [3, steps]:
calc.cost.roofline.bound_of labels them). A run of pure decode steps on a model without attention
windows is priced through calc.serving.steps.decodeline (the same step model, piecewise linear in the
batch's total context: one search per run instead of a feature matrix).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from calc.serving.steps.decodeline import decode_line, with_prefix_shares
from calc.serving.steps.stepmodel import StepFeatures, StepModel

_NONE = np.zeros(0)
_STEPS = np.arange(1, 1 << 16)  # a plain timer's cumulative tokens per sequence (read-only slices)
_STEPS.flags.writeable = False
SHORT_RUN = 48  # decode steps a run may have and still be priced in scalars (numpy's calls cost more)


class StepTimer(Protocol):
    tokens_per_step: float  # expected tokens a decoding sequence emits per step
    decode_slots: int  # token-budget slots a decoding sequence takes per step

    def emitted(self, clock: int, steps: int) -> np.ndarray:
        """Tokens each decoding sequence has emitted after each of the next ``steps`` steps
        (cumulative), from step ``clock`` of the replica's steps with decode tokens."""

    def emits(self, clock: int) -> int:
        """Tokens each decoding sequence emits in step ``clock``: emitted(clock, 1)[0]."""

    def decode_run(self, kv, ahead, weight=None) -> tuple[np.ndarray, np.ndarray]:
        """Pure decode steps of the sequences at contexts ``kv`` [N] + ``ahead`` (one step per value)."""

    def decode_times(self, kv, ahead) -> tuple[np.ndarray, Callable[[int], np.ndarray]]:
        """decode_run(kv, ahead) for ascending ``ahead`` [k >= 1] (the scheduler's runs): the step
        times, and shares(j), the shares [3] (a sequence) summed over the first j steps (a run is cut at the
        first event, so summing only what is taken, in closed form on a decode line, saves work)."""

    def decode_until(self, kv, ahead, extra: float = 0.0, t_arr=None) -> tuple[int, float, list]:
        """until(*decode_times(kv, ahead), extra, t_arr): the steps a run takes, their seconds and
        shares (a short run on one piece of a decode line in scalars, the same sums)."""

    def decode_s(self, kv) -> float:
        """The time of one pure decode step of the sequences at contexts ``kv``: one(kv)[0], fast."""

    def step(self, kv, new=_NONE, past=_NONE, kv_weight=None, weight=None, chunks=None) -> tuple[np.ndarray, np.ndarray]:
        """Steps running the decoding sequences at ``kv`` and the chunks (new, past) [..., groups]
        (``chunks``: their chunk_features, when the caller keeps them)."""

    def chunk_features(self, new, past, weight=None) -> tuple:
        """The chunks' features, per model the step runs (what ``step`` adds to the decodes')."""

    def one(self, kv, chunk=(), past=()) -> tuple[float, tuple | np.ndarray]:
        """One step as the scheduler runs it (``chunk``, ``past``: lists): ``step``'s answer, fast
        (its shares [3] a tuple or an array)."""


def until(times: np.ndarray, shares: Callable, extra: float, t_arr) -> tuple[int, float, list]:
    """(steps k, seconds, shares [3]) of a priced run's first steps (``times`` [k], ``shares``(j) as
    decode_times gives them), each ``extra`` seconds longer: all of them, or (``t_arr``) up to and
    including the one during which ``t_arr`` seconds have passed."""
    cum_t = (times + extra if extra else times).cumsum()
    k = cum_t.size if t_arr is None else min(cum_t.size, int(cum_t.searchsorted(t_arr)) + 1)
    return k, float(cum_t[k - 1]), shares(k)


def _phase(new) -> str:
    return "prefill" if np.size(new) else "decode"


def _one(sm: StepModel, kv, chunk=(), past=(), rows: int = 1, decode_rows: int = 1, logits=1):
    """sm.time_and_shares(StepFeatures.one(...)) of one step. A model whose layers are all global
    (the scheduler's usual case) has its feature vector (StepModel.vector's layout, one window)
    built here in scalars with StepFeatures.one's arithmetic, skipping the dataclass (test_stepmodel
    checks the two agree)."""
    phase = "prefill" if chunk else "decode"
    if sm.windows != (None,):
        return sm.time_and_shares(StepFeatures.one(sm.windows, kv, chunk, past, rows, decode_rows, logits), phase)
    N = float(kv.size)
    s = float(np.add.reduce(kv)) if N else 0.0
    r = float(rows)
    dp, dr = r * s + N * r * (r + 1) / 2, s + N * r
    tokens = logit_rows = dtok = N * r
    dseq, cseq, ctok, cp, cr, cpr = N, 0.0, 0.0, 0.0, 0.0, 0.0
    for c, p in zip(chunk, past, strict=True):  # ints: the sums below are floats all the same
        tokens += c
        logit_rows += min(c, logits)
        pairs = c * p + c * (c + 1) / 2  # calc.serving.steps.stepmodel._pairs, no window
        if c <= decode_rows:
            dseq, dtok, dp, dr = dseq + 1.0, dtok + c, dp + pairs, dr + (p + c)
        else:
            cseq, ctok, cp, cr, cpr = cseq + 1.0, ctok + c, cp + pairs, cr + (p + c), cpr + pairs / c
    x = np.array([1.0, tokens, logit_rows, sm._experts(tokens), dseq, dtok, min(dseq, 1.0), cseq, ctok,
                  min(cseq, 1.0), dp, dr, cp, cr, cpr])
    return sm._one(x, phase)


@dataclass(frozen=True)
class PlainTimer:
    steps: StepModel
    logits: int = 1  # positions of a prompt chunk reaching lm_head (the preset's policy: 1, or all)
    tokens_per_step: float = 1.0
    decode_slots: int = 1

    def emitted(self, clock: int, steps: int) -> np.ndarray:
        return _STEPS[:steps] if steps < _STEPS.size else np.arange(1, steps + 1)

    def emits(self, clock: int) -> int:
        return 1

    def decode_run(self, kv, ahead, weight=None):
        sm = self.steps
        line = None if weight is not None else decode_line(sm, kv.size)
        if line is not None:  # every layer global: piecewise linear in the total context (calc.serving.steps.decodeline)
            return line.run(float(np.add.reduce(kv)) + kv.size * np.asarray(ahead, float))
        return sm.time_and_shares(StepFeatures.decoding(sm.windows, kv, ahead, weight=weight), "decode")

    def decode_times(self, kv, ahead):
        line = decode_line(self.steps, kv.size)
        if line is not None:
            return line.ascending(float(np.add.reduce(kv)) + kv.size * ahead)
        return with_prefix_shares(*self.decode_run(kv, ahead))

    def decode_until(self, kv, ahead, extra=0.0, t_arr=None):
        if ahead.size <= SHORT_RUN:
            line = decode_line(self.steps, kv.size)
            hit = None if line is None else line.steps_until(float(np.add.reduce(kv)), kv.size, ahead.tolist(),
                                                             extra, t_arr)
            if hit is not None:
                return hit
        return until(*self.decode_times(kv, ahead), extra, t_arr)

    def decode_s(self, kv) -> float:
        line = decode_line(self.steps, kv.size)
        return self.one(kv)[0] if line is None else line.time(float(np.add.reduce(kv)))

    def one(self, kv, chunk=(), past=()):
        return _one(self.steps, kv, chunk, past, logits=self.logits)

    def chunk_features(self, new, past, weight=None):
        return (self.steps.features(new, past, weight, self.logits),)

    def step(self, kv, new=_NONE, past=_NONE, kv_weight=None, weight=None, chunks=None):
        sm = self.steps
        f = StepFeatures.decoding(sm.windows, kv, weight=kv_weight)
        if np.size(new):
            f = f + (self.chunk_features(new, past, weight) if chunks is None else chunks)[0]
        return sm.time_and_shares(f, _phase(new))


@dataclass(frozen=True)
class SpecTimer:
    target: StepModel
    draft: StepModel  # fitted with the draft's per-pass cost as its step overhead
    k: int
    tokens_per_step: float
    logits: int = 1

    @property
    def decode_slots(self) -> int:
        return self.k + 1

    def emitted(self, clock: int, steps: int) -> np.ndarray:
        i = np.arange(1, steps + 1)
        return (np.floor(self.tokens_per_step * (clock + i)) - math.floor(self.tokens_per_step * clock)).astype(np.int64)

    def emits(self, clock: int) -> int:
        E = self.tokens_per_step
        return math.floor(E * (clock + 1)) - math.floor(E * clock)

    def decode_run(self, kv, ahead, weight=None):
        t, d, k = self.target, self.draft, self.k
        lt = None if weight is not None else decode_line(t, kv.size, k + 1)
        ld = None if lt is None else decode_line(d, kv.size)
        if ld is not None:  # calc.serving.steps.decodeline: the verification and the draft's passes
            s = float(np.add.reduce(kv))
            u = s + kv.size * np.asarray(ahead, float)
            (vt, vs), (dt, ds) = lt.run(u), ld.run(u)
            return vt + k * dt, vs + k * ds
        vt, vs = t.time_and_shares(StepFeatures.decoding(t.windows, kv, ahead, k + 1, weight), "decode")
        dt, ds = d.time_and_shares(StepFeatures.decoding(d.windows, kv, ahead, weight=weight), "decode")
        return vt + k * dt, vs + k * ds

    def decode_times(self, kv, ahead):
        lt, ld = decode_line(self.target, kv.size, self.k + 1), decode_line(self.draft, kv.size)
        if lt is None or ld is None:
            return with_prefix_shares(*self.decode_run(kv, ahead))
        u = float(np.add.reduce(kv)) + kv.size * np.asarray(ahead, float)
        (vt, vs), (dt, ds), k = lt.ascending(u), ld.ascending(u), self.k
        return vt + k * dt, lambda j: [a + k * b for a, b in zip(vs(j), ds(j), strict=True)]

    def decode_until(self, kv, ahead, extra=0.0, t_arr=None):
        return until(*self.decode_times(kv, ahead), extra, t_arr)

    def decode_s(self, kv) -> float:
        lt, ld = decode_line(self.target, kv.size, self.k + 1), decode_line(self.draft, kv.size)
        if lt is None or ld is None:
            return self.one(kv)[0]
        s = float(np.add.reduce(kv))
        return lt.time(s) + self.k * ld.time(s)

    def one(self, kv, chunk=(), past=()):
        t, d, k = self.target, self.draft, self.k
        vt, vs = _one(t, kv, chunk, past, k + 1, k + 1, self.logits)
        f1, s1 = _one(d, kv, chunk, past, logits=self.logits)
        vs, s1 = np.array(vs), np.array(s1)
        if not chunk:  # k decode passes
            return vt + k * f1, vs + k * s1
        if not kv.size:  # the draft prefills the chunks; nothing decodes
            return vt + f1, vs + s1
        fr, sr = _one(d, kv)
        return vt + f1 + (k - 1) * fr, vs + s1 + (k - 1) * np.array(sr)

    def chunk_features(self, new, past, weight=None):
        return (self.target.features(new, past, weight, self.logits, self.k + 1),
                self.draft.features(new, past, weight, self.logits))

    def step(self, kv, new=_NONE, past=_NONE, kv_weight=None, weight=None, chunks=None):
        t, d, k = self.target, self.draft, self.k
        phase = _phase(new)
        ft = StepFeatures.decoding(t.windows, kv, rows=k + 1, weight=kv_weight)
        fd = StepFeatures.decoding(d.windows, kv, weight=kv_weight)
        if np.size(new):
            ct, cd = self.chunk_features(new, past, weight) if chunks is None else chunks
            ft = ft + ct
            first = fd + cd
        else:
            first = fd
        vt, vs = t.time_and_shares(ft, phase)
        f1, s1 = d.time_and_shares(first, phase)
        decoding = np.minimum(fd.decode_seqs, 1.0)  # no decode passes when nothing decodes
        fr, sr = d.time_and_shares(fd, "decode")
        rest = (k - 1) * decoding * sr  # the same for every step of a vectorised call: [3]
        return vt + f1 + (k - 1) * decoding * fr, vs + s1 + rest.reshape(rest.shape + (1,) * (vs.ndim - rest.ndim))
