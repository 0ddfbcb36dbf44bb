"""The bound rule: a pass is labelled by where its time goes, not by its aggregate FLOP/B."""

import numpy as np


def test_a_pass_is_labelled_by_where_its_time_goes():
    """Two operators: a GEMM with compute 3 s / memory 1 s (compute-bound, 3 s) and a stream with
    compute 0 / memory 2.5 s (memory-bound, 2.5 s). Summed terms say memory (compute 3 < memory 3.5:
    the old rule, aggregate intensity); 3 s of the 5.5 s are in a compute-bound operator: compute."""
    from calc.cost.opcost import OpCost
    from calc.cost.roofline import OpTime, PhaseCost
    a = OpTime(OpCost("gemm", "linear", 1), np.float64(3.0), np.float64(1.0), np.float64(0.0))
    b = OpTime(OpCost("stream", "other", 1), np.float64(0.0), np.float64(2.5), np.float64(0.0))
    p = PhaseCost((a, b), 0.0)
    assert float(p.compute_s) < float(p.memory_s)
    assert p.time_shares.tolist() == [3.0, 2.5, 0.0]
    assert str(p.bound) == "compute"


def test_llama_8b_prefill_on_l4_is_compute_bound():
    """Issue 24's case: Llama-3.1-8B, 512-token prefill on an L4: FLOP/B 342 under the ridge (the
    profile's bf16 peak over its bandwidth), yet most of its time sits in compute-bound GEMMs."""
    from calc.cost.latency import estimate
    from calc.spec.catalog import load_hardware, load_model
    hw = load_hardware("l4")
    e = estimate(load_model("llama-3.1-8b"), hw, 1, 512, 2)
    ridge = hw.peak_flops_per_s("bf16") / hw.memory_bandwidth_bytes_per_s
    assert float(e.prefill.intensity) < ridge
    shares = e.prefill.time_shares
    assert shares[0] > 0.5 * shares.sum()
    assert str(e.prefill.bound) == "compute"
