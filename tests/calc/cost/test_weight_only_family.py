"""Weight-only GEMM families by engine version (EngineSpec.weight_only_kernels, chosen by
Serving.weight_only_kernel, e.g. by a by_version rule), and engine versions reaching every path:
per-pass rows (calc.accuracy.predict), compare's scenarios and llama-bench's build numbers.

Golden times are op_time's efficiency-model equation written out with the numbers the test
states (a synthetic preset: compute fraction, dequantisation bytes), never read back from the
code under test."""

import json
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
from calc.spec.scheduler import Serving, VersionRule, resolve_serving
from calc.spec.versions import at_most, version_key

BENCH = Path(__file__).resolve().parents[2] / "fixtures" / "bench"
NEW = {"kernel": "new", "compute": 0.5, "m_half": 0, "memory": 1.0, "fixed_us": 0}
OLD = {"kernel": "old", "compute": 1.0, "m_half": 0, "memory": 1.0, "fixed_us": 0, "dequant_bytes": 4}


def _preset(**extra) -> EngineSpec:
    """A preset whose own int4 GEMM runs at half the 16-bit compute fraction, whose 'old' family
    dequantises (4 B per weight) and runs at the full fraction, chosen before build b3216."""
    body = {"name": "t", "description": "t", "compute_scale": 1.0, "weight_only": {"int4": NEW},
            "weight_only_kernels": {"old": {"int4": OLD}},
            "by_version": [{"before": "b3216", "set": {"weight_only_kernel": "old"}}]}
    return EngineSpec(**(body | extra))


def _gemm(rows=512.0):
    """One 4096 x 4096 int4 GEMM of ``rows`` tokens: 2 rows 4096^2 FLOPs; its int4 weights (0.5 B
    each plus one fp16 scale per 128: 0.5 + 2/128 B) as its only bytes."""
    w = 4096 * 4096 * (0.5 + 2 / 128)
    return OpCost("mlp.up", "linear", 1, linear_flops=np.float64(2 * rows * 4096 * 4096), weight_bytes=np.float64(w),
                  rows=np.float64(rows), in_features=4096.0, out_features=4096.0, kernels=1.0)


def test_llama_cpp_builds_and_bounds_read_as_versions():
    assert version_key("b3216") == version_key("3216") and version_key("b2837") < version_key("b3216")
    assert version_key("<=b3061 (May 2024)") == version_key("b3061") and at_most("<=b3061 (May 2024)")
    assert not at_most("b3061")
    # a version known as at most b3061 holds a rule before b3216, never one with a since
    assert VersionRule(before="b3216", set={}).applies("<=b3061 (May 2024)")
    assert not VersionRule(since="b2000", before="b3216", set={}).applies("<=b3061")
    assert not VersionRule(before="b3216", set={}).applies("<=b3216") and not VersionRule(before="b3216", set={}).applies("b3216")


def test_a_version_rule_picks_the_weight_only_family():
    hw = load_hardware("rtx-4090")
    preset = _preset()
    old = resolve_serving(preset, hw.name, hw.reported_memory_gb, version="b2837")
    new = resolve_serving(preset, hw.name, hw.reported_memory_gb, version="b3216")
    assert (old.weight_only_kernel, new.weight_only_kernel) == ("old", None)

    dt = Dtypes.resolve(load_model("llama-3.1-8b"), "int4", group_size=128)
    base = Efficiency.of(hw.with_engine(preset))
    op = _gemm()
    t_new, t_old = (op_time(op, hw, dt, base.with_serving(s)) for s in (new, old))
    peak = hw.peak_tflops[dt.compute] * 1e12  # the preset accumulates in fp32 (no fp16_accumulate)
    e = hw.efficiency
    # compute: FLOPs / (16-bit peak x the profile's fraction x the family's); the old family adds
    # 4 B per weight (weights = bytes / 0.515625 B each) at the profile's bandwidth fraction
    assert float(t_new.compute_s) == pytest.approx(2 * 512 * 4096**2 / (peak * e.compute * 0.5), rel=1e-9)
    assert float(t_old.compute_s) == pytest.approx(2 * 512 * 4096**2 / (peak * e.compute * 1.0), rel=1e-9)
    extra = 4 * 4096 * 4096 / (hw.memory_bandwidth_bytes_per_s * e.memory)
    assert float(t_old.overhead_s - t_new.overhead_s) == pytest.approx(extra, rel=1e-9)


