"""Kernel tables as data: schema checks, loading beside a profile, one-line errors."""

import pytest
import yaml
from typer.testing import CliRunner

from calc.cli.app import app
from calc.core.errors import SpecError
from calc.spec.catalog import load_hardware
from calc.spec.kernel_tables import load_kernel_table

TABLE = {"format": "roofline-kernels/1", "kernel": "stream", "dtype": "fp32", "op": "add",
         "provenance": {"device": "cpu", "threads": 2, "date": "2026-12-01", "source": "test"},
         "axes": {"bytes": [1000, 1000000]}, "seconds": [1e-6, 1e-4]}
PROFILE = {"name": "p", "kind": "cpu", "memory_gb": 1, "memory_bandwidth_tb_s": 0.02, "peak_tflops": {"fp32": 0.1},
           "kernel_tables": ["kernels/add.yaml"]}


def write(tmp_path, table=TABLE, profile=PROFILE):
    (tmp_path / "kernels").mkdir(exist_ok=True)
    (tmp_path / "kernels" / "add.yaml").write_text(yaml.safe_dump(table))
    (tmp_path / "profile.yaml").write_text(yaml.safe_dump(profile))
    return tmp_path / "profile.yaml"


def test_profile_loads_its_tables_relative_to_its_folder(tmp_path):
    hw = load_hardware(str(write(tmp_path)))
    assert len(hw.kernel_set) == 1
    assert hw.kernel_set.find("stream", "fp32", "add").axes["bytes"] == [1000, 1000000]
    assert hw.kernel_set.find("stream", "bf16", "add") is None


@pytest.mark.parametrize("change, words", [
    ({"seconds": [1e-6]}, "1 values for a grid of 2 cells"),
    ({"axes": {"bytes": [1000, 10]}}, "increase strictly"),
    ({"axes": {"M": [1]}, "seconds": [1.0]}, "not 'M'"),
    ({"seconds": [1e-6, -1.0]}, "must be a number from 1e-09"),
    ({"op": "gelu"}, "op"),
    ({"format": "other/2"}, "format"),
])
def test_bad_tables_are_spec_errors(tmp_path, change, words):
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({**TABLE, **change}))
    with pytest.raises(SpecError) as exc:
        load_kernel_table(path)
    assert words in str(exc.value)


def test_mismatched_or_missing_tables_are_spec_errors(tmp_path):
    gpu = {**PROFILE, "kind": "gpu"}
    with pytest.raises(SpecError, match="profile is a gpu"):
        load_hardware(str(write(tmp_path, profile=gpu)))
    twice = {**PROFILE, "name": "q", "kernel_tables": ["kernels/add.yaml", "kernels/../kernels/add.yaml"]}
    with pytest.raises(SpecError, match="second stream table"):
        load_hardware(str(write(tmp_path, profile=twice)))
    gone = {**PROFILE, "name": "r", "kernel_tables": ["kernels/none.yaml"]}
    with pytest.raises(SpecError, match="not found"):
        load_hardware(str(write(tmp_path, profile=gone)))


def test_corrupt_table_is_one_line_exit_2(tmp_path):
    path = write(tmp_path)
    (tmp_path / "kernels" / "add.yaml").write_text("format: roofline-kernels/1\nseconds: [1, 2\n")
    res = CliRunner().invoke(app, ["estimate", "-m", "tiny-decoder", "--hardware", str(path)])
    assert res.exit_code == 2
    err = res.stderr if hasattr(res, "stderr") else res.output
    assert "malformed YAML" in err and len(err.strip().splitlines()) == 1


def test_table_paths_stay_inside_the_profiles_folder(tmp_path, monkeypatch):
    """A profile cannot make the tool open files elsewhere: ../, absolute paths and symlinks out
    are refused (and the refused file's content is never echoed); ROOFLINE_KERNEL_PATH names
    another folder tables may come from."""
    from calc.core.errors import SpecError
    from calc.spec.kernel_tables import KERNEL_PATH_ENV, table_path

    prof = tmp_path / "prof"
    (prof / "kernels").mkdir(parents=True)
    (prof / "kernels" / "ok.yaml").write_text("x")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "t.yaml").write_text("format: secret-value\n")
    (prof / "kernels" / "out.yaml").symlink_to(elsewhere / "t.yaml")
    assert table_path("kernels/ok.yaml", prof, "p.yaml") == (prof / "kernels" / "ok.yaml").resolve()
    for bad in ("../elsewhere/t.yaml", str(elsewhere / "t.yaml"), "kernels/out.yaml", "/etc/passwd",
                "/proc/self/environ"):
        with pytest.raises(SpecError, match="outside the profile's folder") as err:
            table_path(bad, prof, "p.yaml")
        assert "secret-value" not in str(err.value)
    with pytest.raises(SpecError, match="longer than 255 bytes"):
        table_path("k" * 300 + ".yaml", prof, "p.yaml")
    monkeypatch.setenv(KERNEL_PATH_ENV, str(elsewhere))
    assert table_path(str(elsewhere / "t.yaml"), prof, "p.yaml") == (elsewhere / "t.yaml").resolve()
    assert table_path("kernels/out.yaml", prof, "p.yaml") == (elsewhere / "t.yaml").resolve()


@pytest.mark.parametrize("seconds", [1e-30, 0.0, -1.0, 1e5])
def test_kernel_times_are_physical(seconds):
    from calc.core.errors import SpecError
    from calc.spec.kernel_tables import KernelTable
    from calc.spec.yamlio import build

    table = {"format": "roofline-kernels/1", "kernel": "stream", "dtype": "bf16", "op": "add",
             "provenance": {"device": "cpu", "source": "hand-written", "date": "2026-12-01"},
             "axes": {"bytes": [1000, 2000]}, "seconds": [1e-6, seconds]}
    with pytest.raises(SpecError, match="seconds: every time must be a number from 1e-09 to 3600 s"):
        build(KernelTable, table, "t.yaml")
