"""The serving model of a replica: KV-cache pages, a fast step-time model, closed-form steady state.

One replica is TP GPUs running one copy of the model under continuous batching
(vLLM's scheduler, in its main knobs):

    KV budget per GPU = capacity * gpu_memory_utilization - weights - activation workspace
    pages             = floor(KV budget / (block_size * KV bytes per token per GPU))

The workspace is the activation peak of one step at the token budget (a prefill
chunk of max_batched_tokens, calc.cost.memory.activation_peak_bytes). Pages hold every
position of every layer (sliding-window layers are not reclaimed).

A step (one iteration) is one forward pass over a ragged batch: sequence i adds
new[i] tokens after past[i] cached ones, weights read once. Its time is
calc.cost.latency.mixed_step_cost. ``StepModel`` reproduces that time from seven
numbers of the step (tokens, sequences, and per attention window the (query, key)
pairs and the positions read, plus the experts touched for MoE): every operator's
compute and memory terms are affine in them, so the model is fitted once per
configuration and then costs microseconds instead of a quarter of a millisecond.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from calc.core.errors import SpecError
from calc.core.units import DTYPE_BYTES
from calc.cost.dtypes import Dtypes
from calc.cost.efficiency import Efficiency
from calc.cost.latency import mixed_step_cost
from calc.cost.memory import activation_peak_bytes, kv_share_per_gpu
from calc.cost.opcost import Pass, attention_pairs, positions_attended
from calc.cost.operators import experts_touched, pass_ops
from calc.cost.parallel import SINGLE, Parallel, check, link, sharded_weight_bytes
from calc.cost.roofline import phase_cost
from calc.spec.hardware import HardwareSpec
from calc.spec.model import ModelSpec
from calc.spec.workload import Serving

# --------------------------------------------------------------------------- KV pages


@dataclass(frozen=True)
class KVBudget:
    """Memory of one GPU of a replica, in bytes, and the KV pages it leaves."""

    capacity_bytes: float
    utilization: float
    weights_bytes: float
    workspace_bytes: float
    kv_bytes_per_token: float  # per GPU (its share of layers and heads)
    block_size: int

    @property
    def usable_bytes(self) -> float:
        return self.capacity_bytes * self.utilization

    @property
    def kv_bytes(self) -> float:
        """usable - weights - workspace (negative: the model does not fit)."""
        return self.usable_bytes - self.weights_bytes - self.workspace_bytes

    @property
    def page_bytes(self) -> float:
        return self.block_size * self.kv_bytes_per_token

    @property
    def pages(self) -> int:
        return max(int(math.floor(self.kv_bytes / self.page_bytes)), 0)

    @property
    def fits(self) -> bool:
        return self.pages > 0

    def pages_for(self, positions) -> np.ndarray:
        """Pages a sequence of ``positions`` cached tokens holds: ceil(positions / block)."""
        return np.ceil(np.asarray(positions, float) / self.block_size)

    def max_sequences(self, positions: int) -> int:
        """Sequences that fit at once when each holds ``positions`` tokens: floor(pages / ceil(positions / block))."""
        return int(self.pages // self.pages_for(positions))


def kv_budget(model: ModelSpec, hw: HardwareSpec, dt: Dtypes, par: Parallel, serving: Serving,
              attention: str = "fused") -> KVBudget:
    weights = sharded_weight_bytes(model, dt.weight_bytes_per_param(), DTYPE_BYTES[dt.unquantized(model)], par)
    n = float(serving.max_batched_tokens)
    ops = pass_ops(model, Pass(np.float64(1.0), np.float64(n), np.float64(0.0), "prefill"), dt, attention, par)
    workspace = float(activation_peak_bytes(model, 1.0, n, ops, dt))
    per_token = model.kv_bytes_per_token(dt.kv) * kv_share_per_gpu(model, par)
    return KVBudget(hw.memory_bytes, serving.gpu_memory_utilization, weights, workspace, per_token,
                    serving.block_size)


# --------------------------------------------------------------------------- step time


def step_features(model: ModelSpec, new, past, weight=None) -> np.ndarray:
    """The numbers a step's time depends on, over the last axis (the sequences of a step):
    [1, tokens, sequences, experts touched, (pairs, positions read) per attention window].
    ``weight`` counts each entry (fractional in the closed form; 0 pads)."""
    new = np.asarray(new, float)
    past = np.asarray(past, float)
    w = np.ones_like(new) if weight is None else np.asarray(weight, float)
    tokens = np.sum(w * new, axis=-1)
    seqs = np.sum(w * np.minimum(new, 1.0), axis=-1)
    cols = [np.ones_like(tokens), tokens, seqs]
    m = model.moe
    cols.append(experts_touched(m.num_experts, m.experts_per_token, tokens) if m else np.zeros_like(tokens))
    for window in _windows(model):
        cols.append(np.sum(w * attention_pairs(new, past, window), axis=-1))
        cols.append(np.sum(w * positions_attended(new, past, window), axis=-1))
    return np.stack(cols, axis=0)


def _windows(model: ModelSpec) -> tuple:
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
    differently in prefill and decode, so there is one set per phase.
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


def _fit_phase(model, hw, dt, eff, attention, par, phase, rng) -> tuple:
    K, S = 64, 24
    nseq = rng.integers(1, S + 1, K)
    w = (np.arange(S)[None, :] < nseq[:, None]).astype(float)
    new = np.where(rng.random((K, S)) < 0.5, 1.0, rng.integers(2, 4097, (K, S)).astype(float))
    past = np.where(rng.random((K, S)) < 0.2, 0.0, rng.integers(0, 65_537, (K, S)).astype(float))
    ops = pass_ops(model, Pass(w, new, past, phase, ragged=True), dt, attention, par)
    cost = phase_cost(ops, hw, dt, eff, link(hw, par))
    X = step_features(model, new, past, w).T  # [K, F]
    ones = np.ones(K)
    cols = []
    for t in cost.ops:
        L = t.op.layers
        cols += [ones * t.compute_s * L, ones * t.memory_s * L]
    extra = sum(ones * (t.overhead_s + t.comm_s) * t.op.layers for t in cost.ops) + cost.step_overhead_s
    comm = sum(ones * t.comm_s * t.op.layers for t in cost.ops)
    Y = np.column_stack([*cols, extra, comm])
    scale = np.abs(X).max(axis=0)
    scale[scale == 0] = 1.0
    sol, *_ = np.linalg.lstsq(X / scale, Y, rcond=None)
    sol = (sol / scale[:, None]).T  # [targets, F]
    n_ops = len(cost.ops)
    C, M = sol[0:2 * n_ops:2], sol[1:2 * n_ops:2]
    coef = (C, M, sol[2 * n_ops], sol[2 * n_ops + 1])
    fitted = np.maximum(C @ X.T, M @ X.T).sum(axis=0) + coef[2] @ X.T
    err = float(np.max(np.abs(fitted - cost.time_s) / cost.time_s))
    return coef, err


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


# --------------------------------------------------------------------------- a replica


@dataclass(frozen=True)
class Replica:
    """One copy of the model on ``tp`` GPUs of one kind, with the engine's knobs."""

    model: ModelSpec
    hw: HardwareSpec
    tp: int
    max_batch: int
    dt: Dtypes
    serving: Serving
    attention: str = "fused"

    @property
    def par(self) -> Parallel:
        return Parallel(tp=self.tp)

    @cached_property
    def eff(self) -> Efficiency:
        return Efficiency.of(self.hw)

    @cached_property
    def kv(self) -> KVBudget:
        return kv_budget(self.model, self.hw, self.dt, self.par, self.serving, self.attention)

    @cached_property
    def steps(self) -> StepModel:
        return step_model(self.model, self.hw, self.dt, self.eff, self.attention, self.par)

    @property
    def label(self) -> str:
        return f"{self.hw.name} TP{self.tp} mb{self.max_batch}"

    def with_max_batch(self, max_batch: int) -> Replica:
        """The same replica with another max batch, sharing the KV budget and step model
        (neither depends on it)."""
        other = replace(self, max_batch=max_batch)
        for key in ("eff", "kv", "steps"):
            if key in self.__dict__:
                other.__dict__[key] = self.__dict__[key]  # functools.cached_property's slot
        return other


