"""The regime of a prediction: metric family, load level, precision class, GPU family; and which bands apply."""

import pytest

from calc.spec.bands import (
    BandTable,
    bands_for,
    gpu_family,
    is_rate,
    load_level,
    metric_family,
    precision_class,
)
from calc.spec.catalog import load_hardware


@pytest.mark.parametrize("metric, family", [
    ("ttft_s", "ttft"), ("ttft_p99_s", "ttft"), ("prefill_tokens_per_s", "ttft"), ("tpot_s", "decode"),
    ("itl_mean_s", "decode"), ("decode_tokens_per_s", "decode"), ("e2e_p50_s", "e2e"),
    ("output_tokens_per_s", "throughput"), ("output_tokens_per_s_per_gpu", "throughput"),
    ("requests_per_s", "throughput"), ("kv_cache_bytes", None)])
def test_metric_family(metric, family):
    assert metric_family(metric) == family


def test_rates_and_times():
    assert is_rate("output_tokens_per_s_per_gpu") and is_rate("requests_per_s") and not is_rate("ttft_p99_s")


def test_load_levels_at_their_edges():
    assert load_level(batch=8) == "pass"
    assert [load_level(in_flight=c) for c in (1, 4, 5, 32, 33)] == ["low", "low", "medium", "medium", "high"]
    assert load_level() == "saturated"


@pytest.mark.parametrize("weight, compute, cls", [
    ("fp8", "fp8", "fp8"), ("fp8", None, "fp8"), ("bf16", "fp8", "fp8"), ("fp4", None, "fp4"), ("fp4", "bf16", "fp4"),
    ("int4", None, "int-weight"), ("int8", "fp16", "int-weight"), ("bf16", None, "16bit"), ("fp16", "fp16", "16bit"),
    ("fp32", "fp32", "fp32")])
def test_precision_class(weight, compute, cls):
    assert precision_class(weight, compute) == cls


def test_gpu_family():
    assert gpu_family("h200") == "hopper" and gpu_family("mi300x") == "cdna3" and gpu_family("my-gpu") == "other"


def test_a_cpu_profile_without_its_own_bands_gets_none():
    table, why = bands_for(load_hardware("cpu-generic-2core"))
    assert table is None and "without bands of its own" in why
    own = load_hardware("cpu-generic-2core").model_copy(update={"bands": BandTable()})
    assert bands_for(own)[0] is own.bands
