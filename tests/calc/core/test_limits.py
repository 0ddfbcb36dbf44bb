"""Size guards read from the environment: a bad value is an error, never the default silently."""

import pytest

from calc.core import limits
from calc.core.errors import SpecError


def test_unset_or_empty_guard_is_the_default(monkeypatch):
    monkeypatch.delenv(limits.FILE_BYTES_ENV, raising=False)
    assert limits.max_file_bytes() == 64 * 1_000_000
    monkeypatch.setenv(limits.FILE_BYTES_ENV, "")
    assert limits.max_file_bytes() == 64 * 1_000_000
    monkeypatch.setenv(limits.REQUESTS_ENV, "50000")
    assert limits.max_requests() == 50_000


@pytest.mark.parametrize("raw", ["abc", "-1", "0", "nan", "inf", "1.5", "99999999999999999999", "1e6"])
def test_bad_guard_values_are_one_error_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv(limits.FILE_BYTES_ENV, raw)
    with pytest.raises(SpecError) as err:
        limits.max_file_bytes()
    assert limits.FILE_BYTES_ENV in str(err.value) and "whole number from 1 to" in str(err.value)
    assert "\n" not in str(err.value)


def test_known_names_are_capped():
    from calc.core.errors import known

    assert known(["b", "a"]) == "a, b"
    names = [f"m{i:04d}" for i in range(2000)]
    text = known(names, limit=3)
    assert text == "m0000, m0001, m0002 and 1,997 more"


def test_an_unknown_name_among_thousands_is_a_short_line(tmp_path, monkeypatch):
    from calc.spec import catalog

    for i in range(50):
        (tmp_path / f"gpu{i}.yaml").write_text("")
    monkeypatch.setattr(catalog, "hardware_catalog", lambda: {f"zz-{i}": tmp_path / f"gpu{i}.yaml" for i in range(3000)})
    with pytest.raises(SpecError) as err:
        catalog.load_hardware("qqqqqqqq")
    assert "and 2,988 more" in str(err.value) and len(str(err.value)) < 400


def test_yaml_specs_are_capped_at_what_a_real_spec_needs(tmp_path, monkeypatch):
    """A 15 MB YAML ran for minutes in the pure-Python loader; specs are kilobytes."""
    from calc.spec.yamlio import read_yaml

    big = tmp_path / "big.yaml"
    big.write_text("a:\n" + "".join(f"  - {i}\n" for i in range(60_000)))  # ~0.5 MB
    with pytest.raises(SpecError, match="ROOFLINE_MAX_YAML_KB"):
        read_yaml(big)
    monkeypatch.setenv(limits.YAML_BYTES_ENV, "1000")
    assert len(read_yaml(big)["a"]) == 60_000
