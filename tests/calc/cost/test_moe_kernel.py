"""An older fused-MoE kernel family (EngineSpec.moe_kernels, chosen by Serving.moe_kernel, e.g. by
a by_version rule): the routed experts' curve or efficiency terms scaled by its fractions, its fixed
time added per kernel; nothing else changes.

Golden times are the curve's equation written out with the committed constants (h200's fp8 GEMM
curve, hardware_profiles/h200.yaml; the kernel's fractions, calc/data/engines.yaml, which
reports/kernels/fit_moe_triton.py fits to vLLM PR 13932's published timings)."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from calc import load_hardware, load_model
from calc.core.errors import SpecError
from calc.cost.dtypes import Dtypes
from calc.cost.efficiency import Efficiency
from calc.cost.opcost import OpCost
from calc.cost.roofline import op_time
from calc.spec.engine import EngineSpec, load_engine
from calc.spec.scheduler import Serving, resolve_serving

KERNEL = "triton-fp8-block-2025-02"
RC, RM, M_HALF, FIXED_US = 0.0524, 0.329, 3.13, 32.0  # the committed fit
ROOT = Path(__file__).resolve().parents[3]


def experts(tokens=1024, name="moe.experts"):
    """DeepSeek-V3's routed experts at TP 8 (H 7168, 256 wide per GPU, top-8, all 256 touched):
    2 x tokens x 8 x 3 x 7168 x 256 FLOPs, 256 experts x 3 x 7168 x 256 fp8 weight bytes."""
    per_expert = 3 * 7168 * 256
    return OpCost(name, "linear", 58, linear_flops=np.float64(2.0 * tokens * 8 * per_expert),
                  weight_bytes=np.float64(256 * per_expert * 1.0), rows=np.float64(tokens * 8 / 256),
                  in_features=7168.0, out_features=256.0, kernels=3.0)


@pytest.fixture(scope="module")
def fp8():
    return Dtypes.resolve(load_model("deepseek-v3"), "fp8")


def _eff(hw, kernel):
    return Efficiency.of(hw).with_serving(resolve_serving(hw.preset, hw.name, hw.memory_gb).model_copy(
        update={"moe_kernel": kernel}))


def test_the_curve_of_the_routed_experts_takes_the_kernels_fractions_and_fixed_time(fp8):
    # h200 fp8 curve: compute 0.772 (no N/K tiles for routed experts), memory 0.833, fixed 13.18 us
    # per kernel; the family: compute x 0.0524 with its own M half 3.13 (for the curve's 71.1),
    # memory x 0.329, + 32 us per kernel
    hw = load_hardware("h200").with_engine("vllm")
    op = experts(1024)  # 32 rows per expert
    t = op_time(op, hw, fp8, _eff(hw, KERNEL))
    compute = 2 * 1024 * 8 * 3 * 7168 * 256 / (1978.9e12 * 0.772 * RC * (32 / (32 + M_HALF)))
    memory = 256 * 3 * 7168 * 256 / (4.8e12 * 0.833 * RM)
    assert float(t.compute_s) == pytest.approx(compute, rel=1e-9)
    assert float(t.memory_s) == pytest.approx(memory, rel=1e-9)
    assert float(t.overhead_s) == pytest.approx(3 * (13.18 + FIXED_US) * 1e-6, rel=1e-9)
    plain = op_time(op, hw, fp8, _eff(hw, None))
    assert float(plain.memory_s) == pytest.approx(memory * RM, rel=1e-9)  # without it: the chip's own


def test_on_the_efficiency_model_the_same_fractions_apply(fp8):
    # mi300x has no curves: compute 0.51 of the fp8 peak x 32 / (32 + 8.2), vllm's M half; the
    # family's own M half 3.13 replaces it
    hw = load_hardware("mi300x").with_engine("vllm")
    op = experts(1024)
    plain, old = op_time(op, hw, fp8, _eff(hw, None)), op_time(op, hw, fp8, _eff(hw, KERNEL))
    ramp = (1 + M_HALF / 32) / (1 + 8.2 / 32)
    assert float(old.compute_s) == pytest.approx(float(plain.compute_s) / RC * ramp, rel=1e-9)
    assert float(old.memory_s) == pytest.approx(float(plain.memory_s) / RM, rel=1e-9)
    assert float(old.overhead_s) == pytest.approx(float(plain.overhead_s) + 3 * FIXED_US * 1e-6, rel=1e-9)


def test_only_the_routed_experts_at_the_kernels_dtype_change(fp8):
    hw = load_hardware("h200").with_engine("vllm")
    shared = experts(1024, name="moe.shared.gate_up_proj")
    assert op_time(shared, hw, fp8, _eff(hw, KERNEL)).time_s == op_time(shared, hw, fp8, _eff(hw, None)).time_s
    bf16 = Dtypes.resolve(load_model("deepseek-v3"), "bf16")
    op = experts(1024)
    assert op_time(op, hw, bf16, _eff(hw, KERNEL)).time_s == op_time(op, hw, bf16, _eff(hw, None)).time_s


def test_versions_before_the_rule_run_the_old_kernel():
    vllm, sglang = load_engine("vllm"), load_engine("sglang")
    assert resolve_serving(vllm, "h200", 141, version="0.7.3").moe_kernel == KERNEL
    assert resolve_serving(vllm, "h200", 141, version="0.7.4.dev181+gf35f8e22").moe_kernel == KERNEL  # a dev build precedes 0.7.4
    assert resolve_serving(vllm, "h200", 141, version="0.7.4").moe_kernel is None
    assert resolve_serving(vllm, "h200", 141).moe_kernel is None  # no version known: today's kernels
    assert resolve_serving(sglang, "h200", 141, version="0.4.3.post2").moe_kernel == KERNEL
    assert resolve_serving(sglang, "h200", 141, version="0.5.7").moe_kernel is None


def test_an_unknown_kernel_name_is_one_line_naming_the_field():
    with pytest.raises(SpecError, match="moe_kernel") as exc:
        resolve_serving(load_engine("vllm"), "h200", 141, block=Serving(moe_kernel="tritn-fp8"), where="w.yaml")
    assert "\n" not in str(exc.value) and "triton-fp8-block-2025-02" in str(exc.value)
    spec = load_engine("vllm").model_dump()
    spec["by_version"] = [{"before": "0.1", "set": {"moe_kernel": "nope"}}]
    with pytest.raises(ValueError, match="not one of moe_kernels"):
        EngineSpec.model_validate(spec)


def test_the_committed_fractions_are_the_fit_to_the_published_timings():
    spec = importlib.util.spec_from_file_location("fit_moe_triton", ROOT / "reports" / "kernels" / "fit_moe_triton.py")
    fit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit)
    fitted = tuple(float(f"{v:.3g}") for v in fit.fit(fit.terms()))
    assert fitted == (RC, RM, FIXED_US, M_HALF)
    for name in ("vllm", "sglang"):
        k = load_engine(name).moe_kernels[KERNEL]
        assert (k.compute, k.memory, k.fixed_us, k.m_half) == (RC, RM, FIXED_US, M_HALF)
