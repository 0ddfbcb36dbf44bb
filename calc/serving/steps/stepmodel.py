"""An exact, fast step-time model of one replica configuration.

A step (one iteration) is one forward pass over a ragged batch: sequence i adds new[i]
positions after past[i] cached ones, weights read once. Its time is
calc.cost.latency.mixed_step_cost. ``StepModel`` reproduces that time from the step's
``StepFeatures`` (named numbers: tokens, logit rows, and for the decode-kernel groups and the
prefill-kernel chunks apart their sequences, tokens and, per attention window, the (query, key)
pairs and positions read): every operator's compute and memory terms are affine in them, and
each all-reduce costs the cheapest of its algorithms, each affine in the message (so in the
tokens). The model is fitted once per configuration (a few milliseconds) and then costs
microseconds instead of a quarter of a millisecond; ``check_step_model`` and the property test
compare it with mixed_step_cost itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from calc.cost.dtypes import Dtypes
from calc.cost.efficiency import Efficiency
from calc.cost.experts import busiest_experts
from calc.cost.latency import mixed_step_cost
from calc.cost.opcost import Pass, attention_pairs, positions_attended
from calc.cost.operators import pass_ops
from calc.cost.parallel import SINGLE, Parallel, allreduce_times, link
from calc.cost.roofline import bound_of, phase_cost
from calc.spec.hardware import HardwareSpec
from calc.spec.model import ModelSpec

_sum, _min = np.add.reduce, np.minimum.reduce
EXACT = 1e-6  # the worst relative error a fitted model may have on its own sample steps


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
class _Coef:
    """One phase's coefficients, stacked so one product gives every term:
    rows [compute per op; memory per op; overheads + affine comm; the affine comm alone;
    each all-reduce's algorithms (groups x algorithms)], columns the feature vector."""

    S: np.ndarray
    n_ops: int
    n_groups: int
    n_algos: int


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
        y = c.S @ (x if x.ndim == 1 else x.reshape(x.shape[0], -1))
        n = c.n_ops
        comp, mem = y[:n], y[n:2 * n]
        if c.n_groups:
            g = y[2 * n + 2:]
            groups = _sum(_min(g.reshape((c.n_groups, c.n_algos) + g.shape[1:]), axis=1), axis=0)
        else:
            groups = 0.0
        return comp, mem, y[2 * n], y[2 * n + 1] + groups, groups, shape

    def time(self, f: StepFeatures, phase: str = "decode") -> np.ndarray:
        """Step times (what mixed_step_cost(...).time_s gives), over the steps of ``f``."""
        comp, mem, a, _, groups, shape = self._eval(f, phase)
        return (np.maximum(comp, mem).sum(axis=0) + a + groups).reshape(shape)

    def step_s(self, new, past) -> float:
        """The time of one step whose sequences add ``new`` positions after ``past`` cached ones
        (what mixed_step_cost(...).time_s gives)."""
        phase = "prefill" if np.any(np.asarray(new) > 1) else "decode"
        return float(self.time(self.features(new, past), phase))

    def time_and_shares(self, f: StepFeatures, phase: str = "decode") -> tuple[np.ndarray, np.ndarray]:
        """(step times, seconds under each of BOUNDS [3, ...]: the operators' larger roof terms,
        compute or memory, and the collectives: calc.cost.roofline.bound_of labels them)."""
        if isinstance(f.tokens, float):
            return self._one(self.vector(f), phase)
        comp, mem, a, comm, groups, shape = self._eval(f, phase)
        top = np.maximum(comp, mem)
        total = _sum(top, axis=0)
        cs = _sum(np.where(comp >= mem, comp, 0.0), axis=0)
        t = total + a + groups
        if not shape:
            return float(t), np.array([cs, total - cs, comm])
        return t.reshape(shape), np.stack([cs, total - cs, np.broadcast_to(comm, cs.shape)]).reshape((3,) + shape)

    def _one(self, x: np.ndarray, phase: str) -> tuple[float, tuple]:
        """time_and_shares of one step, in scalars (the scheduler's path: a few microseconds)."""
        c = self._phase(phase)
        y = (c.S @ x).tolist()
        n = c.n_ops
        cs = ms = 0.0
        for a, b in zip(y[:n], y[n:2 * n], strict=True):
            if a >= b:
                cs += a
            else:
                ms += b
        g, base, na = 0.0, 2 * n + 2, c.n_algos
        for i in range(c.n_groups):
            g += min(y[base + i * na:base + (i + 1) * na])
        return cs + ms + y[2 * n] + g, np.array((cs, ms, y[2 * n + 1] + g))

    def terms(self, f: StepFeatures, phase: str = "decode") -> tuple:
        """(compute_s, memory_s, comm_s) summed over operators, as PhaseCost reports them."""
        comp, mem, _, comm, _, shape = self._eval(f, phase)
        return comp.sum(axis=0).reshape(shape), mem.sum(axis=0).reshape(shape), comm.reshape(shape)

    def bound(self, f: StepFeatures, phase: str = "decode"):
        """calc.cost.roofline.bound_of the step's time shares: where its time goes."""
        return bound_of(self.time_and_shares(f, phase)[1])


def _sample(rng, K: int, S: int, windows_max: int = 4096):
    """K random ragged steps of up to S groups: decode tokens, verifications (2..8 positions,
    every one reaching lm_head) and prompt chunks (9..4096), some steps all of one kind."""
    nseq = rng.integers(1, S + 1, K)
    w = (np.arange(S)[None, :] < nseq[:, None]).astype(float)
    kind = rng.integers(0, 3, (K, S))  # 0 decode, 1 verification, 2 chunk
    mix = rng.integers(0, 4, K)  # 0: decode kernel only, 1: chunks only, else mixed
    kind = np.where(mix[:, None] == 0, np.minimum(kind, 1), np.where(mix[:, None] == 1, 2, kind))
    new = np.where(kind == 0, 1.0, np.where(kind == 1, rng.integers(2, 9, (K, S)),
                                            rng.integers(9, windows_max + 1, (K, S)))).astype(float)
    logits = np.where(kind == 2, np.where(rng.random((K, S)) < 0.2, new, 1.0), new)
    past = np.where(rng.random((K, S)) < 0.2, 0.0, rng.integers(0, 65_537, (K, S)).astype(float))
    return w, new, past, logits


def _fit_phase(model, hw, dt, eff, attention, par, phase, windows, rng) -> tuple[_Coef, float]:
    K, S, rows = 192, 24, 8
    w, new, past, logits = _sample(rng, K, S)
    ps = Pass(w, new, past, phase, logits=logits, ragged=True, decode_rows=rows)
    lk = link(hw, par)
    cost = phase_cost(pass_ops(model, ps, dt, attention, par), hw, dt, eff, lk)
    probe = StepModel(model, par, {}, 0.0, windows)
    X = probe.vector(StepFeatures.of(windows, new, past, w, logits, rows)).T  # [K, F]
    ones = np.ones(K)
    cols, extra, comm, groups = [], ones * cost.step_overhead_s, ones * 0.0, []
    fitted_ar = lk.collectives is not None and eff.fitted_collectives
    for t in cost.ops:
        L = t.op.layers
        op = t.op
        if op.kind == "comm":
            if fitted_ar and op.collective == "allreduce" and t.measured_s is None:
                algos = allreduce_times(op.message_bytes, op.group, lk, eff.custom_allreduce)
                groups.append([ones * a * L for a in algos.values()])
            else:
                comm = comm + ones * t.comm_s * L
                extra = extra + ones * t.comm_s * L
            continue
        # a time from a kernel table stands for both terms (its roofs clamp it already)
        c, m = (t.compute_s, t.memory_s) if t.measured_s is None else (t.measured_s, t.measured_s)
        cols += [ones * c * L, ones * m * L]
        extra = extra + ones * t.overhead_s * L
    n_ops = len(cols) // 2
    n_algos = max([len(g) for g in groups] or [1])
    G = [g + [g[0]] * (n_algos - len(g)) for g in groups]  # pad with a repeat (the min is unchanged)
    Y = np.column_stack([*cols[0::2], *cols[1::2], extra, comm, *[a for g in G for a in g]])
    scale = np.abs(X).max(axis=0)
    scale[scale == 0] = 1.0
    sol = np.linalg.pinv(X / scale) @ Y  # least squares (pinv: one SVD for every target column)
    coef = _Coef((sol / scale[:, None]).T, n_ops, len(G), n_algos)
    sm = StepModel(model, par, {"any": coef}, 0.0, windows)
    got = sm.time(StepFeatures.of(windows, new, past, w, logits, rows))
    err = float(np.max(np.abs(got - cost.time_s) / cost.time_s))
    return coef, err


def step_model(model: ModelSpec, hw: HardwareSpec, dt: Dtypes, eff: Efficiency, attention: str = "fused",
               par: Parallel = SINGLE) -> StepModel:
    """Fit the step-time model of one configuration (a few milliseconds)."""
    rng = np.random.default_rng(12345)
    windows = attention_windows(model)
    phases = ("prefill", "decode") if model.attention.kind == "mla" else ("any",)
    coef, worst = {}, 0.0
    for ph in phases:
        coef[ph], err = _fit_phase(model, hw, dt, eff, attention, par, "decode" if ph == "any" else ph, windows, rng)
        worst = max(worst, err)
    if worst > EXACT:
        raise RuntimeError(f"step model does not reproduce mixed_step_cost (error {worst:.2g}): "
                           "an operator is no longer affine in the step features")
    return StepModel(model, par, coef, worst, windows)


def check_step_model(sm: StepModel, hw, dt, eff, attention, par, steps: int = 200, seed: int = 0,
                     decode_rows: int = 1) -> float:
    """Worst relative error of the step model against mixed_step_cost itself on random steps
    (decode tokens, verifications of ``decode_rows`` positions, prompt chunks)."""
    rng = np.random.default_rng(seed)
    worst = 0.0
    for _ in range(steps):
        n = int(rng.integers(1, 64))
        kind = rng.random(n)
        new = np.where(kind < 0.6, 1.0, np.where(kind < 0.8, float(decode_rows), rng.integers(2, 8193, n)))
        logits = np.where(new <= decode_rows, new, 1.0)
        past = rng.integers(0, 100_000, n).astype(float)
        phase = "prefill" if np.any(new > decode_rows) else "decode"
        ref = float(mixed_step_cost(sm.model, hw, new, past, dt, eff, attention, par, phase, logits,
                                    decode_rows).time_s)
        got = float(sm.time(sm.features(new, past, logits=logits, decode_rows=decode_rows), phase))
        worst = max(worst, abs(got - ref) / ref)
    return worst
