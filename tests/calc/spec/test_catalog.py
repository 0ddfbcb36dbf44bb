"""Catalog files load, cite a source for every number, and bad specs fail with one clear SpecError."""

import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calc import SpecError, load_hardware, load_model
from calc.spec.catalog import HARDWARE_DIR, MODEL_DIR, build, model_catalog
from calc.spec.hardware import HardwareSpec
from calc.spec.model import ModelSpec

MODEL_FILES = sorted(MODEL_DIR.glob("*.yaml"))
HARDWARE_FILES = sorted(HARDWARE_DIR.glob("*.yaml"))
NUMBER = re.compile(r"^\s*-?\s*[\w.]+:\s*-?[0-9][0-9_.eE+-]*\s*(#.*)?$")


@pytest.mark.parametrize("path", MODEL_FILES + HARDWARE_FILES, ids=lambda p: p.name)
def test_every_number_cites_a_source(path: Path):
    data = yaml.safe_load(path.read_text())
    assert data["name"] == path.stem
    keys = set(data.get("sources", {}))
    assert keys, f"{path.name} has no sources mapping"
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.lstrip().startswith("#") or not NUMBER.match(line):
            continue
        comment = line.split("#", 1)[1] if "#" in line else ""
        m = re.search(r"source:\s*([\w-]+)", comment)
        assert m, f"{path.name}:{n}: number without '# source: <key>': {line.strip()}"
        cited = set(re.findall(r"[\w-]+", comment.split("source:", 1)[1])) & keys
        assert cited, f"{path.name}:{n}: source key not in sources: {line.strip()}"


@pytest.mark.parametrize("path", MODEL_FILES, ids=lambda p: p.name)
def test_model_files_load(path):
    spec = load_model(path.stem)
    assert spec.params_total > 0 and spec.params_active <= spec.params_total


@pytest.mark.parametrize("path", HARDWARE_FILES, ids=lambda p: p.name)
def test_hardware_files_load(path):
    hw = load_hardware(path.stem)
    assert hw.memory_bytes > 0 and hw.peak_flops_per_s("bf16") > 0


def test_extra_catalog_dirs_from_environment(tmp_path, monkeypatch):
    src = yaml.safe_load((MODEL_DIR / "llama-3.1-8b.yaml").read_text())
    src["name"] = "my-llama"
    (tmp_path / "my-llama.yaml").write_text(yaml.safe_dump(src))
    monkeypatch.setenv("ROOFLINE_MODEL_PATH", str(tmp_path))
    assert "my-llama" in model_catalog()
    assert load_model("my-llama").params_total == load_model("llama-3.1-8b").params_total




@pytest.mark.parametrize("folder, problem", [
    ("p" * 300, "a name in the path is longer than 255 bytes"),  # ENAMETOOLONG out of is_dir (fuzz, issue 25)
    ("loop", "cannot look it up (Too many levels of symbolic links)"),  # ELOOP
])
def test_an_unlookupable_catalog_folder_is_one_line_naming_the_variable(tmp_path, monkeypatch, folder, problem):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    monkeypatch.setenv("ROOFLINE_HARDWARE_PATH", str(tmp_path / folder))
    with pytest.raises(SpecError) as info:
        load_hardware("h100-sxm")
    assert str(info.value).startswith("ROOFLINE_HARDWARE_PATH: ") and problem in str(info.value)
    monkeypatch.setenv("ROOFLINE_HARDWARE_PATH", str(tmp_path / "missing"))  # a missing one is skipped, as PATH does
    assert load_hardware("h100-sxm").name == "h100-sxm"
BASE = {"name": "m", "num_layers": 2, "hidden_size": 64, "vocab_size": 100, "max_context": 128,
        "attention": {"num_heads": 4, "num_kv_heads": 2}, "mlp": {"kind": "gated", "intermediate_size": 128}}


