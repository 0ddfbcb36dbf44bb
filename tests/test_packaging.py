"""The wheel carries every package and the catalogs; an installed copy is read before the checkout's."""

from pathlib import Path

import pytest

import calc.spec.catalog as catalog

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[1]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_is_listed():
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for top in ("calc", "validate")
               for p in (ROOT / top).rglob("__init__.py")}
    assert on_disk <= set(SETUPTOOLS["packages"])


def test_catalog_folders_are_mapped_into_the_package():
    for package, folder in SETUPTOOLS["package-dir"].items():
        assert package.startswith("calc._catalog.") and package in SETUPTOOLS["packages"]
        assert (ROOT / folder).is_dir() and any((ROOT / folder).iterdir())
        assert package in SETUPTOOLS["package-data"]
    names = {p.rsplit(".", 1)[1] for p in SETUPTOOLS["package-dir"]}
    assert {"model_configs", "hardware_profiles"} <= names


def test_checkout_folders_without_a_packaged_copy():
    assert catalog.shipped("model_configs") == ROOT / "model_configs"
    assert catalog.shipped("accuracy", "reports/accuracy") == ROOT / "reports" / "accuracy"


def test_packaged_copy_wins(tmp_path, monkeypatch):
    (tmp_path / "_catalog" / "model_configs").mkdir(parents=True)
    monkeypatch.setattr(catalog.resources, "files", lambda package: tmp_path)
    assert catalog.shipped("model_configs") == tmp_path / "_catalog" / "model_configs"
