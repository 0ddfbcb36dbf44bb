"""The request model: prefill, decode steps, TTFT, TPOT, e2e and throughput.

A request of G output tokens is one prefill at T (which samples token 1), then
G - 1 decode steps at contexts S = T, ..., T + G - 2. TTFT = prefill + sampling
(sampling is an operator of the pass); TPOT = mean decode-step time over the
G - 1 steps; e2e = TTFT + (G - 1) * TPOT. Queueing, tokenisation and network
are not model time and are not folded in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from calc.core.errors import SpecError
from calc.cost.dtypes import Dtypes
from calc.cost.memory import MemoryEstimate, request_memory
from calc.cost.opcost import Pass, accumulate
from calc.cost.operators import pass_ops
from calc.cost.parallel import SINGLE, Parallel, link
from calc.cost.roofline import PhaseCost, phase_cost
from calc.cost.setup import DEFAULT, Setup
from calc.spec.hardware import HardwareSpec
from calc.spec.model import ModelSpec

# Decode contexts at which the step is evaluated to average it over the G - 1 steps.
TPOT_NODES = 8


def _as_int_array(value, option: str, minimum: int) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise SpecError(option, None, f"must be a number, got {value!r}") from None
    if arr.size == 0:
        raise SpecError(option, None, "no value given")
    if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
        raise SpecError(option, None, f"must be whole numbers, got {value!r}")
    if np.any(arr < minimum):
        raise SpecError(option, None, f"must be >= {minimum}, got {arr.min():g}")
    return arr


def prefill_cost(model, hw, batch, prompt_len, dt, eff, attention="fused", past=0.0,
                 par: Parallel = SINGLE, logits: int = 1, shape=()) -> tuple[PhaseCost, list]:
    """A prefill of ``prompt_len`` tokens per sequence (after ``past`` cached ones), on one GPU of
    the split; ``logits`` positions per sequence reach lm_head (1: the last, as engines do).
    ``shape``: the scenarios' shape, when the inputs are axes that broadcast to it."""
    ops = pass_ops(model, Pass(batch, prompt_len, np.asarray(past, float), "prefill", logits), dt, attention, par)
    return _launched_eagerly(phase_cost(ops, hw, dt, eff, link(hw, par), shape), eff), ops


def _launched_eagerly(cost: PhaseCost, eff) -> PhaseCost:
    """A prefill pass under an engine whose CUDA graphs hold decode-only steps launches every
    kernel eagerly: the pass's kernels x eff.prefill_launch_s more. (A serving step with a
    prefill chunk pays the same in the simulator, as Serving.eager rules: mixed_step_cost and the
    step model it fits time graph replays.)"""
    if not eff.prefill_launch_s:
        return cost
    kernels = eff.kernels_launched(t.op for t in cost.ops)
    return replace(cost, step_overhead_s=cost.step_overhead_s + kernels * eff.prefill_launch_s)


def decode_cost(model, hw, batch, context, dt, eff, attention="fused", par: Parallel = SINGLE,
                shape=()) -> PhaseCost:
    """One decode step: one new token per sequence over ``context`` cached positions."""
    ops = pass_ops(model, Pass(batch, np.float64(1.0), np.asarray(context, float), "decode"), dt, attention, par)
    return phase_cost(ops, hw, dt, eff, link(hw, par), shape)


def mixed_step_cost(model, hw, new, past, dt, eff, attention="fused", par: Parallel = SINGLE,
                    phase: str = "decode", logits=1, decode_rows: int = 1) -> PhaseCost:
    """One continuous-batching iteration: sequence i adds new[i] tokens after past[i]
    cached ones (a prefill chunk, or 1 for a decode token); weights are read once for
    all of them. ``new`` and ``past`` are 1-D over the sequences in the step; ``logits``
    (per sequence, or one for all) the positions of each that reach lm_head: 1, or k + 1
    for a speculative verification of k drafted tokens; a sequence of at most ``decode_rows``
    new positions runs the decode attention kernel, a longer one the prefill kernel (Pass.part)."""
    new = np.atleast_1d(np.asarray(new, float))
    logits = np.broadcast_to(np.asarray(logits, float), new.shape) if np.ndim(logits) else logits
    ps = Pass(np.ones_like(new), new, np.atleast_1d(np.asarray(past, float)), phase, logits, True, decode_rows)
    return phase_cost(pass_ops(model, ps, dt, attention, par), hw, dt, eff, link(hw, par))


