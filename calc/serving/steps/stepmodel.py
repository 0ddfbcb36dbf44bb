"""An exact, fast step-time model of one replica configuration.

A step (one iteration) is one forward pass over a ragged batch: sequence i adds new[i]
positions after past[i] cached ones, weights read once. Its time is
calc.cost.latency.mixed_step_cost. ``StepModel`` reproduces that time from the step's
``StepFeatures`` (named numbers: tokens, logit rows, and for the decode-kernel groups and the
prefill-kernel chunks apart their sequences, tokens and, per attention window, the (query, key)
pairs and positions read): every operator's compute and memory terms are affine in them, and
each all-reduce costs the cheapest of its algorithms, each affine in the message (so in the
tokens). On a profile with measured kernel tables an operator they time is its calls' table times
(never under its roofs): table lookups are not affine, but every call's axes and count are
(calc.cost.calls: a ragged step's attention as two varlen calls), so the model keeps them as such. The model is fitted once per configuration (a few milliseconds,
calc.serving.steps.stepfit.step_model) and then costs microseconds instead of a quarter of a
millisecond; stepfit's ``check_step_model`` and the property test compare it with mixed_step_cost
itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from calc.cost.experts import busiest_experts
from calc.cost.opcost import attention_pairs, positions_attended
from calc.cost.parallel import Parallel
from calc.cost.roofline import bound_of
from calc.spec.model import ModelSpec

_sum, _min = np.add.reduce, np.minimum.reduce


def attention_windows(model: ModelSpec) -> tuple:
    """The distinct attention windows of the model's layers: None (global) and/or W."""
    n_slide = int(model.sliding_layers.sum())
    out = (None,) if model.num_layers - n_slide else ()
    return out + ((model.attention.sliding_window,) if n_slide else ())


def _window_sums(new, past, w, windows):
    """(pairs, positions read) per window [len(windows), ...], summed over the last (group) axis."""
    pairs = np.stack([np.sum(w * attention_pairs(new, past, W), axis=-1) for W in windows])
    read = np.stack([np.sum(w * positions_attended(new, past, W), axis=-1) for W in windows])
    return pairs, read


def _pairs(n: float, p: float, W) -> float:
    """calc.cost.opcost.attention_pairs for one group, in scalars."""
    if W is None:
        return n * p + n * (n + 1) / 2
    m = min(max(W - p, 0.0), n)
    return m * p + m * (m + 1) / 2 + (n - m) * W


