"""A fast step-time model of one replica configuration.

A step (one iteration) is one forward pass over a ragged batch: sequence i adds
new[i] tokens after past[i] cached ones, weights read once. Its time is
calc.cost.latency.mixed_step_cost. ``StepModel`` reproduces that time from a few
named numbers of the step (tokens, sequences, experts touched for MoE, and per attention
window the (query, key) pairs and the positions read): every operator's compute and
memory terms are affine in them, so the model is fitted once per configuration and then
costs microseconds instead of a quarter of a millisecond.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from calc.cost.dtypes import Dtypes
from calc.cost.efficiency import Efficiency
from calc.cost.latency import mixed_step_cost
from calc.cost.opcost import Pass, attention_pairs, positions_attended
from calc.cost.operators import experts_touched, pass_ops
from calc.cost.parallel import SINGLE, Parallel, collective_time, fastest_allreduce, link
from calc.cost.roofline import phase_cost
from calc.spec.hardware import HardwareSpec
from calc.spec.model import ModelSpec

# Rows of a feature vector, by name: the four fixed ones, then (pairs, positions read) per window.
ONE, TOKENS, SEQUENCES, EXPERTS = 0, 1, 2, 3
FIXED_FEATURES = 4


def pairs_row(window_index: int) -> int:
    """Row of the (query, key) pairs of attention window ``window_index`` (attention_windows order)."""
    return FIXED_FEATURES + 2 * window_index


def read_row(window_index: int) -> int:
    """Row of the positions read by attention window ``window_index``."""
    return FIXED_FEATURES + 2 * window_index + 1


def feature_count(model: ModelSpec) -> int:
    return FIXED_FEATURES + 2 * len(attention_windows(model))


def step_features(model: ModelSpec, new, past, weight=None) -> np.ndarray:
    """The numbers a step's time depends on, over the last axis (the sequences of a step):
    [ONE, TOKENS, SEQUENCES, EXPERTS touched, (pairs, positions read) per attention window].
    ``weight`` counts each entry (fractional in the closed form; 0 pads)."""
    new = np.asarray(new, float)
    past = np.asarray(past, float)
    w = np.ones_like(new) if weight is None else np.asarray(weight, float)
    tokens = np.sum(w * new, axis=-1)
    seqs = np.sum(w * np.minimum(new, 1.0), axis=-1)
    cols = [np.ones_like(tokens), tokens, seqs]
    m = model.moe
    cols.append(experts_touched(m.num_experts, m.experts_per_token, tokens) if m else np.zeros_like(tokens))
    for window in attention_windows(model):
        cols.append(np.sum(w * attention_pairs(new, past, window), axis=-1))
        cols.append(np.sum(w * positions_attended(new, past, window), axis=-1))
    return np.stack(cols, axis=0)


def attention_windows(model: ModelSpec) -> tuple:
    """The distinct attention windows of the model's layers: None (global) and/or W."""
    n_slide = int(model.sliding_layers.sum())
    out = (None,) if model.num_layers - n_slide else ()
    return out + ((model.attention.sliding_window,) if n_slide else ())