def validate_split(model: ModelSpec, hw: HardwareSpec, tp: int) -> str | None:
    """None if ``tp`` GPUs of ``hw`` can split the model, else why not."""
    try:
        par = check(model, Parallel(tp=tp))
        link(hw, par)
    except SpecError as exc:
        return exc.problem
    return None


# --------------------------------------------------------------------------- closed form


def _page_sum(m, bs):
    """S(m) = sum_{x=1..m} ceil(x / bs) = bs q(q+1)/2 + r(q+1), q = m // bs, r = m % bs."""
    q, r = np.divmod(np.asarray(m, np.int64), bs)
    return bs * q * (q + 1) / 2 + r * (q + 1)


@dataclass(frozen=True)
class SteadyState:
    """Closed-form steady state of one replica at saturation (a queue always waiting),
    and at an offered load when one is given.

    Each request lives k_p + D steps in the running batch: k_p prefill steps (chunks of
    up to the token budget) and D = G - 1 decode steps. With N running, r = N / (k_p + D)
    requests finish per step; a share f = r k_p of steps carries a prefill chunk, the
    rest are pure decode steps of N sequences. (When f would exceed 1 every step carries
    prefill, and the token budget caps r at budget / (T + D).) N = min(max batch,
    KV pages / mean pages a running request holds). Means are over the sampled requests.
    """

    pages: int
    kv_sequences_longest: int  # sequences that fit at once, each at the longest request's final context
    kv_concurrency_full: float  # pages / mean pages at the final context (reserve-for-max)
    kv_concurrency: float  # pages / time-weighted mean pages held while running
    batch: float  # N
    limited_by: str  # "KV cache" or "max batch"
    requests_per_step: float
    prefill_share: float  # f
    decode_step_s: float
    mixed_step_s: float
    step_s: float  # mean step time
    requests_per_s: float
    output_tokens_per_s: float
    decode_bound: str
    mixed_bound: str

    @property
    def tpot_s(self) -> float:
        """Mean time between a decoding request's tokens: the mean step time."""
        return self.step_s


