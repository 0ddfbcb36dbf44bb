"""llama.cpp's kernel set: matrix-vector kernels at small batch, fp16-accumulate cuBLAS GEMMs,
and quantised GEMMs: MMQ at the SMs' integer rate, or (builds before b3216) a dequantised fp16 copy
first. Each number is worked by hand from
the profile's data sheet and the preset's fields."""

import numpy as np
import pytest

from calc import load_hardware
from calc.core.units import weight_bytes_per_param
from calc.cost.dtypes import Dtypes
from calc.cost.efficiency import Efficiency
from calc.cost.opcost import OpCost
from calc.cost.roofline import op_time, peak_for
from calc.spec.scheduler import Serving

K, N = 4096, 14336  # a Llama-3-8B gate projection
F16 = Dtypes("fp16", "fp16", "fp16")
Q4 = Dtypes("int4", "fp16", "fp16")


def _gemm(rows: int, dt: Dtypes) -> OpCost:
    return OpCost("mlp.gate", "linear", 1, linear_flops=np.float64(2.0 * rows * K * N),
                  weight_bytes=np.float64(K * N * weight_bytes_per_param(dt.weight, dt.group_size)),
                  rows=np.float64(rows), in_features=K, out_features=N)


@pytest.fixture(scope="module")
def rtx4090():
    hw = load_hardware("rtx-4090").with_engine("llama.cpp")
    return hw, Efficiency.of(hw)


def test_fp16_gemms_accumulating_in_fp16_run_at_the_geforce_rate(rtx4090):
    hw, _ = rtx4090
    # RTX 4090 data sheet: FP16 tensor 330.3 TFLOP/s with FP16 accumulate, 165.2 with FP32
    assert peak_for(hw, F16, "matmul", fp16_accumulate=True) == pytest.approx(330.3e12)
    assert peak_for(hw, F16, "matmul") == pytest.approx(165.2e12)
    # bf16 has no fp16-accumulate mode; an A100 runs both accumulations at its 312
    assert peak_for(hw, Dtypes("bf16", "bf16", "bf16"), "matmul", fp16_accumulate=True) == pytest.approx(165.2e12)
    a100 = load_hardware("a100-80gb-sxm")
    assert peak_for(a100, F16, "matmul", fp16_accumulate=True) == pytest.approx(312e12)


def test_batch_of_at_most_eight_runs_a_matrix_vector_kernel_without_tile_waste(rtx4090):
    hw, eff = rtx4090
    assert eff.gemv_max_rows == 8 and eff.gemm_m_half > 0 and eff.fp16_accumulate
    peak = 330.3e12 * eff.compute
    for rows in (1, 8):  # MMVQ: the FLOPs at the roof, no M / (M + m_half) factor
        t = op_time(_gemm(rows, F16), hw, F16, eff)
        assert float(t.compute_s) == pytest.approx(2 * rows * K * N / peak)
    t = op_time(_gemm(16, F16), hw, F16, eff)  # a GEMM tile of 16 rows runs partly empty
    assert float(t.compute_s) == pytest.approx(2 * 16 * K * N / peak * (1 + eff.gemm_m_half / 16))


def test_a_quantised_gemm_of_a_2024_build_first_writes_and_reads_an_fp16_copy(rtx4090):
    # builds before b3216 (engines.yaml llama.cpp by_version): dequantise + fp16 cuBLAS
    hw, eff = rtx4090
    eff = eff.with_serving(Serving(weight_only_kernel="dequant-cublas-2024"))
    bw = 1.008e12 * eff.memory  # RTX 4090: 1008 GB/s
    launch = eff.kernel_overhead_s  # one kernel per GEMM
    t = op_time(_gemm(512, Q4), hw, Q4, eff)
    # the dequantising kernel writes 2 B per weight and the GEMM reads them back: 4 B x K x N
    assert float(t.overhead_s) == pytest.approx(launch + 4 * K * N / bw)
    f16 = op_time(_gemm(512, F16), hw, F16, eff)
    assert float(t.compute_s) == pytest.approx(float(f16.compute_s))  # the same fp16 cuBLAS GEMM
    # decode (1 row) streams the 4-bit weights as stored: no copy
    assert float(op_time(_gemm(1, Q4), hw, Q4, eff).overhead_s) == pytest.approx(launch)


