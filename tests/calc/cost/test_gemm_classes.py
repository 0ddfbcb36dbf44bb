"""GEMM classes: weight-only (int8/int4 dequantised inside a 16-bit GEMM) and block-scaled fp4.

Golden times are the curves' equations written out with the fitted constants of the committed
profiles (hardware_profiles/*.yaml) and presets (calc/data/engines.yaml), so a change to the
mechanism, not to a fit, is what these tests catch.
"""

import numpy as np
import pytest
from pydantic import ValidationError

from calc import load_hardware, load_model
from calc.cost.dtypes import Dtypes
from calc.cost.efficiency import Efficiency
from calc.cost.opcost import OpCost
from calc.cost.roofline import op_time
from calc.spec.engine import EngineSpec, WeightOnlyKernel, load_engine

N = K = 8192


def gemm(M, weight_bytes_per_value):
    """x[M,K] @ W[K,N] with weights of the given width; 16-bit activations in and out."""
    return OpCost("q_proj", "linear", 1, linear_flops=np.float64(2.0 * M * N * K),
                  weight_bytes=np.float64(N * K * weight_bytes_per_value), act_read_bytes=np.float64(M * K * 2.0),
                  act_write_bytes=np.float64(M * N * 2.0), rows=np.float64(M), in_features=K, out_features=N)


def phi(x, half):
    return x / (x + half)


@pytest.fixture(scope="module")
def llama():
    return load_model("llama-3.1-8b")


def test_int4_weight_only_decode_gemm_pays_the_measured_dequantisation(llama):
    # A100 bf16 curve: compute 0.922, halves M 118.4 N 161.9 K 127.2, memory 0.783, fixed 4.71 us;
    # TensorRT-LLM's int4 weight-only kernel: compute x 0.896, its own M half 49.0, memory x 0.922,
    # + 9.43 us per GEMM
    hw = load_hardware("a100-80gb-sxm").with_engine("trtllm")
    dt = Dtypes.resolve(llama, "int4", group_size=128)
    assert dt.weight_only and dt.compute == "bf16"
    t = op_time(gemm(1, 0.5), hw, dt, Efficiency.of(hw))
    bytes_ = N * K * 0.5 + 1 * K * 2 + 1 * N * 2
    memory = bytes_ / (2.039e12 * 0.783 * 0.922)
    compute = 2 * N * K / (312e12 * 0.922 * 0.896 * phi(1, 49.0) * phi(N, 161.9) * phi(K, 127.2))
    assert compute > memory  # the dequantising kernel's small-M tiles, not the int4 bytes, bound it
    assert float(t.time_s) == pytest.approx(compute + (4.71 + 9.43) * 1e-6, rel=1e-9)
    # at M = 512 both grow; the 16-bit GEMM of the same shape is never slower by more than its bytes
    bf16 = op_time(gemm(512, 2.0), hw, Dtypes.resolve(llama), Efficiency.of(hw))
    int4 = op_time(gemm(512, 0.5), hw, dt, Efficiency.of(hw))
    assert float(int4.time_s) > float(bf16.time_s)  # compute-bound: dequantising only adds


def test_a_preset_without_a_measured_weight_only_kernel_dequantises_for_free(llama):
    # vLLM's Marlin/Machete kernels have no transcribed measurement: the efficiency model times
    # the GEMM with the int4 bytes and nothing else (curves return None for weight-only weights)
    hw = load_hardware("a100-80gb-sxm").with_engine("vllm")
    eff = Efficiency.of(hw)
    assert eff.weight_only_for(Dtypes.resolve(llama, "int4")) is None
    free = op_time(gemm(1, 0.5), hw, Dtypes.resolve(llama, "int4"), eff)
    wo = EngineSpec(name="x", description="x", weight_only={"int4": WeightOnlyKernel(
        kernel="k", compute=0.5, m_half=16, memory=0.5, fixed_us=10.0)})
    paid = op_time(gemm(1, 0.5), hw, Dtypes.resolve(llama, "int4"), eff.under(wo))
    assert float(paid.time_s) > float(free.time_s)


