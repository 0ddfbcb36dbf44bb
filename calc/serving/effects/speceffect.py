"""Where speculative decoding helps a workload: the best configuration with it and without it
under the SLOs, and its decode-step TPOT beside the plain one as the batch grows.

A pure decode step at batch B and the requests' mean decode context: plain TPOT = the
target's decode step; speculative TPOT = (k draft steps + the k + 1-position verification)
/ E, E the expected accepted tokens (calc.serving.steps.timer.SpecTimer). Speculation trades spare compute
for fewer weight reads: at small batch a step is bound by reading the weights and the extra
positions ride along nearly free; as B grows the verification's k + 1 positions per sequence
make the step compute-bound and the draft's own steps stop being small, so the speedup falls
below 1 at some batch (the crossover).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from calc.core.errors import SpecError
from calc.cost.dtypes import Dtypes
from calc.cost.speculative import DraftHeads, SpecConfig, draft_of
from calc.serving.replica.capacity import Replica
from calc.serving.steps.timer import PlainTimer
from calc.spec.workload import LoadedWorkload

BATCH_POW = 10  # batch rows up to 2^10


@dataclass(frozen=True)
class SpecRow:
    batch: int
    plain_tpot_s: float
    spec_tpot_s: float

    @property
    def speedup(self) -> float:
        return self.plain_tpot_s / self.spec_tpot_s


@dataclass(frozen=True)
class SpecEffect:
    what: str  # "draft llama-3.2-1b, k 4, acceptance 0.7"
    config: str  # the replica the batch rows are for
    max_batch: int
    tokens_per_step: float
    context: float  # mean decode context the rows are at
    rows: tuple[SpecRow, ...]
    best_with: object | None  # Trial: the cheapest that meets the SLOs with speculation
    best_without: object | None  # ... without it

    @property
    def crossover_batch(self) -> int | None:
        """The smallest batch listed at which speculation no longer lowers TPOT (None: it helps at every one)."""
        return next((r.batch for r in self.rows if r.speedup <= 1.0), None)


def batch_rows(rep: Replica, context: float, batches) -> tuple[SpecRow, ...]:
    """Plain and speculative TPOT of pure decode steps at each batch (``rep`` speculates)."""
    plain, spec = PlainTimer(rep.steps, rep.logits), rep.timer
    kv = np.array([context - 1])
    out = []
    for b in batches:
        p = float(plain.decode_run(kv, 0.0, [float(b)])[0])
        out.append(SpecRow(int(b), p, float(spec.decode_run(kv, 0.0, [float(b)])[0]) / spec.tokens_per_step))
    return tuple(out)


def spec_effect(what: str, rep: Replica, T, G, best_with, best_without) -> SpecEffect:
    """The comparison for replica ``rep`` (speculating) at batches 1, 2, 4, ... 1,024 (past its max
    batch too: the trend) and its max batch."""
    G = np.asarray(G, float)
    D = G - 1
    ctx = float((D * np.asarray(T, float) + D * (D + 1) / 2).sum() / max(D.sum(), 1.0))
    batches = sorted({2**i for i in range(0, BATCH_POW + 1)} | {rep.max_batch})
    return SpecEffect(what, f"{rep.hw.name} TP{rep.tp}", rep.max_batch, rep.tokens_per_step, ctx, batch_rows(rep, ctx, batches),
                      best_with, best_without)


def speculative_config(wl: LoadedWorkload, dt: Dtypes) -> SpecConfig | None:
    """The workload's speculative block as calc.cost's SpecConfig, checked (errors name the field)."""
    sp = wl.spec.speculative
    if sp is None:
        return None
    heads = None if sp.heads is None else DraftHeads(sp.heads.layers, sp.heads.width)
    cfg = SpecConfig(sp.k, sp.acceptance, draft=wl.draft, heads=heads)
    try:
        draft_of(wl.model, cfg, dt, Replica(wl.model, wl.hardware[0], 1, 1, dt, wl.spec.serving).par)
    except SpecError as exc:
        raise SpecError(wl.path or "workload", "speculative", exc.problem) from None
    return cfg


def spec_note(wl: LoadedWorkload) -> str:
    sp = wl.spec.speculative
    what = f"draft {wl.draft.name}" if sp.draft is not None else f"{sp.heads.layers}-layer draft heads"
    return f"{what}, k {sp.k}, acceptance {sp.acceptance:g}"
