"""What one request gets alone on an idle replica: the planner's floors. A TTFT or TPOT target
below its floor rules a configuration out without simulating it."""

from __future__ import annotations

import numpy as np

from calc.core import text as render
from calc.serving.replica.capacity import Replica
from calc.serving.replica.prefix import CachedPrefix
from calc.serving.sim.simresult import latency_percentile
from calc.spec.workload import Target


def floors(rep: Replica, T: np.ndarray, G: np.ndarray, prefix: CachedPrefix | None = None) -> dict[str, np.ndarray]:
    """Per request, the latency it gets alone on an idle replica: TTFT = its prefill (of the
    uncached tokens) in chunks of the token budget; TPOT = a decode step at batch 1 at its mean
    context, over the tokens a step emits (the replica's step timer prices both)."""
    timer = rep.timer
    budget = rep.serving.max_batched_tokens
    c = np.zeros_like(T) if prefix is None else prefix.cached
    kp = np.ceil((T - c) / budget).astype(np.int64)
    owner = np.repeat(np.arange(T.size), kp)
    start = np.concatenate([[0], np.cumsum(kp)[:-1]])
    i = np.arange(owner.size) - start[owner]
    past = (c[owner] + i * budget).astype(float)
    new = np.minimum(T[owner] - past, budget).astype(float)
    chunk_s, _ = timer.step(np.zeros(0), new[:, None], past[:, None])
    ctx = T + (G - 1) / 2.0
    step_s, _ = timer.decode_run(np.zeros(1), ctx - 1)
    ttft = np.bincount(owner, weights=chunk_s, minlength=T.size)
    return {"ttft": ttft, "tpot": np.where(G > 1, step_s / timer.tokens_per_step, np.nan)}


def floor_reason(floors, targets) -> tuple[str, str] | None:
    for key, target in targets.items():
        t = Target.of(key, target)
        if t.metric not in floors:
            continue
        floor = latency_percentile(floors[t.metric], t.percentile)
        if floor > target:  # nan (no request has the metric) compares False
            what = "its prefill" if t.metric == "ttft" else "a decode step at batch 1"
            return t.metric, (f"{t.label} floor: alone on an idle replica, {what} takes "
                              f"{render.seconds(floor)} (p{t.percentile}) > {render.seconds(target)}")
    return None