def test_weight_only_on_the_efficiency_model_scales_both_roofs_and_adds_its_fixed_time(llama):
    # no curves (A100 40GB): default preset efficiencies, the profile's compute 0.7 / memory 0.85
    # defaults unless stated; the weight-only kernel multiplies them and adds its fixed time
    hw = load_hardware("a100-40gb")
    assert hw.efficiency.kernels is None
    base = Efficiency.of(hw)
    kernel = WeightOnlyKernel(kernel="k", compute=0.5, m_half=16, memory=0.8, fixed_us=7.0)
    eff = base.__class__(compute=0.6, memory=0.9, weight_only=(("int8", kernel),))
    dt = Dtypes.resolve(llama, "int8")
    t = op_time(gemm(4096, 1.0), hw, dt, eff)
    peak, bw = hw.peak_flops_per_s("bf16"), hw.memory_bandwidth_bytes_per_s
    flops = 2 * 4096 * N * K
    bytes_ = N * K * 1.0 + 4096 * K * 2 + 4096 * N * 2
    assert float(t.compute_s) == pytest.approx(flops / (peak * 0.6 * 0.5))
    assert float(t.memory_s) == pytest.approx(bytes_ / (bw * 0.9 * 0.8))
    assert float(t.overhead_s) == pytest.approx(7.0e-6)
    # the same pass with bf16 weights is not weight-only: no factors, no fixed time
    plain = op_time(gemm(4096, 2.0), hw, Dtypes.resolve(llama), eff)
    assert float(plain.compute_s) == pytest.approx(flops / (peak * 0.6)) and float(plain.overhead_s) == 0.0


def test_nvfp4_prefill_gemm_runs_the_fp4_class_at_the_fp4_peak(llama):
    # B200 fp4 (NVFP4) curve: compute 0.835, halves M 538.7 N 4430.5 K 0, memory 0.418, fixed 9.39 us;
    # fp4 dense peak 9000 TFLOP/s; trtllm adds nothing per launch (CUDA graphs, launch_us 0)
    hw = load_hardware("b200").with_engine("trtllm")
    dt = Dtypes.resolve(llama, "fp4", compute="fp4", group_size=32)
    assert not dt.weight_only
    M = 8192
    t = op_time(gemm(M, 0.5), hw, dt, Efficiency.of(hw))
    compute = 2 * M * N * K / (9000e12 * 0.835 * phi(M, 538.7) * phi(N, 4430.5) * 1.0)
    bytes_ = N * K * 0.5 + M * K * 2 + M * N * 2
    memory = bytes_ / (8.0e12 * 0.418)
    assert compute > memory
    assert float(t.time_s) == pytest.approx(compute + 9.39e-6, rel=1e-9)
    # the same weights as weight-only fp4 (16-bit GEMM, as NVFP4 rows ran before) are slower
    wo = op_time(gemm(M, 0.5), hw, Dtypes.resolve(llama, "fp4", group_size=32), Efficiency.of(hw))
    assert float(wo.time_s) > 2 * float(t.time_s)


def test_weight_only_kernels_are_keyed_by_quantised_weight_dtypes():
    k = dict(kernel="k", compute=1.0, m_half=16, memory=1.0, fixed_us=1.0)
    assert set(EngineSpec(name="x", description="x", weight_only={"int4": k, "nvfp4": k}).weight_only) == {"int4", "fp4"}
    with pytest.raises(ValidationError):
        EngineSpec(name="x", description="x", weight_only={"bf16": k})
    with pytest.raises(ValidationError):
        WeightOnlyKernel(kernel="k", compute=1.2, m_half=16, memory=1.0, fixed_us=0)  # never faster than 16-bit
    for name in ("trtllm", "sglang", "default"):
        assert load_engine(name).weight_only, name


def test_a_matmul_the_checkpoint_leaves_16_bit_runs_at_the_16_bit_roof():
    """lm_head is not quantised (Dtypes.unquantized_dtypes): in an fp8 pass of Llama-3.1-8B on an
    H100 SXM (pure roofline: peaks, no efficiencies) it runs at the bf16 roof, 989.4 TFLOP/s, not the
    fp8 one, 1978.9: a prefill of 512 tokens computes logits for the last one, 2 x 4096 x 128256 FLOPs
    = 1.0507 GFLOP in 1.0619 us; the fp8 q_proj beside it at the fp8 roof."""
    from calc.cost.opcost import Pass
    from calc.cost.operators import pass_ops

    model, hw = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    dt = Dtypes.resolve(model, "fp8", "bf16")
    assert dt.compute == "fp8"
    ops = {o.name: o for o in pass_ops(model, Pass(np.float64(1.0), np.float64(512.0), np.float64(0.0), "prefill"),
                                       dt, "fused")}
    lm = op_time(ops["lm_head"], hw, dt, Efficiency())
    assert float(lm.compute_s) == pytest.approx(2 * 4096 * 128256 / 989.4e12)
    q = op_time(ops["q_proj"], hw, dt, Efficiency())
    assert float(q.compute_s) == pytest.approx(2 * 512 * 4096 * 4096 / 1978.9e12)
