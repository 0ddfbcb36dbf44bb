"""A profile's curves fitted to kernel tables (hand-derived tables, torch-free)."""

import pytest

from calc.spec.kernel_tables import KernelTable
from validate.kernelfit import fit_dtype, fitted_profile

PROV = {"device": "cpu", "threads": 2, "date": "2026-12-01", "source": "hand-written"}
PEAK, BW = 1e12, 1e10  # FLOP/s, bytes/s


def table(kernel, axes, seconds, op=None, dtype="fp32"):
    return KernelTable(format="roofline-kernels/1", kernel=kernel, dtype=dtype, op=op, provenance=PROV, axes=axes,
                       seconds=seconds)


def tables():
    # stream: 1 kB in 1 us + 1e3 / (0.5 * 1e10) = 1.2 us; 10 MB (the largest: the DRAM rate) in 1 us + 1e7 / 5e9 = 2001 us
    stream = table("stream", {"bytes": [1e3, 1e7]}, [1.2e-6, 2.001e-3], op="add")
    # matmul at M = 1024 (the largest M): 2 * 1024^3 FLOPs at 0.8 * 1e12 FLOP/s = 2.68435 ms
    big = 2 * 1024 ** 3 / 0.8e12
    # M = 1: the weights (1024 * 1024 * 4 B = 4.19 MB) at 0.5 * 1e10 B/s = 0.839 ms, + 1 us
    small = 1024 * 1024 * 4 / 0.5e10 + 1e-6
    mm = table("matmul", {"M": [1, 1024], "K": [1024], "N": [1024]}, [small, big])
    return [stream, mm]


def test_fit_recovers_the_tables_efficiencies():
    f = fit_dtype(tables(), "fp32", PEAK, BW)
    # memory: the 10 MB kernel's rate 1e7 / 2.001e-3 = 4.9975e9 B/s over 1e10
    assert f["memory"] == pytest.approx(1e7 / 2.001e-3 / BW, abs=1e-4)
    # overhead: 1.2 us - 1e3 / (1e10 * 0.49975) = 1.2 - 0.2001 = 1.0 us
    assert f["kernel_overhead_us"] == pytest.approx(1.0, abs=0.01)
    assert f["compute"] == pytest.approx(0.8)
    # M = 1 is memory-bound at exactly the stream rate: no M half is needed to explain it
    assert f["gemm_m_half"] == pytest.approx(0.0, abs=1.0)


def test_profile_roofs_are_the_best_measured_and_efficiencies_stay_below_1():
    # the tables' matmul at M = 1024 runs at 0.8e12 FLOP/s, above a probe that saw 0.5e12 (a busy
    # machine): the measured peak is the table's, and the efficiency 1, said in the notes
    hw = fitted_profile(tables(), ["kernels/a.yaml"], "p", "cpu", 1e9, {"fp32": 0.5e12}, 1e9, 2, "d", PROV)
    assert hw.peak_tflops["fp32"] == pytest.approx(0.8)
    assert hw.efficiency.compute == pytest.approx(1.0)
    # bandwidth: the 10 MB stream is below 32 MB, but the table's largest, so its 4.9975e9 B/s beats the probe
    assert hw.memory_bandwidth_tb_s == pytest.approx(4.9975e-3, rel=1e-4)
    assert hw.efficiency.memory == pytest.approx(1.0) and hw.threads == 2
    notes = " ".join(hw.calibration["notes"])
    assert "so it is the measured peak" in notes and "so it is the measured bandwidth" in notes
    assert hw.kernel_tables == ["kernels/a.yaml"]