def test_a_quantised_gemm_of_a_current_build_runs_mmq_at_its_integer_rate(rtx4090):
    # from b3216 on: MMQ reads the 4-bit weights as stored (no copy) and computes at 5.3 GEMM FLOPs
    # per INT32 op (engines.yaml, reports/kernels/llamacpp_mmq.py) of the RTX 4090's 41.3 INT32
    # TOPS (128 SMs x 64 INT32 lanes x 2520 MHz x 2), ramped by the preset's small-M half
    hw, eff = rtx4090
    t = op_time(_gemm(512, Q4), hw, Q4, eff)
    assert float(t.compute_s) == pytest.approx(2 * 512 * K * N / (5.3 * 41.3e12) * (1 + eff.gemm_m_half / 512))
    assert float(t.overhead_s) == pytest.approx(eff.kernel_overhead_s)  # one launch, no dequantised copy


def test_vendor_engines_keep_their_tiles_and_accumulation(rtx4090):
    hw = load_hardware("rtx-4090").with_engine("vllm")
    eff = Efficiency.of(hw)
    assert eff.gemv_max_rows == 0 and not eff.fp16_accumulate
    t = op_time(_gemm(1, F16), hw, F16, eff)
    assert float(t.compute_s) == pytest.approx(2 * K * N / (165.2e12 * eff.compute) * (1 + eff.gemm_m_half))


