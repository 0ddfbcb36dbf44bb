"""Operator times from kernel tables: log-space interpolation, clamping, fallback (hand-derived)."""

import math

import numpy as np
import pytest

from calc.cost.calls import KernelCall
from calc.cost.efficiency import Efficiency
from calc.cost.kernels import measured_time, table_time
from calc.cost.latency import decode_cost
from calc.cost.operators import Dtypes, OpCost
from calc.cost.roofline import op_time
from calc.spec.catalog import load_hardware, load_model
from calc.spec.hardware import HardwareSpec
from calc.spec.kernel_tables import KernelSet, KernelTable

PROV = {"device": "cpu", "date": "2026-12-01", "source": "hand-written test table"}
FP32 = Dtypes("fp32", "fp32", "fp32")


def matmul(axes, seconds, dtype="fp32"):
    return KernelTable(format="roofline-kernels/1", kernel="matmul", dtype=dtype, provenance=PROV,
                       axes=axes, seconds=seconds)


def test_grid_points_return_the_table_and_log_midpoint_is_the_geometric_rate():
    # M = 1 in 1 ms: rate 2*1*1000*1000 / 1e-3 = 2e9 FLOP/s; M = 100 in 2 ms: 2e8 / 2e-3 = 1e11 FLOP/s
    t = matmul({"M": [1, 100], "K": [1000], "N": [1000]}, [1e-3, 2e-3])
    q = lambda m: float(table_time(t, {"M": m, "K": 1000, "N": 1000}))  # noqa: E731
    assert q(1) == pytest.approx(1e-3)
    assert q(100) == pytest.approx(2e-3)
    # M = 10 is halfway in log M: rate sqrt(2e9 * 1e11) = 1.41421e10; time 2e7 / 1.41421e10 = 1.41421 ms
    assert q(10) == pytest.approx(2e7 / math.sqrt(2e9 * 1e11))
    # clamped: beyond the grid the edge rate holds, so time scales with work
    assert q(1000) == pytest.approx(2e9 / 1e11)  # 20 ms
    # below it the edge rate would give 1e6 / 2e9 = 0.5 ms; no call is faster than the fastest cell, 1 ms
    assert q(0.5) == pytest.approx(1e-3)
    # an axis of one value: K = 2000 keeps K = 1000's rate, twice the work
    assert float(table_time(t, {"M": 1, "K": 2000, "N": 1000})) == pytest.approx(2e-3)


def test_no_shape_is_faster_than_the_tables_fastest_cell():
    # a streaming table, bytes 32768 and 65536 in 13 us and 12 us (a launch floor: the larger one ran faster).
    # 4096 bytes at the edge's rate would be 13 us x 4096 / 32768 = 1.625 us; the floor is the fastest cell, 12 us
    t = KernelTable(format="roofline-kernels/1", kernel="stream", dtype="bf16", op="rope", provenance=PROV,
                    axes={"bytes": [32768, 65536]}, seconds=[13e-6, 12e-6])
    assert float(table_time(t, {"bytes": 4096})) == pytest.approx(12e-6)
    # the edge itself is still its own time, and far past the top the edge rate holds: 2^20 bytes at 65536 / 12 us
    assert float(table_time(t, {"bytes": 32768})) == pytest.approx(13e-6)
    assert float(table_time(t, {"bytes": 2**20})) == pytest.approx(12e-6 * 2**20 / 65536)


def test_bilinear_in_log_space():
    # work 2*M*N (K = 1); cells (M, N) -> seconds -> rate: (1,1) 1 s -> 2; (1,4) 1 s -> 8; (4,1) 1 s -> 8; (4,4) 2 s -> 16
    t = matmul({"M": [1, 4], "K": [1], "N": [1, 4]}, [1.0, 1.0, 1.0, 2.0])
    # (2, 2) is the log-centre: log2 rate = (1 + 3 + 3 + 4) / 4 = 2.75; work 8, so time 8 / 2^2.75 = 2^0.25
    assert float(table_time(t, {"M": 2, "K": 1, "N": 2})) == pytest.approx(2 ** 0.25)
    # arrays broadcast
    got = table_time(t, {"M": np.array([1.0, 4.0]), "K": 1, "N": 4})
    np.testing.assert_allclose(got, [1.0, 2.0])


def _hw(peak_tflops=1.0, bw_tb_s=1.0):
    return HardwareSpec(name="t", kind="cpu", memory_gb=1, memory_bandwidth_tb_s=bw_tb_s, peak_tflops={"fp32": peak_tflops})


def _linear(m, k, n):
    return OpCost("mm", "linear", 1, linear_flops=np.float64(2.0 * m * k * n), weight_bytes=np.float64(4.0 * k * n),
                  calls=(KernelCall("matmul", (("M", m), ("K", k), ("N", n))),))


def test_a_table_faster_than_the_peak_is_clamped_to_it():
    # table: 1000^3 matmul in 1 us (2e15 FLOP/s); the profile's peak 1 TFLOP/s -> 2e9 / 1e12 = 2 ms
    tables = KernelSet((matmul({"M": [1000], "K": [1000], "N": [1000]}, [1e-6]),))
    t = op_time(_linear(1000, 1000, 1000), _hw(), FP32, Efficiency(tables=tables))
    assert float(t.time_s) == pytest.approx(2e-3)
    assert t.measured_s is not None
    # memory roof: 4 MB of weights at 1 GB/s = 4 ms beats the 2 ms compute roof
    t = op_time(_linear(1000, 1000, 1000), _hw(bw_tb_s=1e-3), FP32, Efficiency(tables=tables))
    assert float(t.time_s) == pytest.approx(4e-3)
    # slower than both roofs: the table's time (1 s), with no overheads added
    slow = KernelSet((matmul({"M": [1000], "K": [1000], "N": [1000]}, [1.0]),))
    eff = Efficiency(kernel_overhead_s=1.0, tables=slow)
    assert float(op_time(_linear(1000, 1000, 1000), _hw(), FP32, eff).time_s) == pytest.approx(1.0)


