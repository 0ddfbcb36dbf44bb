"""The validation boundary: wrong types, out-of-range and non-finite numbers are one SpecError."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from calc.core.errors import SpecError
from calc.spec.catalog import load_hardware, load_model
from calc.spec.hf import spec_from_hf_config

ROOT = Path(__file__).resolve().parents[3]
HF = ROOT / "tests" / "fixtures" / "hf"


def hf(name: str, **changes) -> dict:
    cfg = json.loads((HF / name / "config.json").read_text())
    target = cfg.get("text_config", cfg) if "text_config" in cfg else cfg
    for k, v in changes.items():
        target[k] = v
    return cfg


@pytest.mark.parametrize("name,changes,field,problem", [
    ("gemma-2-9b", {"num_hidden_layers": 42.0}, "num_hidden_layers", "whole number"),
    ("gemma-2-9b", {"num_hidden_layers": "42"}, "num_hidden_layers", "whole number"),
    ("gemma-2-9b", {"layer_types": 7}, "layer_types", "list of strings"),
    ("gemma-2-9b", {"layer_types": "sliding_attention"}, "layer_types", "list of strings"),
    ("gemma-2-9b", {"layer_types": ["sliding_attention"] * 3}, "layer_types", "3 entries for 42 layers"),
    ("gemma-3-12b", {"sliding_window_pattern": "6"}, "sliding_window_pattern", "whole number"),
    ("gemma-3-12b", {"sliding_window_pattern": -1}, "sliding_window_pattern", "at least 1"),
    ("gemma-3-12b", {"sliding_window_pattern": 1.5}, "sliding_window_pattern", "whole number"),
    ("qwen3-30b-a3b", {"mlp_only_layers": 5}, "mlp_only_layers", "layer indices"),
    ("qwen3-30b-a3b", {"decoder_sparse_step": "1"}, "decoder_sparse_step", "whole number"),
    ("qwen2.5-7b", {"max_window_layers": "x"}, "max_window_layers", "whole number"),
    ("llama-3.1-8b", {"attention_bias": "no"}, "attention_bias", "true or false"),
    ("llama-3.1-8b", {"architectures": [["LlamaForCausalLM"]]}, "architectures", "list of class names"),
    ("llama-3.1-8b", {"num_hidden_layers": 10**9}, "num_hidden_layers", "out of range"),
    ("llama-3.1-8b", {"vocab_size": 10**19}, "vocab_size", "out of range"),
])
def test_hf_fields_strict(name, changes, field, problem):
    with pytest.raises(SpecError) as err:
        spec_from_hf_config(hf(name, **changes), "config.json")
    assert field in str(err.value) and problem in str(err.value)


def test_hf_json_nested_too_deep(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(SpecError, match="nested too deep|malformed JSON"):
        load_model(str(p))


def _model_yaml(tmp_path, **changes) -> Path:
    text = (ROOT / "model_configs" / "llama-3.1-8b.yaml").read_text()
    lines = [ln for ln in text.splitlines() if not any(ln.startswith(f"{k}:") for k in changes)]
    lines += [f"{k}: {v}" for k, v in changes.items()]
    p = tmp_path / "m.yaml"
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.mark.parametrize("key,value,problem", [
    ("num_layers", "1.0e+9", "less than or equal to 4096"),
    ("num_layers", str(2**63), "less than or equal to 4096"),
    ("vocab_size", str(10**19), "less than or equal"),
    ("num_layers", "1" * 5000, "malformed YAML"),
])
def test_model_yaml_ranges(tmp_path, key, value, problem):
    with pytest.raises(SpecError) as err:
        load_model(str(_model_yaml(tmp_path, **{key: value})))
    assert problem in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("key,value", [("memory_gb", ".inf"), ("memory_bandwidth_tb_s", ".nan"),
                                       ("memory_gb", "1.0e+300")])
def test_hardware_yaml_finite_and_in_range(tmp_path, key, value):
    text = (ROOT / "hardware_profiles" / "h100-sxm.yaml").read_text()
    lines = [ln for ln in text.splitlines() if not ln.startswith(f"{key}:")] + [f"{key}: {value}"]
    p = tmp_path / "h.yaml"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecError, match=key):
        load_hardware(str(p))


def test_peak_inf_refused(tmp_path):
    text = (ROOT / "hardware_profiles" / "h100-sxm.yaml").read_text()
    import yaml

    data = yaml.safe_load(text)
    data["peak_tflops"] = {**data["peak_tflops"], "bf16": float("inf")}
    p = tmp_path / "h.yaml"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match="peak_tflops"):
        load_hardware(str(p))


def test_duplicate_yaml_key_refused(tmp_path):
    p = _model_yaml(tmp_path)
    p.write_text(p.read_text() + "num_layers: 32\n")
    with pytest.raises(SpecError, match="duplicate key 'num_layers'"):
        load_model(str(p))


def test_untouched_copies_still_load():
    for name in ("llama-3.1-8b", "gemma-3-12b", "qwen3-30b-a3b", "deepseek-v3"):
        cfg = copy.deepcopy(hf(name))
        assert spec_from_hf_config(cfg, "config.json").num_layers > 0


WL = """\
name: t
model: llama-3.1-8b
hardware: [h100-sxm]
arrival: {rate_per_s: 2}
prompt_len: {dist: fixed, value: 100}
output_len: {dist: fixed, value: 10}
"""


@pytest.mark.parametrize("extra,field", [
    ("seed: -1\n", "seed"),
    ("requests: 1.0e+9\n", "requests"),
    ("max_batch: [1.0e+9]\n", "max_batch.0"),
    ("prices: {h100-sxm: .inf}\n", "prices.h100-sxm"),
    ("slo: {ttft_p99_s: .inf}\n", "slo.ttft_p99_s"),
    ("serving: {block_size: 1000000000}\n", "serving.block_size"),
    ("dtypes: {weight: fp7}\n", "dtypes.weight"),
])
def test_workload_numbers_and_fields(tmp_path, extra, field):
    from calc.spec.workload import load_workload

    p = tmp_path / "w.yaml"
    p.write_text(WL + extra)
    with pytest.raises(SpecError) as err:
        load_workload(p)
    assert str(err.value).startswith(f"{p}: {field}: ")


@pytest.mark.parametrize("body,problem", [
    ("arrival: {rate_per_s: .inf}\n", "finite"),
    ("prompt_len: {dist: normal, mean: 100, std: 1.0e+30}\n", "less than or equal"),
])
def test_workload_replaced_keys(tmp_path, body, problem):
    from calc.spec.workload import load_workload

    key = body.split(":")[0]
    text = "".join(ln + "\n" for ln in WL.splitlines() if not ln.startswith(key)) + body
    p = tmp_path / "w.yaml"
    p.write_text(text)
    with pytest.raises(SpecError, match=problem):
        load_workload(p)


def test_trace_cell_out_of_range(tmp_path):
    from calc.spec.workload import read_trace

    p = tmp_path / "t.csv"
    p.write_text("prompt_len,output_len\n1e20,5\n")
    with pytest.raises(SpecError, match="line 2"):
        read_trace(p)


def test_booleans_are_not_numbers_in_any_spec(tmp_path):
    """pydantic's lax mode would read `true` as 1 (tp: [true] searched TP 1; k: true drafted one token)."""
    import yaml

    from calc.spec.kernel_tables import KernelTable
    from calc.spec.workload import Workload
    from calc.spec.yamlio import build

    root = Path(__file__).resolve().parents[3]
    base = yaml.safe_load((root / "reports/plans/workloads/chat-llama-3.1-8b.yaml").read_text())
    for key, value in [("tp", [True]), ("max_gpus", True), ("requests", False), ("prices", {"h100-sxm": True}),
                       ("prefix_cache", {"shared_tokens": True}),
                       ("speculative", {"draft": "llama-3.2-1b", "k": True, "acceptance": 0.7}),
                       ("speculative", {"draft": "llama-3.2-1b", "k": 4, "acceptance": False})]:
        with pytest.raises(SpecError, match="true/false where a number belongs"):
            build(Workload, {**base, key: value}, "w.yaml")
    build(Workload, {**base, "prefix_cache": {"shared_tokens": 10, "enabled": False}}, "w.yaml")  # a flag stays a flag
    table = {"format": "roofline-kernels/1", "kernel": "stream", "dtype": "bf16", "op": "add",
             "provenance": {"device": "cpu", "source": "hand-written", "date": "2026-12-01"}, "axes": {"bytes": [1000, 2000]},
             "seconds": [1e-6, 2e-6]}
    build(KernelTable, table, "t.yaml")
    with pytest.raises(SpecError, match="seconds: true/false"):
        build(KernelTable, {**table, "seconds": [1e-6, True]}, "t.yaml")


