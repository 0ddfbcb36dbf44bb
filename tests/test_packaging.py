"""The wheel carries every package and the catalogs; an installed copy is read before the checkout's."""

from pathlib import Path

import pytest

import calc.spec.catalog as catalog

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[1]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_is_listed():
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "calc").rglob("__init__.py")}
    on_disk |= {"calc." + ".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "validate").rglob("__init__.py")}
    assert on_disk <= set(SETUPTOOLS["packages"])


def test_validation_ships_under_the_project_namespace():
    # Every top-level name the wheel installs is the project's own: validate/ maps to calc.validate.
    assert {p.split(".")[0] for p in SETUPTOOLS["packages"]} == {"calc"}
    assert SETUPTOOLS["package-dir"]["calc.validate"] == "validate"


def test_validation_modules_import_their_package_relatively():
    # The folder is `validate` in a checkout and `calc.validate` in the wheel: an absolute
    # `from validate...` would break (or pick up another project's `validate`) in one of them.
    import ast

    absolute = []
    for path in (ROOT / "validate").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            absolute += [f"{path.name}: {n}" for n in names if n == "validate" or n.startswith("validate.")]
    assert absolute == []


def test_the_cli_mounts_the_checkouts_validation_package():
    from calc.cli.app import validation_package

    assert validation_package() == "validate"  # this checkout's folder, beside calc/


def test_catalog_folders_are_mapped_into_the_package():
    for package, folder in SETUPTOOLS["package-dir"].items():
        if package == "calc.validate":
            continue
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
