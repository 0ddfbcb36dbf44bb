"""A ragged step's attention on a profile with kernel tables, as an engine runs it: its decode groups as
one batched decode call, its prompt chunks as one varlen prefill call whose work counts their cached
keys (hand-derived).
A mixed step measured on an H200 (reports/validation/h200-serving-mixed) had been priced by the analytical
curves instead: 20-185% over at 64 decode rows."""

import numpy as np
import pytest

from calc.cost.dtypes import Dtypes
from calc.cost.kernels import measured_time
from calc.cost.opcost import Pass
from calc.cost.operators import pass_ops
from calc.spec.kernel_tables import KernelSet, KernelTable
from calc.spec.model import ModelSpec

PROV = {"device": "cpu", "date": "2026-12-04", "source": "hand-written test table"}
FP32 = Dtypes("fp32", "fp32", "fp32")
SPEC = ModelSpec(name="t", num_layers=2, hidden_size=64, vocab_size=100, max_context=8192, dtype="fp32",
                 attention=dict(num_heads=4, num_kv_heads=2, head_dim=16), mlp=dict(kind="gated", intermediate_size=96))
HEADS = {"Hq": [4], "Hkv": [2], "D": [16]}
# decode: B 1, 8 x S 100, 1000; the cell (8, 1000) takes 40 us
DECODE = KernelTable(format="roofline-kernels/1", kernel="attention_decode", dtype="fp32", provenance=PROV,
                     axes={"B": [1, 8], "S": [100, 1000], **HEADS}, seconds=[5e-6, 9e-6, 10e-6, 40e-6])
# prefill: one cell, a fresh 512-token prompt (B 1) in 1 ms
PREFILL = KernelTable(format="roofline-kernels/1", kernel="attention_prefill", dtype="fp32", provenance=PROV,
                      axes={"B": [1], "T": [512], **HEADS}, seconds=[1e-3])
TABLES = KernelSet((DECODE, PREFILL))


def _attention(new, past) -> dict[str, float]:
    ps = Pass(np.ones(len(new)), np.asarray(new, float), np.asarray(past, float), "prefill", 1, True, 1)
    return {op.name: float(measured_time(op, FP32, TABLES)) for op in pass_ops(SPEC, ps, FP32, "fused")
            if op.name.startswith("attention")}


def test_decode_groups_are_one_batched_call_at_their_mean_context():
    # 8 decode rows at 1000 cached: the table's cell (B 8, S 1000), 40 us, not 8 calls of (1, 1000) at 9 us each
    t = _attention([1.0] * 8, [1000.0] * 8)
    assert t["attention"] == pytest.approx(40e-6)
    assert t["attention.chunks"] == 0.0  # no chunk in the step: no prefill call
    # rows at 500 and 1500 (mean 1000) read the same keys: the same call
    assert _attention([1.0] * 8, [500.0, 1500.0] * 4)["attention"] == pytest.approx(40e-6)


def test_the_chunks_are_one_prefill_call_counting_their_cached_keys():
    # work of T new tokens after P cached, per head: T * P + T (T + 1) / 2 pairs. A fresh 512: 131328
    # pairs in 1 ms; 512 after 1024: 524288 + 131328 = 655616 pairs. The two chunks are one call of
    # B 2 at their mean length, T = 1024 / 2 = 512: the table's one cell's rate (its B axis holds 1 only)
    fresh = 512 * 513 / 2
    after = 512 * 1024 + fresh
    t = _attention([1.0, 512.0, 512.0], [1000.0, 0.0, 1024.0])
    assert t["attention.chunks"] == pytest.approx(1e-3 * (1 + after / fresh))
    # the decode row beside them: one call of B 1 at S 1000, 9 us
    assert t["attention"] == pytest.approx(9e-6)


def test_a_prefill_table_with_a_window_axis_times_the_chunks_at_the_layers_window():
    # measured at W 256 (2 ms) and 4096 (1 ms) for a fresh 512: a global layer reads the widest, 1 ms
    windowed = KernelTable(format="roofline-kernels/1", kernel="attention_prefill", dtype="fp32", provenance=PROV,
                           axes={"B": [1], "T": [512], **HEADS, "W": [256, 4096]}, seconds=[2e-3, 1e-3])
    ps = Pass(np.ones(2), np.array([1.0, 512.0]), np.array([100.0, 0.0]), "prefill", 1, True, 1)
    (chunks,) = [op for op in pass_ops(SPEC, ps, FP32, "fused") if op.name == "attention.chunks"]
    assert float(measured_time(chunks, FP32, KernelSet((DECODE, windowed)))) == pytest.approx(1e-3)