def tpot_nodes(first, steps, k: int = TPOT_NODES):
    """Integer contexts s_0 = first < ... < s_{k-1} = first + steps - 1 and weights w_j with
    sum_j w_j f(s_j) = sum over every integer context of the piecewise-linear interpolant
    of f through the nodes (exact when f is linear between nodes, or when steps <= k).
    Segment j of d_j integers contributes (d_j + 1)(f_j + f_{j+1})/2; interior nodes are
    shared by two segments, so f_j is subtracted once."""
    first = np.asarray(first, float)
    steps = np.asarray(steps, float)
    frac = np.linspace(0.0, 1.0, k).reshape((k,) + (1,) * np.ndim(steps))
    s = first + np.round(frac * np.maximum(steps - 1, 0))
    d = np.diff(s, axis=0)
    w = np.zeros(s.shape)
    w[:-1] += (d + 1) / 2
    w[1:] += (d + 1) / 2
    w[1:-1] -= 1
    return s, w


def _step_times(model, hw, B, s, dt, eff, attention, par) -> np.ndarray:
    """Decode-step times at contexts ``s`` (whole numbers) for batches ``B``, broadcast.

    On a grid, B's axes and the contexts' axes are apart and the contexts span few distinct
    values: the step is then evaluated once per (batch, context in [min, max]) and looked up,
    the same numbers at a fraction of the work. Otherwise (scenarios in a list), directly."""
    lo, hi = float(s.min()), float(s.max())
    full = int(np.prod(np.broadcast_shapes(np.shape(B), np.shape(s)), dtype=float))
    if np.size(B) * (hi - lo + 1) * 2 > full:
        return decode_cost(model, hw, B, s, dt, eff, attention, par).time_s
    contexts = np.arange(lo, hi + 1)
    table = decode_cost(model, hw, np.asarray(B)[..., None], contexts, dt, eff, attention, par).time_s
    table = np.broadcast_to(table, np.shape(B) + contexts.shape)  # B's axes, then the context
    index = (s - lo).astype(np.intp)[..., None]
    return np.take_along_axis(table[None], index, axis=-1)[..., 0]


@dataclass(frozen=True)
class Estimate:
    """Everything `roofline estimate` reports for (model, hardware, B, T, G, dtypes)."""

    model: ModelSpec
    hardware: HardwareSpec
    batch: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray
    dtypes: Dtypes
    attention: str
    ideal: bool
    parallel: Parallel
    prefill: PhaseCost
    decode: PhaseCost  # the first decode step, at context T
    decode_mean_s: np.ndarray  # mean step time over the G - 1 steps (nan when G = 1)
    memory: MemoryEstimate
    serving_overhead_s: float = 0.0  # the engine's per-request serving-stack time, NOT in TTFT/e2e

    @property
    def weight_bytes(self) -> float:
        """All weights of the model at the weight dtype (not per GPU)."""
        return self.model.weight_bytes(self.dtypes.weight, self.dtypes.group_size)

    @property
    def kv_cache_bytes(self) -> np.ndarray:
        """KV held at the end of the request by all B sequences, whole model (not per GPU)."""
        return self.model.kv_cache_bytes(self.prompt_len + self.output_len - 1, self.batch, self.dtypes.kv)

    @property
    def ttft_s(self) -> np.ndarray:
        return self.prefill.time_s

    @property
    def tpot_s(self) -> np.ndarray:
        """Mean decode-step time; nan when G = 1 (no decode step)."""
        return self.decode_mean_s

    @cached_property
    def e2e_s(self) -> np.ndarray:
        steps = self.output_len - 1
        return self.ttft_s + np.where(steps > 0, steps * np.nan_to_num(self.decode_mean_s), 0.0)

    @property
    def output_tokens_per_s(self) -> np.ndarray:
        """B * G output tokens over the request's e2e time."""
        return self.batch * self.output_len / self.e2e_s

    @property
    def total_tokens_per_s(self) -> np.ndarray:
        """B * (T + G) prompt and output tokens over e2e."""
        return self.batch * (self.prompt_len + self.output_len) / self.e2e_s

    def stage_s(self, phase: PhaseCost) -> np.ndarray:
        """Slowest pipeline stage of a pass: its share of the layers' time plus one send.
        With PP micro-batches in flight the pipeline completes a pass every stage_s."""
        pp = self.parallel.pp
        if pp == 1:
            return phase.time_s
        sends = accumulate(t.total_time_s for t in phase.ops if t.op.name == "pp.send")
        return (phase.time_s - sends) * math.ceil(self.model.num_layers / pp) / self.model.num_layers + sends / (pp - 1)

    @property
    def pipelined_output_tokens_per_s(self) -> np.ndarray:
        """Decode throughput with PP micro-batches of B sequences in flight: PP * B / stage time."""
        mean_step = np.where(np.isnan(self.decode_mean_s), self.decode.time_s, self.decode_mean_s)
        stage = self.stage_s(self.decode) * mean_step / self.decode.time_s
        return self.parallel.pp * self.batch / stage


