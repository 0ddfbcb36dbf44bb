"""Kernel curves and fitted collectives: strict schema, the committed fits' bounds."""

import pytest
from pydantic import ValidationError

from calc import load_hardware
from calc.spec.catalog import HARDWARE_DIR
from calc.spec.kernels import Collectives, GemmCurve, KernelCurves

FITTED = ("a100-80gb-sxm", "h100-sxm", "h200", "l40s", "b200", "gb200")


def test_a_fraction_above_one_or_an_unknown_key_is_refused():
    ok = dict(compute=0.8, m_half=10, n_half=0, k_half=0, memory=0.8, fixed_us=3, median_error=0.1,
              p90_error=0.2, points=10)
    GemmCurve(**ok)
    with pytest.raises(ValidationError):
        GemmCurve(**{**ok, "compute": 1.2})  # never faster than the data-sheet peak
    with pytest.raises(ValidationError):
        GemmCurve(**{**ok, "memroy": 0.8})
    with pytest.raises(ValidationError):
        Collectives(source="x", one_shot_us=3, two_shot_us=6, custom_fraction=1.5, ring_us=5, ring_hop_us=1,
                    ring_fraction=0.5, all_to_all_us=9, all_to_all_fraction=0.5, send_us=6, send_fraction=0.5)


@pytest.mark.parametrize("name", FITTED)
def test_fitted_profiles_carry_sourced_bounded_curves(name):
    hw = load_hardware(name)
    k: KernelCurves = hw.efficiency.kernels
    assert "aiconfigurator 0.12.0" in k.source
    assert "bf16" in k.gemm
    for curve in (*k.gemm.values(), k.stream, k.prefill_attention, k.decode_attention):
        assert curve.points > 0 and 0 <= curve.median_error <= curve.p90_error
    assert all(g.compute <= 1 and g.memory <= 1 for g in k.gemm.values())
    # L40S's PCIe collectives missed the measurements by more than 25%: not adopted
    assert (hw.collectives is None) == (name == "l40s")


def test_profiles_without_kernel_data_say_so():
    for name in ("a100-40gb", "h100-pcie", "l4", "mi300x"):
        hw = load_hardware(name)
        assert hw.efficiency.kernels is None and hw.collectives is None
        assert "# kernels: none" in (HARDWARE_DIR / f"{name}.yaml").read_text()