@dataclass(frozen=True)
class StepModel:
    """time(step) = sum_ops max(C_op . x, M_op . x) + A . x, x = step_features(...).

    C and M hold each operator's compute and memory seconds (times its layer count)
    per unit of each feature; A the per-kernel overheads, the collectives and the
    step overhead. Fitted by least squares on random ragged steps evaluated with
    calc.cost.latency's own operators; ``max_fit_error`` is the worst relative error on
    those steps (about 1e-12: the terms are exactly affine). MLA models run attention
    differently in prefill and decode, so there is one set per phase. Where the profile has
    fitted collectives, each all-reduce keeps one algorithm, the fastest at the median sampled
    step (calc.cost.parallel picks per message otherwise): at TP >= 4 small decode-only steps
    then pay the ring's or two-shot's fixed time where the engine would run one-shot, a few
    us per all-reduce, rather than pricing prefill chunks' MB-sized messages one-shot.
    """

    model: ModelSpec
    coef: dict  # phase -> (C [ops, F], M [ops, F], A [F], K [F]: the comm part of A)
    max_fit_error: float
    cache: dict = field(default_factory=dict, compare=False, repr=False)

    def _phase(self, phase: str):
        return self.coef.get(phase) or self.coef["any"]

    def stacked(self, phase: str = "decode") -> np.ndarray:
        """[C; M; A; K] as one matrix: one product gives every term (the simulator's fast path)."""
        key = ("stacked", phase)
        if key not in self.cache:
            C, M, A, K = self._phase(phase)
            self.cache[key] = np.vstack([C, M, A[None, :], K[None, :]])
        return self.cache[key]

    def eval(self, x: np.ndarray, phase: str = "decode") -> tuple:
        """(time_s, compute_s, memory_s, comm_s) of the steps whose features are x [F] or [F, k]."""
        y = self.stacked(phase) @ x
        n = (y.shape[0] - 2) // 2
        yc, ym = y[:n], y[n:2 * n]
        return np.maximum(yc, ym).sum(axis=0) + y[2 * n], yc.sum(axis=0), ym.sum(axis=0), y[2 * n + 1]

    def time_of(self, x: np.ndarray, phase: str = "decode") -> np.ndarray:
        return self.eval(x, phase)[0]

    def terms_of(self, x: np.ndarray, phase: str = "decode") -> tuple:
        """(compute_s, memory_s, comm_s) summed over operators, as PhaseCost reports them."""
        return self.eval(x, phase)[1:]

    def bound_of(self, x: np.ndarray, phase: str = "decode"):
        _, c, m, k = self.eval(x, phase)
        return np.where(k > np.maximum(c, m), "communication", np.where(c >= m, "compute", "memory"))

    def time(self, new, past) -> float:
        """The time of one step (what mixed_step_cost(...).time_s gives)."""
        new = np.asarray(new, float)
        phase = "prefill" if np.any(new > 1) else "decode"
        return float(self.time_of(step_features(self.model, new, past), phase))


def _fit_phase(model, hw, dt, eff, attention, par, phase, rng, verify_k: int = 0) -> tuple:
    """``verify_k`` > 0: fit on speculative verification passes instead (every sequence adds
    k + 1 positions, all of them reaching lm_head)."""
    K, S = 64, 24
    nseq = rng.integers(1, S + 1, K)
    w = (np.arange(S)[None, :] < nseq[:, None]).astype(float)
    new = np.where(rng.random((K, S)) < 0.5, 1.0, rng.integers(2, 4097, (K, S)).astype(float))
    if verify_k:
        new = np.full((K, S), verify_k + 1.0)
    past = np.where(rng.random((K, S)) < 0.2, 0.0, rng.integers(0, 65_537, (K, S)).astype(float))
    ps = Pass(w, new, past, phase, logits=verify_k + 1, ragged=True)
    ops = pass_ops(model, ps, dt, attention, par)
    lk = link(hw, par)
    cost = phase_cost(ops, hw, dt, eff, lk)
    X = step_features(model, new, past, w).T  # [K, F]
    ones = np.ones(K)
    cols = []
    for t in cost.ops:
        L = t.op.layers
        # a time from a kernel table stands for both terms (its roofs clamp it already)
        c, m = (t.compute_s, t.memory_s) if t.measured_s is None else (t.measured_s, t.measured_s)
        cols += [ones * c * L, ones * m * L]
    # An all-reduce's algorithm depends on its message (calc.cost.parallel): the model keeps
    # one per operator, the fastest at the median sampled step, so its time stays affine.
    comm_t = [_affine_comm(t, lk, eff) for t in cost.ops]
    pairs = list(zip(cost.ops, comm_t, strict=True))
    extra = sum(ones * (t.overhead_s + c) * t.op.layers for t, c in pairs) + cost.step_overhead_s
    comm = sum(ones * c * t.op.layers for t, c in pairs)
    target = cost.time_s + sum((c - t.comm_s) * t.op.layers for t, c in pairs)
    Y = np.column_stack([*cols, extra, comm])
    scale = np.abs(X).max(axis=0)
    scale[scale == 0] = 1.0
    sol, *_ = np.linalg.lstsq(X / scale, Y, rcond=None)
    sol = (sol / scale[:, None]).T  # [targets, F]
    n_ops = len(cost.ops)
    C, M = sol[0:2 * n_ops:2], sol[1:2 * n_ops:2]
    coef = (C, M, sol[2 * n_ops], sol[2 * n_ops + 1])
    fitted = np.maximum(C @ X.T, M @ X.T).sum(axis=0) + coef[2] @ X.T
    err = float(np.max(np.abs(fitted - target) / target))
    return coef, err