def estimate(model: ModelSpec, hw: HardwareSpec, batch=1, prompt_len=512, output_len=128,
             setup: Setup = DEFAULT) -> Estimate:
    """Estimate one request shape, or many: batch, prompt_len and output_len broadcast.
    Times and memory are per GPU of the setup's TP x PP split (calc.cost.parallel), under the
    profile's engine preset (``hw.with_engine(name)`` picks another); the attention kernel
    defaults to the preset's (fused unless the preset says otherwise).

    Axes that broadcast (a grid: B of shape (b, 1, 1), T (1, t, 1), G (1, 1, g)) are not
    expanded first: each term is computed at the shape of the inputs it depends on (prefill
    over B x T, the non-attention part of a decode step over B), and the results are views
    of the full shape. Equal-shaped inputs give the same numbers either way."""
    B = _as_int_array(batch, "--batch", 1)
    T = _as_int_array(prompt_len, "--prompt-len", 1)
    G = _as_int_array(output_len, "--output-len", 1)
    shape = np.broadcast_shapes(B.shape, T.shape, G.shape)
    B, T, G = (a.reshape((1,) * (len(shape) - a.ndim) + a.shape) for a in (B, T, G))  # same ndim, unexpanded
    held = T + G - 1
    if np.any(held > model.max_context):
        worst = held.max()
        raise SpecError("prompt_len/output_len", None,
                        f"prompt + output - 1 = {worst:g} positions exceeds {model.name}'s max context "
                        f"{model.max_context}")
    run = setup.resolve(model, hw)
    dt, attention, logits, par, eff = run.dtypes, run.attention, run.logits, run.parallel, run.efficiency
    prefill, prefill_ops = prefill_cost(model, hw, B, T, dt, eff, attention, par=par, logits=logits, shape=shape)
    first = decode_cost(model, hw, B, T, dt, eff, attention, par, shape=shape)
    steps = G - 1
    s, w = tpot_nodes(T, steps)
    node_times = _step_times(model, hw, B, s, dt, eff, attention, par)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(steps > 0, (w * node_times).sum(axis=0) / np.maximum(steps, 1), np.nan)
    memory = request_memory(model, hw, B, T, G, dt, prefill_ops, par)
    memory = replace(memory, kv_cache_bytes=np.broadcast_to(memory.kv_cache_bytes, shape),
                     activation_bytes=np.broadcast_to(memory.activation_bytes, shape))
    B, T, G = np.broadcast_arrays(B, T, G)
    return Estimate(model, hw, B, T, G, dt, attention, setup.ideal, par, prefill, first,
                    np.broadcast_to(mean, shape), memory, eff.request_overhead_s)