def test_the_committed_mmq_rate_is_the_fit_to_the_scoreboards_geforce_rows(capsys):
    """engines.yaml's 5.3 FLOPs per INT32 op is what reports/kernels/llamacpp_mmq.py fits (--check
    exits 1 otherwise): a refit of the preset's overheads must refit it too."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "reports" / "kernels" / "llamacpp_mmq.py"
    spec = importlib.util.spec_from_file_location("llamacpp_mmq", path)
    fit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit)
    assert fit.main(["--check"]) == 0
    assert "written as 5.3" in capsys.readouterr().out



@pytest.mark.parametrize("build,per_layer", [("b2837", 34), ("b6098", 26), ("b7073", 22)])
def test_a_llama_decode_layer_launches_the_kernels_its_build_does(build, per_layer):
    """Kernels of one Llama decode layer at batch 1 (flash attention off), counted in llama.cpp's
    source at each build (engines.yaml llama.cpp, sources unfused_b2837, fused_b6098, fused_b7073):
    b2837: RMS_NORM + MUL twice (4), seven quantised matmuls as q8_1 quantise + MMVQ (14), rope q
    and k (2), attention 10 (cpy K, cpy V, K*Q and KQ*V as 3 cuBLAS kernels each, soft_max, cont),
    SiLU + MUL (2), two ADDs (2) = 34; b6098: the norms fused (2), attention 5 (set_rows K and V,
    K*Q, soft_max, KQ*V), SwiGLU one op (1): 26; b7073: gate + up + SwiGLU one mat-vec after one
    quantise (5 -> 2), rope K fused with its cache write (attention 4): 22."""
    from calc import load_model
    from calc.cost.breakdown import phase_for
    from calc.cost.setup import Setup
    from calc.spec.scheduler import resolve_serving

    hw = load_hardware("rtx-4090").with_engine("llama.cpp")
    model = load_model("llama-2-7b")
    cost, _ = phase_for(model, hw, "decode", 1, 128, Setup.of(weight_dtype="int4", group_size=32))
    eff = Efficiency.of(hw).with_serving(resolve_serving(hw.preset, hw.name, hw.reported_memory_gb, version=build))
    layer_ops = [t.op for t in cost.ops if t.op.layers >= model.num_layers]  # per-layer operators (norms: 2 a layer)
    assert sum(eff.kernels_of(op) * op.layers for op in layer_ops) == per_layer * model.num_layers


def test_a_quantised_matrix_vector_kernel_runs_at_its_integer_rate_or_the_memory_roof():
    """MMVQ (one token) on 4-bit weights: 2 x K x N GEMV FLOPs at 0.2 per INT32 op (engines.yaml
    llama.cpp gemv_int32_flops), or the weights streamed at the memory roof, whichever is slower.
    A100 80GB SXM: 19.5 INT32 TOPS, so 2 x 4096 x 14336 / (0.2 x 19.5e12) = 30.1 us, over the
    weights' 33 MB at 2.039 TB/s x the profile's memory fraction: integer-bound. RTX 4090: 41.3
    TOPS, 14.2 us, under its 1.008 TB/s stream of the same bytes: memory-bound, as before. fp16
    weights (no unpacking) and vendor engines (no matrix-vector kernel) keep the memory roof alone."""
    flops = 2.0 * K * N
    a100 = load_hardware("a100-80gb-sxm").with_engine("llama.cpp")
    eff = Efficiency.of(a100)
    assert eff.gemv_int32_flops == 0.2
    t = op_time(_gemm(1, Q4), a100, Q4, eff)
    assert float(t.compute_s) == pytest.approx(flops / (0.2 * 19.5e12))
    op = _gemm(1, Q4)  # the weights, plus the preset's small-transfer half per kernel launched
    moved = K * N * weight_bytes_per_param("int4", Q4.group_size) + eff.kernels_of(op) * eff.memory_half_bytes
    assert float(t.memory_s) == pytest.approx(moved / (2.039e12 * eff.memory))
    assert float(t.compute_s) > float(t.memory_s)  # integer-bound on the A100
    hw = load_hardware("rtx-4090").with_engine("llama.cpp")
    e4090 = Efficiency.of(hw)
    t = op_time(_gemm(1, Q4), hw, Q4, e4090)
    assert float(t.compute_s) == pytest.approx(flops / (0.2 * 41.3e12))
    assert float(t.memory_s) > float(t.compute_s)  # memory-bound on the RTX 4090
    f16 = op_time(_gemm(1, F16), a100, F16, eff)  # no unpacking: the FLOPs at the fp16 roof
    assert float(f16.compute_s) == pytest.approx(flops / (312e12 * eff.compute))
    vllm = load_hardware("a100-80gb-sxm").with_engine("vllm")
    assert Efficiency.of(vllm).gemv_int32_flops == 0.0
    q8 = Dtypes("int8", "fp16", "fp16")  # q8_0 too; and the switch is at the preset's 8 rows: 9 rows run MMQ
    assert float(op_time(_gemm(1, q8), a100, q8, eff).compute_s) == pytest.approx(flops / (0.2 * 19.5e12))
    assert float(op_time(_gemm(8, Q4), a100, Q4, eff).compute_s) == pytest.approx(8 * flops / (0.2 * 19.5e12))
    assert float(op_time(_gemm(9, Q4), a100, Q4, eff).compute_s) == pytest.approx(
        9 * flops / (5.3 * 19.5e12) * (1 + eff.gemm_m_half / 9))


def test_an_integer_matrix_vector_rate_needs_matrix_vector_kernels(tmp_path):
    """gemv_int32_flops without gemv_max_rows would price nothing: a preset file stating it alone is
    refused in one line (exit 2), as any bad preset field."""
    from typer.testing import CliRunner

    from calc.cli.app import app

    p = tmp_path / "mine.yaml"
    p.write_text("mine:\n  description: x\n  gemv_int32_flops: 0.2\n")
    r = CliRunner().invoke(app, ["estimate", "--model", "llama-3-8b", "--hardware", "rtx-4090", "--engine", str(p)])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and "gemv_max_rows" in r.output


def test_llama_cpp_runs_its_16_bit_gemms_in_fp16_whatever_the_checkpoint():
    """Llama 3 ships bf16; llama.cpp's CUDA backend converts its dequantised and fp16 GEMMs to fp16
    for cuBLAS (engines.yaml llama.cpp gemm_dtype: fp16), so a pass under it defaults to fp16
    GEMMs, which on an RTX 4090 accumulate at 330.3 TFLOP/s, not bf16's 165.2; a vendor engine keeps
    the model's bf16, and --compute-dtype or fp8 weights still decide where given."""
    from calc.cost.setup import Setup
    from calc.spec.catalog import load_model

    model = load_model("llama-3-8b")
    assert model.serving_dtype == "bf16"
    hw = load_hardware("rtx-4090")
    ours = Setup.of(weight_dtype="int4").resolve(model, hw.with_engine("llama.cpp")).dtypes
    assert ours.compute == "fp16"
    assert peak_for(hw, ours, "matmul", fp16_accumulate=True) == pytest.approx(330.3e12)
    assert Setup.of(weight_dtype="int4").resolve(model, hw.with_engine("vllm")).dtypes.compute == "bf16"
    assert Setup.of(weight_dtype="int4", compute_dtype="bf16").resolve(model, hw.with_engine("llama.cpp")).dtypes.compute == "bf16"
    assert Setup.of(weight_dtype="fp8").resolve(model, hw.with_engine("llama.cpp")).dtypes.compute == "fp8"
    # unquantised weights compute as stored (ggml-cuda's bf16 weights take their own bf16 cuBLAS path)
    for w in ("bf16", "fp16"):
        assert Setup.of(weight_dtype=w).resolve(model, hw.with_engine("llama.cpp")).dtypes.compute == w
    assert Setup.of().resolve(model, hw.with_engine("llama.cpp")).dtypes.compute == "bf16"  # the model's own weights
