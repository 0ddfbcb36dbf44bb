"""Broadcast axes (a grid) give the same numbers as the expanded scenarios, to the bit."""

import numpy as np
import pytest

from calc import load_hardware, load_model
from calc.cost.latency import estimate
from calc.cost.setup import Setup

# Sparse lengths (each decode step evaluated where it falls) and dense ones (the steps looked
# up in a table over the contexts' range): both paths of calc.cost.latency._step_times.
SPARSE = (np.array([1.0, 8, 64])[:, None, None], np.array([1.0, 100, 2048])[None, :, None],
          np.array([1.0, 2, 37, 300])[None, None, :])
DENSE = (np.array([1.0, 8, 64])[:, None, None], np.arange(1.0, 50)[None, :, None], np.arange(1.0, 30)[None, None, :])


@pytest.mark.parametrize("axes", [SPARSE, DENSE], ids=["sparse", "dense"])
@pytest.mark.parametrize("model, options", [("llama-3.1-8b", {}), ("gemma-2-9b", {"tp": 2}),
                                            ("mixtral-8x7b", {"tp": 2, "ep": 2}), ("deepseek-v2-lite", {})])
def test_axes_match_expanded(model, options, axes):
    B, T, G = axes
    shape = np.broadcast_shapes(B.shape, T.shape, G.shape)
    m, hw = load_model(model), load_hardware("h100-sxm")
    grid = estimate(m, hw, B, T, G, Setup.of(**options))
    flat = estimate(m, hw, *(a.reshape(-1) for a in np.broadcast_arrays(B, T, G)), Setup.of(**options))
    for name in ("ttft_s", "tpot_s", "e2e_s", "kv_cache_bytes", "output_tokens_per_s"):
        a, b = np.asarray(getattr(grid, name)), np.asarray(getattr(flat, name))
        assert a.shape == shape
        assert np.array_equal(a.reshape(-1), b, equal_nan=True), name
    for phase in ("prefill", "decode"):
        g, f = getattr(grid, phase), getattr(flat, phase)
        for name in ("flops", "bytes", "time_s", "comm_s"):
            assert np.array_equal(np.asarray(getattr(g, name)).reshape(-1), getattr(f, name)), (phase, name)
        assert np.array_equal(np.asarray(g.bound).reshape(-1), f.bound)
    assert np.array_equal(np.asarray(grid.memory.activation_bytes).reshape(-1), flat.memory.activation_bytes)