def test_an_unknown_family_is_refused_in_one_line():
    with pytest.raises(ValueError, match="weight_only_kernel gone is not one of weight_only_kernels"):
        _preset(by_version=[{"before": "b3216", "set": {"weight_only_kernel": "gone"}}])
    hw = load_hardware("rtx-4090")
    with pytest.raises(SpecError, match="weight_only_kernel.*'gone' is not one of the engine's weight_only_kernels"):
        Efficiency.of(hw.with_engine(_preset())).with_serving(Serving(weight_only_kernel="gone"))


def test_per_pass_rows_run_their_versions_kernels():
    """A published row's engine_version reaches its prediction: the same row predicts the old
    family's time at b2837 and at a version known only as at most b3061, the preset's own at
    b3216 and without a version."""
    from calc.accuracy.predict import model_metric
    from calc.accuracy.rows import Row

    preset = _preset()

    def at(version):
        return at_preset(preset, version)

    def at_preset(p, version):
        row = Row(id="r", publisher="p", engine="llama.cpp", preset="t", model="llama-3.1-8b", hardware="rtx-4090",
                  weight_dtype="int4", kv_dtype=None, compute_dtype=None, gpus=1, tp=1, pp=1, batch=1,
                  concurrency=None, prompt_len=512, output_len=1, metric="prefill_tokens_per_s", value=1.0,
                  engine_version=version)
        return model_metric(row, p)

    old, new = at("b2837"), at("b3216")
    assert at("<=b3061 (May 2024)") == old
    assert at("") == new
    # b2837's prediction is the one a preset whose own table is the old family gives
    only_old = _preset(weight_only={"int4": OLD}, weight_only_kernels={}, by_version=[])
    assert old == pytest.approx(at_preset(only_old, "b2837")) and old != new


def test_llama_bench_build_number_is_the_runs_version(tmp_path):
    """llama-bench writes build_number: compare runs that build's kernels (engines.yaml llama.cpp
    by_version), unless --engine-version says otherwise."""
    from calc.accuracy.compare import compare_files
    from calc.accuracy.scenario import Conditions

    rows = json.loads((BENCH / "llama-bench.json").read_text())
    for r in rows:
        r["build_number"] = 2837
    f = tmp_path / "lb.json"
    f.write_text(json.dumps(rows))
    results, failures, _ = compare_files([f], Conditions(model="llama-3-8b", hardware="rtx-4090"))
    assert not failures
    llama = load_engine("llama.cpp")
    rule = next(r for r in llama.by_version if "weight_only_kernel" in r.set)
    assert all(x.scenario.engine_version == "b2837" for x in results)
    assert all(x.scenario.serving.weight_only_kernel == rule.set["weight_only_kernel"] for x in results)
    results, _, _ = compare_files([f], Conditions(model="llama-3-8b", hardware="rtx-4090", engine_version="b9000"))
    assert all(x.scenario.serving.weight_only_kernel is None for x in results)


def test_an_int32_bound_kernel_runs_at_its_flops_per_int32_op():
    """A weight-only kernel with peak int32 (llama.cpp's MMQ) computes at ``compute`` GEMM FLOPs
    per INT32 op of the profile's int32_tops, whatever the tensor peak and the profile's GEMM
    fraction; on a profile that states no INT32 peak, at half its FP32 peak (the Turing-to-Hopper
    ratio of INT32 to FP32 lanes), never at the tensor peak."""
    mmq = {"kernel": "mmq", "peak": "int32", "compute": 4.0, "m_half": 0, "memory": 1.0, "fixed_us": 0}
    preset = _preset(weight_only={"int4": mmq}, weight_only_kernels={}, by_version=[])
    dt = Dtypes.resolve(load_model("llama-3.1-8b"), "int4", group_size=128)
    op = _gemm()
    hw = load_hardware("rtx-4090").model_copy(update={"int32_tops": 41.3})
    t = op_time(op, hw, dt, Efficiency.of(hw.with_engine(preset)))
    assert float(t.compute_s) == pytest.approx(2 * 512 * 4096**2 / (4.0 * 41.3e12), rel=1e-9)
    bare = load_hardware("rtx-4090").model_copy(update={"int32_tops": None})
    t = op_time(op, bare, dt, Efficiency.of(bare.with_engine(preset)))
    # RTX 4090 FP32 82.58 TFLOP/s (profile, data sheet): 41.29 assumed INT32 TOPS
    assert float(t.compute_s) == pytest.approx(2 * 512 * 4096**2 / (4.0 * 82.58e12 / 2), rel=1e-9)
    with pytest.raises(ValueError, match="compute 4 > 1: a fraction of the 16-bit GEMM"):
        _preset(weight_only={"int4": mmq | {"peak": "matmul"}})