def _affine_comm(t, lk, eff):
    """The collective's seconds with its all-reduce algorithm fixed (see _fit_phase)."""
    op = t.op
    if op.kind != "comm" or op.collective != "allreduce" or lk.collectives is None or not eff.fitted_collectives:
        return t.comm_s
    algo = fastest_allreduce(np.median(op.message_bytes), op.group, lk, eff.custom_allreduce)
    return collective_time(op.collective, op.message_bytes, op.group, op.comm_bytes, op.comm_hops, lk,
                           eff.custom_allreduce, algo)


def step_model(model: ModelSpec, hw: HardwareSpec, dt: Dtypes, eff: Efficiency, attention: str = "fused",
               par: Parallel = SINGLE) -> StepModel:
    """Fit the step-time model of one configuration (a few milliseconds)."""
    rng = np.random.default_rng(12345)
    phases = ("prefill", "decode") if model.attention.kind == "mla" else ("any",)
    coef, worst = {}, 0.0
    for ph in phases:
        coef[ph], err = _fit_phase(model, hw, dt, eff, attention, par, "decode" if ph == "any" else ph, rng)
        worst = max(worst, err)
    if worst > 1e-6:
        raise RuntimeError(f"step model does not reproduce mixed_step_cost (error {worst:.2g}): "
                           "an operator is no longer affine in the step features")
    return StepModel(model, coef, worst)


def verify_model(model: ModelSpec, hw: HardwareSpec, dt: Dtypes, eff: Efficiency, k: int,
                 attention: str = "fused", par: Parallel = SINGLE) -> StepModel:
    """The step-time model of speculative verification passes (k + 1 positions per sequence after
    its cached ones, logits for all of them, run as decode): exact on such steps, whose features
    are step_features(model, k + 1, past)."""
    coef, err = _fit_phase(model, hw, dt, eff, attention, par, "decode", np.random.default_rng(12345), verify_k=k)
    if err > 1e-6:
        raise RuntimeError(f"verification step model does not reproduce its passes (error {err:.2g})")
    return StepModel(model, {"any": coef}, err)


def check_step_model(sm: StepModel, hw, dt, eff, attention, par, steps: int = 200, seed: int = 0) -> float:
    """Worst relative error of the step model against mixed_step_cost on random steps."""
    rng = np.random.default_rng(seed)
    worst = 0.0
    for _ in range(steps):
        n = int(rng.integers(1, 64))
        new = np.where(rng.random(n) < 0.7, 1.0, rng.integers(2, 8193, n).astype(float))
        past = rng.integers(0, 100_000, n).astype(float)
        phase = "prefill" if np.any(new > 1) else "decode"
        ref = float(mixed_step_cost(sm.model, hw, new, past, dt, eff, attention, par, phase=phase).time_s)
        worst = max(worst, abs(sm.time(new, past) - ref) / ref)
    return worst