@dataclass(frozen=True)
class StepFeatures:
    """The numbers a step's time depends on, by name. Each field is an array over steps (shape
    () for one step); the per-window fields have the windows (attention_windows order) first.
    ``decode_*``: the groups the decode attention kernel runs (decode tokens, verifications);
    ``chunk_*``: the prompt chunks the prefill kernel runs (calc.cost.opcost.Pass.part)."""

    tokens: np.ndarray  # new positions in the step
    logit_rows: np.ndarray  # positions that reach lm_head
    decode_seqs: np.ndarray
    decode_tokens: np.ndarray
    chunk_seqs: np.ndarray
    chunk_tokens: np.ndarray
    decode_pairs: np.ndarray  # [windows, ...] (query, key) pairs
    decode_read: np.ndarray  # [windows, ...] cached positions read
    chunk_pairs: np.ndarray
    chunk_read: np.ndarray
    chunk_pair_rows: np.ndarray  # [windows, ...] sum over chunks of pairs / chunk length

    @classmethod
    def of(cls, windows: tuple, new, past, weight=None, logits=1, decode_rows: int = 1) -> StepFeatures:
        """Features of steps whose groups (last axis) add ``new`` positions after ``past`` cached
        ones, ``weight`` each (fractional in the closed form; 0 pads), ``logits`` of each reaching
        lm_head; a group of at most ``decode_rows`` new positions runs the decode kernel."""
        new = np.asarray(new, float)
        past = np.asarray(past, float)
        w = np.ones_like(new) if weight is None else np.asarray(weight, float)
        chunk = new > decode_rows
        wd, wc = np.where(chunk, 0.0, w), np.where(chunk, w, 0.0)
        dp, dr = _window_sums(new, past, wd, windows)
        cp, cr = _window_sums(new, past, wc, windows)
        cpr = np.stack([np.sum(wc * attention_pairs(new, past, W) / new, axis=-1) for W in windows])
        return cls(np.sum(w * new, axis=-1), np.sum(w * np.minimum(new, logits), axis=-1), np.sum(wd, axis=-1),
                   np.sum(wd * new, axis=-1), np.sum(wc, axis=-1), np.sum(wc * new, axis=-1), dp, dr, cp, cr, cpr)

    @classmethod
    def decoding(cls, windows: tuple, kv, ahead=0.0, rows: int = 1, weight=None) -> StepFeatures:
        """Steps in which the sequences at contexts ``kv`` [N] + ``ahead`` (one step per value of
        ``ahead``) each add ``rows`` positions, all reaching lm_head (1: a decode token; k + 1: a
        verification), ``weight`` each (default 1)."""
        kv = np.asarray(kv, float)
        a = np.asarray(ahead, float)
        w = np.ones_like(kv) if weight is None else np.broadcast_to(np.asarray(weight, float), kv.shape)
        N, s = float(w.sum()), float((w * kv).sum())
        r = float(rows)
        pairs, read = [], []
        for W in windows:
            if W is None:  # sum_i r (kv_i + a) + r (r + 1) / 2, and kv_i + a + r read
                pairs.append(r * (s + N * a) + N * r * (r + 1) / 2)
                read.append(s + N * (a + r))
            else:
                p = kv[:, None] + np.atleast_1d(a)[None, :]
                pairs.append((w[:, None] * attention_pairs(r, p, W)).sum(axis=0).reshape(a.shape))
                read.append((w[:, None] * positions_attended(r, p, W)).sum(axis=0).reshape(a.shape))
        shape = np.shape(a)
        full = np.full(shape, N)
        zero = np.zeros(shape)
        zw = np.zeros((len(windows),) + shape)
        return cls(full * r, full * r, full, full * r, zero, zero, np.stack(np.broadcast_arrays(*pairs)) if pairs else zw,
                   np.stack(np.broadcast_arrays(*read)) if read else zw, zw, zw, zw)

    @classmethod
    def one(cls, windows: tuple, kv, chunk=(), past=(), rows: int = 1, decode_rows: int = 1,
            logits=1) -> StepFeatures:
        """One step (the scheduler's, in scalars: a few microseconds): the sequences at contexts
        ``kv`` [N] each add ``rows`` positions, all reaching lm_head, beside prompt chunks of
        ``chunk`` tokens after ``past`` cached ones (lists); what ``decoding(...) + of(...)`` gives."""
        N = float(kv.size)
        s = float(np.add.reduce(kv)) if N else 0.0
        r = float(rows)
        dp, dr = [], []
        for W in windows:
            if W is None:
                dp.append(r * s + N * r * (r + 1) / 2)
                dr.append(s + N * r)
            else:
                dp.append(float(np.add.reduce(attention_pairs(r, kv, W))) if N else 0.0)
                dr.append(float(np.add.reduce(np.minimum(kv + r, W))) if N else 0.0)
        nw = len(windows)
        tokens, logit_rows, dseq, dtok = N * r, N * r, N, N * r
        cseq = ctok = 0.0
        cp, cr, cpr = [0.0] * nw, [0.0] * nw, [0.0] * nw
        for c, p in zip(chunk, past, strict=True):
            c, p = float(c), float(p)
            tokens += c
            logit_rows += min(c, logits)
            small = c <= decode_rows
            if small:
                dseq += 1.0
                dtok += c
            else:
                cseq += 1.0
                ctok += c
            for i, W in enumerate(windows):
                pairs, read = _pairs(c, p, W), (p + c if W is None else min(p + c, W))
                if small:
                    dp[i] += pairs
                    dr[i] += read
                else:
                    cp[i] += pairs
                    cr[i] += read
                    cpr[i] += pairs / c
        return cls(tokens, logit_rows, dseq, dtok, cseq, ctok, dp, dr, cp, cr, cpr)

    def __add__(self, other: StepFeatures) -> StepFeatures:
        """The step running both groups (weights read once)."""
        return StepFeatures(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def total(self) -> StepFeatures:
        """The sum over steps (the last axis): a run of steps' totals, for its bound."""
        return StepFeatures(*(np.sum(getattr(self, f.name), axis=-1) for f in fields(self)))


@dataclass(frozen=True)
class _TableCall:
    """A kernel call of a table-timed operator: ``count`` calls at axes affine in the feature vector
    (rows of ``A``, named ``names``) beside the constant ones; an axis marked ``per_call`` is its row
    over the count (an MoE expert's rows: the routed rows, affine, over the experts hit, affine)."""

    table: object  # calc.cost.kernels.TableSlice: the table with the constant axes folded in
    names: tuple[str, ...]
    A: np.ndarray  # [len(names), F]
    count: np.ndarray  # [F]
    per_call: tuple[bool, ...] = ()


@dataclass(frozen=True)
class _TableOp:
    """An operator timed from a profile's kernel tables: its time is layers x the calls' table
    times, never under its roofs (calc.cost.roofline._measured), which are its two affine rows."""

    index: int
    layers: float
    calls: tuple[_TableCall, ...]

    def time(self, x: np.ndarray) -> np.ndarray:
        total = 0.0
        for c in self.calls:
            ax, n = c.A @ x, c.count @ x
            if any(c.per_call):  # no call (n = 0) adds nothing, whatever its shape reads as
                per = np.maximum(n, 1e-30)
                ax = [a / per if p else a for a, p in zip(ax, c.per_call, strict=True)]
            total = total + n * c.table.time({name: ax[i] for i, name in enumerate(c.names)})
        return self.layers * total


@dataclass(frozen=True)
class _Coef:
    """One phase's coefficients, stacked so one product gives every term:
    rows [compute per op; memory per op; overheads + affine comm; the affine comm alone;
    each all-reduce's algorithms (groups x algorithms)], columns the feature vector.
    ``tables``: the operators a profile's kernel tables time (their table term beside the two rows)."""

    S: np.ndarray
    n_ops: int
    n_groups: int
    n_algos: int
    tables: tuple[_TableOp, ...] = ()

    def tops(self, comp: np.ndarray, mem: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Each operator's time: the larger of its two terms, and a table-timed one's table time."""
        top = np.maximum(comp, mem)
        for t in self.tables:
            top[t.index] = np.maximum(top[t.index], t.time(x))
        return top


@dataclass(frozen=True)
class StepModel:
    """time(step) = sum_ops max(C_op . x, M_op . x) + sum_allreduces min_algo(G_algo . x) + A . x,
    x the feature vector of a StepFeatures (``vector``; experts on the busiest GPU computed from
    the tokens, each kernel's presence from its sequences). Fitted by least squares on random
    ragged steps evaluated with calc.cost's own operators; ``max_fit_error`` is the worst
    relative error on them against the steps' real time (about 1e-12: the terms are exactly
    affine). MLA models run attention differently in prefill and decode: one set per phase."""

    model: ModelSpec
    par: Parallel
    coef: dict  # phase -> _Coef
    max_fit_error: float
    windows: tuple = ()
    cache: dict = field(default_factory=dict, compare=False, repr=False)

    def _phase(self, phase: str) -> _Coef:
        return self.coef.get(phase) or self.coef["any"]

    def features(self, new, past, weight=None, logits=1, decode_rows: int = 1) -> StepFeatures:
        return StepFeatures.of(self.windows, new, past, weight, logits, decode_rows)

    def _experts(self, tokens):
        m = self.model.moe
        if m is None:
            return 0.0
        if isinstance(tokens, float):  # one step: cached by its token count
            hit = self.cache.get(tokens)
            if hit is None:
                hit = self.cache[tokens] = float(busiest_experts(m.num_experts, m.experts_per_token, self.par.ep,
                                                                 tokens, self.par.imbalance))
            return hit
        return busiest_experts(m.num_experts, m.experts_per_token, self.par.ep, tokens, self.par.imbalance)

    def vector(self, f: StepFeatures) -> np.ndarray:
        """The feature vector [F, ...] the coefficients multiply (this model's layout, read by no one else)."""
        if isinstance(f.tokens, float):  # StepFeatures.one: scalars and lists
            return np.array([1.0, f.tokens, f.logit_rows, self._experts(f.tokens), f.decode_seqs, f.decode_tokens,
                             min(f.decode_seqs, 1.0), f.chunk_seqs, f.chunk_tokens, min(f.chunk_seqs, 1.0),
                             *f.decode_pairs, *f.decode_read, *f.chunk_pairs, *f.chunk_read, *f.chunk_pair_rows])
        m = self.model.moe
        shape = np.broadcast_shapes(np.shape(f.tokens), np.shape(f.decode_pairs)[1:], np.shape(f.chunk_pairs)[1:])
        nw = len(self.windows)
        x = np.empty((10 + 5 * nw,) + shape)
        x[0] = 1.0
        x[1] = f.tokens
        x[2] = f.logit_rows
        x[3] = self._experts(f.tokens) if m else 0.0
        x[4], x[5], x[6] = f.decode_seqs, f.decode_tokens, np.minimum(f.decode_seqs, 1.0)
        x[7], x[8], x[9] = f.chunk_seqs, f.chunk_tokens, np.minimum(f.chunk_seqs, 1.0)
        x[10:10 + nw] = f.decode_pairs
        x[10 + nw:10 + 2 * nw] = f.decode_read
        x[10 + 2 * nw:10 + 3 * nw] = f.chunk_pairs
        x[10 + 3 * nw:10 + 4 * nw] = f.chunk_read
        x[10 + 4 * nw:10 + 5 * nw] = f.chunk_pair_rows
        return x

    def _eval(self, f: StepFeatures, phase: str):
        c = self._phase(phase)
        x = self.vector(f)
        shape = x.shape[1:]
        x2 = x if x.ndim == 1 else x.reshape(x.shape[0], -1)
        y = c.S @ x2
        n = c.n_ops
        comp, mem = y[:n], y[n:2 * n]
        if c.n_groups:
            g = y[2 * n + 2:]
            groups = _sum(_min(g.reshape((c.n_groups, c.n_algos) + g.shape[1:]), axis=1), axis=0)
        else:
            groups = 0.0
        return comp, mem, c.tops(comp, mem, x2), y[2 * n], y[2 * n + 1] + groups, groups, shape

    def time(self, f: StepFeatures, phase: str = "decode") -> np.ndarray:
        """Step times (what mixed_step_cost(...).time_s gives), over the steps of ``f``."""
        _, _, top, a, _, groups, shape = self._eval(f, phase)
        return (top.sum(axis=0) + a + groups).reshape(shape)

    def step_s(self, new, past) -> float:
        """The time of one step whose sequences add ``new`` positions after ``past`` cached ones
        (what mixed_step_cost(...).time_s gives)."""
        phase = "prefill" if np.any(np.asarray(new) > 1) else "decode"
        return float(self.time(self.features(new, past), phase))

    def time_and_shares(self, f: StepFeatures, phase: str = "decode") -> tuple[np.ndarray, np.ndarray]:
        """(step times, seconds under each of BOUNDS [3, ...]: the operators' larger roof terms,
        compute or memory, and the collectives: calc.cost.roofline.bound_of labels them)."""
        if isinstance(f.tokens, float):
            t, shares = self._one(self.vector(f), phase)
            return t, np.array(shares)
        comp, mem, top, a, comm, groups, shape = self._eval(f, phase)
        total = _sum(top, axis=0)
        cs = _sum(np.where(comp >= mem, top, 0.0), axis=0)
        t = total + a + groups
        if not shape:
            return float(t), np.array([cs, total - cs, comm])
        return t.reshape(shape), np.stack([cs, total - cs, np.broadcast_to(comm, cs.shape)]).reshape((3,) + shape)

    def _one(self, x: np.ndarray, phase: str) -> tuple[float, tuple]:
        """time_and_shares of one step, in scalars (the scheduler's path: a few microseconds); the
        shares a tuple (compute, memory, communication)."""
        c = self._phase(phase)
        y = c.S.dot(x).tolist()  # ndarray.dot: the same product as @, with less dispatch per call
        n = c.n_ops
        if c.tables:  # operators timed from kernel tables: their table time where it is the larger
            for t in c.tables:
                i = t.index
                y[i + (y[n + i] > y[i]) * n] = max(y[i], y[n + i], float(t.time(x)))
        cs = ms = 0.0
        for a, b in zip(y[:n], y[n:2 * n], strict=True):
            if a >= b:
                cs += a
            else:
                ms += b
        g = 0.0
        if c.n_groups:
            base, na = 2 * n + 2, c.n_algos
            for i in range(c.n_groups):
                g += min(y[base + i * na:base + (i + 1) * na])
        return cs + ms + y[2 * n] + g, (cs, ms, y[2 * n + 1] + g)

    def terms(self, f: StepFeatures, phase: str = "decode") -> tuple:
        """(compute_s, memory_s, comm_s) summed over operators, as PhaseCost reports them."""
        comp, mem, _, _, comm, _, shape = self._eval(f, phase)
        return comp.sum(axis=0).reshape(shape), mem.sum(axis=0).reshape(shape), comm.reshape(shape)

    def bound(self, f: StepFeatures, phase: str = "decode"):
        """calc.cost.roofline.bound_of the step's time shares: where its time goes."""
        return bound_of(self.time_and_shares(f, phase)[1])