@pytest.mark.parametrize("change,field,problem", [
    ({"num_layers": -2}, "num_layers", "greater than 0"),
    ({"hidden_size": None}, "hidden_size", ""),
    ({"attention": {"num_heads": 4, "num_kv_heads": 3}}, "attention", "does not divide"),
    ({"attention": {"num_heads": 5, "num_kv_heads": 5}}, None, "does not divide hidden_size"),
    ({"mlp": {"kind": "gated"}}, "mlp", "intermediate_size"),
    ({"dtype": "float7"}, "dtype", "unknown dtype"),
    ({"num_layerz": 3}, "num_layerz", "unknown key"),
    ({"moe": {"num_experts": 4, "experts_per_token": 8, "expert_intermediate_size": 8}}, "moe", "exceeds"),
])
def test_bad_model_spec_names_field(change, field, problem):
    data = {**BASE, **change}
    data = {k: v for k, v in data.items() if v is not None}
    with pytest.raises(SpecError) as err:
        build(ModelSpec, data, "m.yaml")
    msg = str(err.value)
    assert msg.startswith("m.yaml")
    if field:
        assert field in msg
    assert problem in msg


def test_malformed_and_unreadable_files(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(SpecError, match="malformed YAML"):
        load_model(str(bad))
    lst = tmp_path / "list.yaml"
    lst.write_text("- 1\n- 2\n")
    with pytest.raises(SpecError, match="mapping"):
        load_hardware(str(lst))
    d = tmp_path / "dir.yaml"
    d.mkdir()
    with pytest.raises(SpecError, match="cannot read"):
        load_hardware(str(d))
    with pytest.raises(SpecError, match="did you mean"):
        load_hardware("h100_sxm")


def test_hardware_negative_bandwidth(tmp_path):
    data = yaml.safe_load((HARDWARE_DIR / "h100-sxm.yaml").read_text())
    data["memory_bandwidth_tb_s"] = -1
    with pytest.raises(SpecError, match="memory_bandwidth_tb_s"):
        build(HardwareSpec, data, "h.yaml")
    data["memory_bandwidth_tb_s"] = 1
    data["peak_tflops"] = {"bf17": 3}
    with pytest.raises(SpecError, match="peak_tflops"):
        build(HardwareSpec, data, "h.yaml")


_leaf = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**6), st.floats(allow_nan=True),
                  st.text(max_size=8), st.lists(st.integers(-3, 3), max_size=3))
_value = st.recursive(_leaf, lambda c: st.dictionaries(st.text(max_size=6), c, max_size=4), max_leaves=10)
_keys = st.sampled_from(list(BASE) + ["moe", "dtype", "tie_embeddings", "norm", "bogus"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_keys, _value, max_size=8), st.dictionaries(st.sampled_from(list(BASE)), _value, max_size=3))
def test_loading_random_model_data_raises_only_spec_error(data, override):
    for candidate in (data, {**BASE, **override}):
        try:
            spec = build(ModelSpec, candidate, "fuzz.yaml")
        except SpecError as exc:
            assert str(exc).startswith("fuzz.yaml")
        else:
            assert spec.params_total > 0


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_loading_random_yaml_text_raises_only_spec_error(tmp_path_factory, text):
    p = tmp_path_factory.mktemp("fz") / "x.yaml"
    p.write_text(text)
    for loader in (load_model, load_hardware):
        try:
            loader(str(p))
        except SpecError:
            pass


def test_load_spec_tells_model_from_hardware_by_schema(tmp_path):
    from calc.spec.catalog import load_spec
    from calc.spec.hardware import HardwareSpec
    from calc.spec.model import ModelSpec

    assert isinstance(load_spec("l4"), HardwareSpec) and isinstance(load_spec("gpt2"), ModelSpec)
    assert isinstance(load_spec(str(HARDWARE_DIR / "h100-sxm.yaml")), HardwareSpec)
    assert isinstance(load_spec(str(MODEL_DIR / "gpt2.yaml")), ModelSpec)
    near_hw = tmp_path / "x.yaml"
    near_hw.write_text("name: x\nkind: gpu\nmemory_gb: 80\nmemory_bandwidth_tb_s: 3\n")
    with pytest.raises(SpecError, match="peak_tflops"):  # closer to hardware: its missing field is named
        load_spec(str(near_hw))