def test_ops_without_a_table_use_the_analytical_model():
    tables = KernelSet((matmul({"M": [1000], "K": [1000], "N": [1000]}, [1.0], dtype="bf16"),))
    op = _linear(1000, 1000, 1000)
    assert measured_time(op, FP32, tables) is None  # a bf16 table does not time an fp32 matmul
    hw = _hw()
    with_t = op_time(op, hw, FP32, Efficiency(compute=0.5, tables=tables))
    without = op_time(op, hw, FP32, Efficiency(compute=0.5))
    assert with_t.measured_s is None
    assert float(with_t.time_s) == float(without.time_s) == pytest.approx(2e9 / (1e12 * 0.5))


def test_profile_tables_time_matmuls_only_and_ideal_ignores_them():
    model, base = load_model("tiny-decoder"), load_hardware("cpu-generic-2core")
    slow = matmul({"M": [1], "K": [1], "N": [1]}, [1.0])  # 2 FLOP/s: every matmul takes seconds
    hw = base.with_kernels(KernelSet((slow,)))
    B, S = np.float64(1), np.float64(16)
    plain = decode_cost(model, base, B, S, FP32, Efficiency.of(base))
    timed = decode_cost(model, hw, B, S, FP32, Efficiency.of(hw))
    for a, b in zip(plain.ops, timed.ops, strict=True):
        if a.op.kind == "linear":
            assert b.measured_s is not None and float(b.time_s) > 1.0
        else:
            assert b.measured_s is None and float(a.time_s) == float(b.time_s)
    assert str(timed.bound) == "measured"
    assert Efficiency.of(hw, ideal=True).tables is None
    ideal = decode_cost(model, hw, B, S, FP32, Efficiency.of(hw, ideal=True))
    assert float(ideal.time_s) == float(decode_cost(model, base, B, S, FP32, Efficiency.of(base, ideal=True)).time_s)


def _flat(kernel, axes, seconds, op=None, dtype="bf16"):
    return KernelTable(format="roofline-kernels/1", kernel=kernel, dtype=dtype, op=op, provenance=PROV, axes=axes,
                       seconds=seconds)


def test_moe_experts_sum_every_kernel_of_each_expert_hit():
    from calc.cost.opcost import Pass
    from calc.cost.operators import pass_ops

    # one-cell tables: matmul 2,000 FLOPs in 2e-9 s (1e12 FLOP/s); streams 1 byte in 1e-9 s (1e9 B/s)
    tables = KernelSet((_flat("matmul", {"M": [1], "K": [1], "N": [1000]}, [2e-9]),
                        _flat("stream", {"bytes": [1]}, [1e-9], op="act"),
                        _flat("stream", {"bytes": [1]}, [1e-9], op="add")))
    m = load_model("mixtral-8x7b")  # H 4096, expert F 14336, E 8, top-2; bf16 activations (2 B)
    dt = Dtypes("bf16", "bf16", "bf16")
    ops = pass_ops(m, Pass(np.float64(1), np.float64(1), np.float64(16), "decode"), dt)
    experts = next(op for op in ops if op.name == "moe.experts")
    # one token: 8 * (1 - (1 - 2/8)^1) = 2 experts hit, 1 row each, 2 (token, slot) choices scanned
    H, F, hit = 4096, 14336, 2.0
    matmuls = (2 * H * 2 * F + 2 * F * H) / 1e12  # gate_up [1,H]x[H,2F] and down [1,F]x[F,H]
    streams = (3 * F * 2 + 3 * (3 * H * 2) + 9 * 2) / 1e9  # silu(g)*u; gather, weight, index_add; the scan
    assert float(measured_time(experts, dt, tables)) == pytest.approx(hit * (matmuls + streams))


@pytest.mark.parametrize("name, want", [("norms", ("stream", "norm")), ("qk_norm.local", ("stream", "norm")),
                                        ("rope", ("stream", "rope")), ("mlp.act_mul", ("stream", "act")),
                                        ("residual_add", ("stream", "add")), ("embedding", ("embedding", None)),
                                        ("sample", ("sample", None)), ("moe.topk", None)])
def test_elementwise_operators_find_their_tables_by_name(name, want):
    from calc.cost.kernels import stream_op

    assert stream_op(name) == want


def test_a_slice_reads_the_table_as_table_time_does():
    """TableSlice: the fixed axes folded in once; at any query (inside, between and beyond the grid,
    one axis left or two) the same seconds as table_time, floor included."""
    from calc.cost.kernels import table_slice

    t = matmul({"M": [1, 16, 256], "K": [512, 4096], "N": [512, 8192]},
               [1e-5, 2e-5, 3e-5, 9e-5, 1.2e-5, 4e-5, 6e-5, 5e-4, 3e-5, 2e-4, 5e-4, 6e-3])
    ms = np.array([0.5, 1.0, 3.0, 16.0, 100.0, 256.0, 5000.0])
    one = table_slice(t, {"K": 1500.0, "N": 3000.0})
    assert one.names == ("M",)
    np.testing.assert_allclose(one.time({"M": ms}), table_time(t, {"M": ms, "K": 1500.0, "N": 3000.0}), rtol=1e-12)
    two = table_slice(t, {"N": 700.0})
    ks = np.array([100.0, 512.0, 2000.0, 9000.0])
    np.testing.assert_allclose(two.time({"M": ms[:, None], "K": ks[None, :]}),
                               table_time(t, {"M": ms[:, None], "K": ks[None, :], "N": 700.0}), rtol=1e-12)
