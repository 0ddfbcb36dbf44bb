"""Fitting a StepModel (calc.serving.steps.stepmodel) to one replica configuration, and checking it.

The fit evaluates random ragged sample steps with calc.cost's own operators and solves for the
coefficients by least squares. The sample steps, their operators, feature matrix and its
pseudo-inverse depend on the model, dtypes, attention kernel and split alone, not on the hardware
or the engine preset's values: they are kept per configuration, so that refitting the same
configuration under other values (a preset fit trying values) computes only the operators' times.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from calc.core.errors import SpecError
from calc.cost.dtypes import Dtypes
from calc.cost.efficiency import Efficiency
from calc.cost.kernels import call_table, op_calls, table_slice
from calc.cost.latency import mixed_step_cost
from calc.cost.opcost import Pass
from calc.cost.operators import pass_ops
from calc.cost.parallel import SINGLE, Parallel, allreduce_times, link
from calc.cost.roofline import phase_cost
from calc.serving.steps.stepmodel import (
    StepFeatures,
    StepModel,
    _Coef,
    _TableCall,
    _TableOp,
    attention_windows,
)
from calc.spec.hardware import HardwareSpec
from calc.spec.model import ModelSpec

EXACT = 1e-6  # the worst relative error a fitted model may have on its own sample steps


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


@dataclass(frozen=True)
class _Sample:
    """One phase's sample steps and what of their fit depends on neither the hardware nor the
    engine preset: the operators (calc.cost.operators.pass_ops reads the model, dtypes, attention
    kernel and split alone), the feature matrix and its pseudo-inverse."""

    K: int
    features: StepFeatures
    ops: list
    scale: np.ndarray  # the feature columns' scales
    pinv: np.ndarray  # pinv(X / scale), X [K, F] the sample's feature vectors
    X: np.ndarray  # the feature vectors themselves (the exactness check of a kernel call's affine axes)


def _prepare(model, dt, attention, par, phase, windows, rng) -> _Sample:
    K, S, rows = 192, 24, 8
    w, new, past, logits = _sample(rng, K, S)
    ps = Pass(w, new, past, phase, logits=logits, ragged=True, decode_rows=rows)
    f = StepFeatures.of(windows, new, past, w, logits, rows)
    X = StepModel(model, par, {}, 0.0, windows).vector(f).T  # [K, F]
    scale = np.abs(X).max(axis=0)
    scale[scale == 0] = 1.0
    return _Sample(K, f, pass_ops(model, ps, dt, attention, par), scale, np.linalg.pinv(X / scale), X)


_PREPARED: dict = {}  # (id(model), dt, attention, par) -> (model, samples per phase); oldest dropped first
_PREPARED_MAX = 64


def _prepared(model, dt, attention, par, phases, windows) -> tuple[_Sample, ...]:
    """The phases' samples for a configuration, drawn as step_model always draws them (one
    generator seeded 12345, phases in order); kept for the configuration's next fit (a fit
    of the same model under other hardware or engine values reuses them)."""
    key = (id(model), dt, attention, par)
    hit = _PREPARED.get(key)
    if hit is not None and hit[0] is model:
        return hit[1]
    rng = np.random.default_rng(12345)
    samples = tuple(_prepare(model, dt, attention, par, "decode" if ph == "any" else ph, windows, rng) for ph in phases)
    if len(_PREPARED) >= _PREPARED_MAX:
        del _PREPARED[next(iter(_PREPARED))]
    _PREPARED[key] = (model, samples)
    return samples


def _fit_phase(model, hw, dt, eff, par, windows, sample: _Sample) -> tuple[_Coef, float]:
    K = sample.K
    lk = link(hw, par)
    cost = phase_cost(sample.ops, hw, dt, eff, lk)
    ones = np.ones(K)
    cols, extra, comm, groups, tables = [], ones * cost.step_overhead_s, ones * 0.0, [], []
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
        if t.measured_s is not None:  # timed from a kernel table: its roofs here, its calls beside
            tables.append(_table_op(len(cols) // 2, L, op, dt, eff, sample))
        cols += [ones * t.compute_s * L, ones * t.memory_s * L]
        extra = extra + ones * t.overhead_s * L
    n_ops = len(cols) // 2
    n_algos = max([len(g) for g in groups] or [1])
    G = [g + [g[0]] * (n_algos - len(g)) for g in groups]  # pad with a repeat (the min is unchanged)
    Y = np.column_stack([*cols[0::2], *cols[1::2], extra, comm, *[a for g in G for a in g]])
    scale = sample.scale
    sol = sample.pinv @ Y  # least squares (pinv: one SVD for every target column)
    coef = _Coef((sol / scale[:, None]).T, n_ops, len(G), n_algos, tuple(tables))
    sm = StepModel(model, par, {"any": coef}, 0.0, windows)
    got = sm.time(sample.features)
    err = float(np.max(np.abs(got - cost.time_s) / cost.time_s))
    return coef, err


def _affine(values, sample: _Sample, what: str) -> np.ndarray:
    """Coefficients c with X c = ``values`` over the sample steps (X the feature vectors), exactly;
    ValueError(what) where no such c exists."""
    v = np.broadcast_to(np.asarray(values, float), (sample.K,))
    c = (sample.pinv @ v) / sample.scale
    if np.max(np.abs(sample.X @ c - v)) > EXACT * max(float(np.max(np.abs(v))), 1e-30):
        raise ValueError(what)
    return c


def _table_op(index: int, layers: float, op, dt: Dtypes, eff: Efficiency, sample: _Sample) -> _TableOp:
    """An operator timed from kernel tables, its calls' axes and counts as affine in the step features."""
    calls = []
    for c in op_calls(op):
        table = call_table(c, op.dtypes or dt, eff.tables)
        count = np.broadcast_to(np.asarray(c.count, float), (sample.K,))
        names, rows, per_call, const = [], [], [], {}
        for name, value in c.axes:
            v = np.asarray(value, float)
            if v.size == 1:
                const[name] = float(v)
                continue
            names.append(name)
            try:
                rows.append(_affine(v, sample, ""))
                per_call.append(False)
            except ValueError:  # a shape per call (an expert's rows) whose total over the calls is affine
                rows.append(_affine(v * count, sample, f"{op.name}'s {c.kernel} {name}"))
                per_call.append(True)
        A = np.array(rows) if rows else np.zeros((0, sample.scale.size))
        calls.append(_TableCall(table_slice(table, const), tuple(names), A,
                                _affine(count, sample, f"{op.name}'s count"), tuple(per_call)))
    return _TableOp(index, float(layers), tuple(calls))


def step_model(model: ModelSpec, hw: HardwareSpec, dt: Dtypes, eff: Efficiency, attention: str = "fused",
               par: Parallel = SINGLE) -> StepModel:
    """Fit the step-time model of one configuration (a few milliseconds)."""
    windows = attention_windows(model)
    phases = ("prefill", "decode") if model.attention.kind == "mla" else ("any",)
    coef, worst = {}, 0.0
    for ph, sample in zip(phases, _prepared(model, dt, attention, par, phases, windows), strict=True):
        try:
            coef[ph], err = _fit_phase(model, hw, dt, eff, par, windows, sample)
        except ValueError as exc:  # a table call whose shape the step features do not give
            raise SpecError(hw.name, "kernel_tables", f"they time {exc} at a shape a serving step's features do not "
                                                      f"give: plan and compare take a profile without tables for "
                                                      f"{model.name}") from None
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
