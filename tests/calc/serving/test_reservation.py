"""An engine that reserves KV to completion (preemption none: TensorRT-LLM's GUARANTEED_NO_EVICT,
TGI) holds a request's final pages for its whole life, in the closed form as in the simulator."""

import numpy as np
import pytest

from calc.cost.dtypes import Dtypes
from calc.serving.replica.capacity import Replica, steady_state
from calc.spec.catalog import load_hardware, load_model
from calc.spec.workload import Serving


def _rep(preemption: str) -> Replica:
    m = load_model("llama-3.1-8b")
    # an L40S (48 GB): 8B at bf16 leaves room for a few hundred thousand positions, so long requests bind
    return Replica(m, load_hardware("l40s"), 1, 4096, Dtypes.resolve(m),
                   Serving(preemption=preemption, block_size=32, max_batched_tokens=8192))


def test_reserved_pages_bound_the_batch_by_the_final_context():
    T, G = 1000, 1001  # final context T + G - 1 = 2000 positions = 2000 / 32 = 62.5 -> 63 pages
    rep = _rep("none")
    ss = steady_state(rep, np.array([T]), np.array([G]))
    assert ss.limited_by == "KV cache"
    # every running request holds 63 pages for all of its life: N = pages / 63
    assert ss.batch == pytest.approx(rep.kv.pages / 63, rel=1e-12)


def test_recompute_holds_pages_as_the_context_grows():
    T, G = 1000, 1001
    res, rec = steady_state(_rep("none"), np.array([T]), np.array([G])), \
        steady_state(_rep("recompute"), np.array([T]), np.array([G]))
    # recompute: a request holds ceil(1000 / 32) = 32 pages in its prefill step, then ceil((1000 + j) / 32)
    # after its j-th decode token (j = 1..1000): over its 1 + 1000 steps, on average
    held = (32 + sum(-(-(1000 + j) // 32) for j in range(1, 1001))) / 1001
    rep = _rep("recompute")
    assert rec.batch == pytest.approx(rep.kv.pages / held, rel=1e-12)
    assert rec.batch > 1.3 * res.batch  # (32 + 63) / 2 ~ 47.5 pages held on average against 63