@pytest.mark.parametrize("pool", [{"max_batch": [0]}, {"max_batch": [-5]}, {"max_batch": [10**9]},
                                  {"tp": [0]}, {"tp": [-1]}, {"tp": [1_000_000]}, {"max_batch": list(range(1, 20_001))}])
def test_disaggregated_pools_are_validated(pool):
    """Pool values were unchecked: max_batch 0 overflowed, -5 raised ValueError, 1e9 blew memory,
    tp 0/-1/1e6 were skipped silently and 20,000 max_batch values hung the search."""
    import yaml

    from calc.spec.workload import Workload
    from calc.spec.yamlio import build

    root = Path(__file__).resolve().parents[3]
    base = yaml.safe_load((root / "reports/plans/workloads/disagg-wins-long-prompts-llama-3.1-8b.yaml").read_text())
    with pytest.raises(SpecError, match="decode"):
        build(Workload, {**base, "disaggregation": {**base["disaggregation"], "decode": pool}}, "w.yaml")


@pytest.mark.parametrize("name", ["x" * 201, "two\nlines", "tab\there", ""])
def test_workload_names_are_one_short_line(name):
    import yaml

    from calc.spec.workload import Workload
    from calc.spec.yamlio import build

    root = Path(__file__).resolve().parents[3]
    base = yaml.safe_load((root / "reports/plans/workloads/chat-llama-3.1-8b.yaml").read_text())
    with pytest.raises(SpecError, match="name"):
        build(Workload, {**base, "name": name}, "w.yaml")


@pytest.mark.parametrize("text", [
    "a: " + "[" * 100_000 + "]" * 100_000,  # flow nesting: more brackets than the C composer may see
    "".join(f"{' ' * i}k:\n" for i in range(700)) + " " * 700 + "k: 1\n",  # block nesting: a deep indent (256 KB allows ~700)
], ids=["flow", "block"])
def test_yaml_nested_too_deep_is_one_line(tmp_path, text):
    # libyaml's composer would recurse without a limit (a crash); such text takes the Python loader
    from calc.spec.yamlio import _shallow, read_yaml

    assert not _shallow(text)
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match="nested too deep") as err:
        read_yaml(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_spec_files_are_shallow_and_read_alike_by_both_loaders():
    import yaml

    from calc.spec.yamlio import _CLoader, _PyLoader, _shallow

    root = Path(__file__).resolve().parents[3]
    files = [root / "calc" / "data" / "engines.yaml", *sorted((root / "hardware_profiles").glob("*.yaml"))[:5],
             *sorted((root / "model_configs").glob("*.yaml"))[:5]]
    for f in files:
        text = f.read_text()
        assert _shallow(text), f
        assert yaml.load(text, Loader=_CLoader) == yaml.load(text, Loader=_PyLoader), f  # noqa: S506