def test_a_build_number_of_zero_is_no_version_and_a_negative_one_is_refused(tmp_path):
    # llama.cpp writes build 0 when it was built without git (cmake/build-info.cmake): unknown, so
    # the preset's own (current) kernels; a negative one is a broken file, said in one line
    from calc.accuracy.compare import compare_files
    from calc.accuracy.scenario import Conditions

    rows = json.loads((BENCH / "llama-bench.json").read_text())
    for number, ok in ((0, True), (-5, False)):
        f = tmp_path / f"lb{number}.json"
        f.write_text(json.dumps([dict(r, build_number=number) for r in rows]))
        results, failures, _ = compare_files([f], Conditions(model="llama-3-8b", hardware="rtx-4090"))
        if ok:
            assert not failures and all(x.scenario.engine_version is None for x in results)
        else:
            assert not results and "build_number: -5 is out of range" in str(failures[0])



def test_a_max_load_row_runs_its_versions_kernel_family():
    """A max-load row (continuous batching, no fixed batch) takes its version's weight-only family
    into its steady state too: b2837 predicts what a preset whose own table is the old family does."""
    from calc.accuracy.predict import model_metric
    from calc.accuracy.rows import Row

    def at(p, version):
        row = Row(id="r", publisher="p", engine="llama.cpp", preset="t", model="llama-3.1-8b", hardware="rtx-4090",
                  weight_dtype="int4", kv_dtype=None, compute_dtype=None, gpus=1, tp=1, pp=1, batch=None,
                  concurrency=64, prompt_len=2048, output_len=128, metric="output_tokens_per_s", value=1.0,
                  engine_version=version)
        return model_metric(row, p)

    only_old = _preset(weight_only={"int4": OLD}, weight_only_kernels={}, by_version=[])
    assert at(_preset(), "b2837") == pytest.approx(at(only_old, "b2837")) != at(_preset(), "b3216")


def test_a_rules_bound_is_a_version_not_an_upper_bound():
    with pytest.raises(ValueError, match="a rule's bound is a version, not an upper bound"):
        VersionRule(before="<=b3216", set={})


def test_a_version_rule_picks_the_kernel_set_and_an_unknown_one_is_refused():
    """Serving.kernel_set (a by_version rule) picks the preset's kernels per operator: a norm of 2
    kernels before the fusion, 1 after, and each kernel pays the preset's launch cost."""
    body = {"kernels": {"norms": 1}, "kernel_sets": {"unfused": {"norms": 2}},
            "by_version": [{"before": "b5965", "set": {"kernel_set": "unfused"}}]}
    preset = _preset(**body)
    hw = load_hardware("rtx-4090")
    eff = Efficiency.of(hw.with_engine(preset))
    norm = OpCost("norms", "norm", 2, other_flops=np.float64(4096.0), act_read_bytes=np.float64(8192.0))
    old = eff.with_serving(resolve_serving(preset, hw.name, hw.reported_memory_gb, version="b2837"))
    new = eff.with_serving(resolve_serving(preset, hw.name, hw.reported_memory_gb, version="b7073"))
    assert (old.kernels_of(norm), new.kernels_of(norm)) == (2.0, 1.0)
    with pytest.raises(ValueError, match="kernel_set gone is not one of kernel_sets"):
        _preset(**body | {"by_version": [{"before": "b5965", "set": {"kernel_set": "gone"}}]})