@dataclass(frozen=True)
class _Means:
    T: float
    D: float
    G: float
    kp: float
    chunk_pairs: float  # mean over requests of prefill (query, key) pairs
    chunk_read: float  # mean over requests of positions read over its chunks
    decode_ctx: float  # time-weighted mean decode position (pairs per decode token)
    pages_life: float  # mean over requests of sum over its steps of pages held


def _means(rep: Replica, T, G, chunk: float) -> _Means:
    T = np.asarray(T, np.int64)
    G = np.asarray(G, np.int64)
    D = G - 1
    bs = rep.kv.block_size
    kp = np.ceil(T / chunk)
    pairs = T * (T + 1) / 2.0
    # positions read over the chunks: sum_i (i c + c_i) for chunk i, ~ T (kp + 1) / 2
    read = T * (kp + 1) / 2.0
    dctx = (D * T + D * (D + 1) / 2.0).sum() / max(D.sum(), 1)
    held = kp * np.ceil(T / bs) + _page_sum(T + D, bs) - _page_sum(T, bs)
    return _Means(T.mean(), D.mean(), G.mean(), kp.mean(), pairs.mean(), read.mean(), dctx, held.mean())


def _mixed_features(model: ModelSpec, n_dec: float, n_pf: float, mm: _Means) -> np.ndarray:
    """Features of a step with n_dec decode tokens at the mean decode context and n_pf
    mean prefill chunks (T / k_p tokens; pairs and positions read at their exact means)."""
    x = step_features(model, [1.0], [mm.decode_ctx - 1], [n_dec])
    tokens = n_dec + n_pf * mm.T / mm.kp
    x[1], x[2] = tokens, n_dec + n_pf
    m = model.moe
    x[3] = experts_touched(m.num_experts, m.experts_per_token, tokens) if m else 0.0
    chunk, past = mm.T / mm.kp, mm.T * (mm.kp - 1) / (2 * mm.kp)
    for j, window in enumerate(_windows(model)):
        pairs = mm.chunk_pairs / mm.kp if window is None else attention_pairs(chunk, past, window)
        read = mm.chunk_read / mm.kp if window is None else positions_attended(chunk, past, window)
        x[4 + 2 * j] += n_pf * pairs
        x[5 + 2 * j] += n_pf * read
    return x


