"""The seed's first-order intensity table for Qwen2.5-7B, reproduced exactly."""

import numpy as np
import pytest

from calc import load_model
from calc.cost import firstorder
from calc.cost.breakdown import intensity_records

# Seed 001: N = 7.615e9 parameters, kappa = 57,344 B/token (28 layers x 2 x 4 KV heads x 128 x 2 B), b = 2.
N, KAPPA, B_W = 7.615e9, 57_344, 2


def test_seed_prefill_table():
    got = firstorder.prefill_intensity(N, B_W, KAPPA, [128, 1024, 8192])
    assert np.round(got, 1).tolist() == [127.9, 1020.1, 7946.9]
    # 128: 2 * 7.615e9 * 128 / (7.615e9 * 2 + 57344 * 128)
    assert got[0] == pytest.approx(2 * 7.615e9 * 128 / (7.615e9 * 2 + 57344 * 128))


def test_seed_decode_table():
    got = firstorder.decode_intensity(N, B_W, KAPPA, [128, 1024, 8192])
    assert np.round(got, 2).tolist() == [1.00, 1.00, 0.97]


def test_operator_model_differs_where_it_should():
    m = load_model("qwen2.5-7b")
    assert m.kv_bytes_per_token() == 28 * 2 * 4 * 128 * 2 == KAPPA
    recs = {r["seq_len"]: r for r in intensity_records(m, [128, 1024, 8192])}
    # The first-order model moves only weights and KV; the operator model also moves every
    # operator's input and output activations (B*S rows each), which grow with S as fast
    # as the FLOPs do, so its prefill intensity saturates instead of growing ~linearly.
    assert recs[128]["operator_prefill"] < recs[128]["first_order_prefill"]
    assert recs[8192]["operator_prefill"] < recs[8192]["first_order_prefill"] / 4
    # Attention FLOPs (absent from the first-order model) grow with S.
    assert recs[8192]["prefill_attention_flops_share"] > recs[128]["prefill_attention_flops_share"]
    # decode: near 1 FLOP/B at B = 1 and short context. With GQA, attention does
    # 4*Hq*D = 4*28*128 FLOPs per cached position for 2*Hkv*D*2 = 2*4*128*2 bytes
    # (7 FLOP/B), so the operator model rises with S where the first-order one falls.
    assert 0.95 < recs[128]["operator_decode"] < 1.05
    assert recs[8192]["operator_decode"] > recs[1024]["operator_decode"] > recs[128]["operator_decode"]
    assert recs[8192]["first_order_decode"] < recs[128]["first_order_decode"]
