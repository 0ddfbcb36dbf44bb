"""What the plan report says would change the answer, computed here so reports only read it.

For a trial: its representative steps (the mean running batch decoding at the mean decode
context, and the same step carrying one prefill chunk), and, where the plan runs 16-bit, the
same replica with an FP8 KV cache (pages) and with FP8 weights (weight bytes, mean decode step).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from calc.cost.dtypes import Dtypes
from calc.cost.latency import mixed_step_cost
from calc.cost.roofline import PhaseCost
from calc.serving.planner.trial import Trial

WIDE = ("bf16", "fp16", "fp32")


@dataclass(frozen=True)
class Steps:
    """A trial's representative steps: ``running`` sequences decoding at ``context``."""

    decode: PhaseCost
    with_chunk: PhaseCost
    running: int
    context: float


@dataclass(frozen=True)
class WhatIf:
    steps: Steps
    fp8_kv_pages: int | None  # pages per replica with an FP8 KV cache (None: KV already 8-bit)
    fp8_weights_bytes: float | None  # weights per GPU with FP8 weights (None: already 8-bit)
    fp8_decode_step: PhaseCost | None  # the mean decode step with FP8 weights


def steps(t: Trial) -> Steps:
    r = t.replica
    T, G = t.sim.prompt_len, t.sim.output_len
    ctx = float(np.mean(T + (G - 1) / 2.0))
    n = max(int(round(t.sim.running_mean)), 1)
    decode = mixed_step_cost(r.model, r.hw, [1.0] * n, [ctx] * n, r.dt, r.eff, r.attention, r.par, phase="decode")
    chunk = float(min(np.mean(T), r.serving.max_batched_tokens))
    mixed = mixed_step_cost(r.model, r.hw, [1.0] * n + [chunk], [ctx] * n + [0.0], r.dt, r.eff, r.attention,
                            r.par, phase="prefill")
    return Steps(decode, mixed, n, ctx)


def what_if(t: Trial, dtypes: Dtypes) -> WhatIf:
    """The chosen trial's steps and its FP8 alternatives (KV cache, weights)."""
    r = t.replica
    st = steps(t)
    pages = weights = step = None
    if dtypes.kv in WIDE:
        dt8 = Dtypes(dtypes.weight, "fp8", dtypes.compute, dtypes.group_size)
        pages = replace(r, dt=dt8).kv.pages  # the same replica (split, draft) with an FP8 KV cache
    if dtypes.weight in WIDE:
        fp8 = replace(r, dt=Dtypes.resolve(r.model, "fp8", dtypes.kv))
        weights = fp8.kv.weights_bytes
        step = mixed_step_cost(r.model, r.hw, [1.0] * st.running, [st.context] * st.running, fp8.dt, fp8.eff,
                               r.attention, r.par)
    return WhatIf(st, pages, weights, step)