def steady_state(rep: Replica, T, G, batch_cap: float | None = None) -> SteadyState:
    """Closed form at saturation; ``batch_cap`` lowers N (a closed loop of fewer clients)."""
    kv = rep.kv
    budget = rep.serving.max_batched_tokens
    N = float(rep.max_batch)
    final_pages = kv.pages_for(np.asarray(T) + np.asarray(G) - 1).mean()
    for _ in range(3):  # the chunk depends on N, N on the pages a request holds
        chunk = max(budget - (N - 1), 1.0)
        mm = _means(rep, T, G, chunk)
        kv_n = kv.pages / (mm.pages_life / (mm.kp + mm.D))
        N = min(float(rep.max_batch), kv_n, batch_cap or math.inf)
    limited = "max batch" if N >= rep.max_batch else ("KV cache" if N >= kv_n - 1e-9 else "clients")
    sm, model = rep.steps, rep.model
    life = mm.kp + mm.D
    r = N / life
    f = r * mm.kp
    if f > 1:
        r = min(r, budget / (mm.T + mm.D))
        f = 1.0
    nd = r * mm.D
    dec = step_features(model, [1.0], [mm.decode_ctx - 1], [max(N, 1.0)])
    t_d = float(sm.time_of(dec, "decode"))
    # a step with a prefill chunk: nd (or N - 1) decodes plus the chunk(s) of r k_p (or 1) requests
    n_pf = r * mm.kp if f >= 1 else 1.0
    d_in_mixed = nd if f >= 1 else max(N - 1, 0.0)
    mix = _mixed_features(model, d_in_mixed, n_pf, mm)
    t_m = float(sm.time_of(mix, "prefill"))
    step = f * t_m + (1 - f) * t_d
    return SteadyState(
        pages=kv.pages, kv_sequences_longest=kv.max_sequences(int(np.max(np.asarray(T) + np.asarray(G) - 1))),
        kv_concurrency_full=kv.pages / final_pages, kv_concurrency=kv_n, batch=N,
        limited_by=limited, requests_per_step=r, prefill_share=f, decode_step_s=t_d, mixed_step_s=t_m,
        step_s=step, requests_per_s=r / step, output_tokens_per_s=r * mm.G / step,
        decode_bound=str(sm.bound_of(dec, "decode")), mixed_bound=str(sm.bound_of(mix, "prefill")),
    )


def at_load(rep: Replica, T, G, rate_per_s: float) -> tuple[SteadyState, float]:
    """(steady state at an offered rate, utilisation = rate / saturation throughput).
    Below saturation N solves rate = throughput(N) (Little's law over the running batch);
    at or above it the state is the saturated one."""
    sat = steady_state(rep, T, G)
    util = rate_per_s / sat.requests_per_s
    if util >= 1:
        return sat, util
    lo, hi = 0.0, sat.batch
    for _ in range(40):
        mid = (lo + hi) / 2
        if steady_state(rep, T, G, batch_cap=max(mid, 1e-6)).requests_per_s < rate_per_s:
            lo = mid
        else:
            hi = mid
    return steady_state(rep, T, G, batch_cap=max(hi, 1e-6)), util
