"""Resolve a name, a YAML path or a Hugging Face config.json into a spec.

Catalog directories: the repository's ``model_configs/`` and ``hardware_profiles/`` (a wheel
carries them as package data, found through importlib.resources) plus any listed (os.pathsep-separated) in ``ROOFLINE_MODEL_PATH`` and
``ROOFLINE_HARDWARE_PATH``. A catalog name is a YAML file's stem.
"""

from __future__ import annotations

import json
import os
import stat
from functools import lru_cache
from importlib import resources
from pathlib import Path

from pydantic import ValidationError

from calc.core.errors import SpecError, known, suggest
from calc.core.files import check_path, exists, read_text, stat_of
from calc.spec.hardware import HardwareSpec
from calc.spec.kernel_tables import load_kernel_tables
from calc.spec.model import ModelSpec
from calc.spec.yamlio import build, read_yaml

REPO_ROOT = Path(__file__).resolve().parents[2]


def shipped(name: str, source: str | None = None) -> Path:
    """A data folder the wheel carries as ``calc/_catalog/<name>`` (pyproject.toml maps it
    there), else the checkout's top-level folder ``source`` (default ``name``): a source
    tree or an editable install, where the package holds no copy."""
    packaged = resources.files("calc").joinpath("_catalog", name)
    if packaged.is_dir():
        return Path(str(packaged))
    return REPO_ROOT / (source or name)


MODEL_DIR = shipped("model_configs")
HARDWARE_DIR = shipped("hardware_profiles")
MODEL_PATH_ENV = "ROOFLINE_MODEL_PATH"
HARDWARE_PATH_ENV = "ROOFLINE_HARDWARE_PATH"


def _catalog_dirs(default: Path, env: str) -> list[Path]:
    extra = [Path(p) for p in os.environ.get(env, "").split(os.pathsep) if p]
    return [default, *extra]


def _listed_folder(d: Path, env: str) -> bool:
    """Whether ``d`` is a folder to list (a missing one is skipped, as PATH skips one); a path the
    system refuses to look up (a name too long, a loop) is the variable's mistake, said in one line."""
    check_path(d, env)
    info = stat_of(d, env)
    return info is not None and stat.S_ISDIR(info.st_mode)


def _catalog(default: Path, env: str) -> dict[str, Path]:
    """name -> YAML path; later directories override earlier ones."""
    out: dict[str, Path] = {}
    for d in _catalog_dirs(default, env):
        if _listed_folder(d, env):
            for p in sorted(d.glob("*.yaml")) + sorted(d.glob("*.yml")):
                out[p.stem] = p
    return out


def model_catalog() -> dict[str, Path]:
    return _catalog(MODEL_DIR, MODEL_PATH_ENV)


def hardware_catalog() -> dict[str, Path]:
    return _catalog(HARDWARE_DIR, HARDWARE_PATH_ENV)


def _unknown(kind: str, name: str, names: list[str]) -> SpecError:
    listing = "models" if kind == "model" else kind
    hint = suggest(name, names) or f"; known: {known(names)} (`roofline {listing}` lists them)"
    return SpecError(f"--{kind}", None, f"unknown {kind} {name!r} (not a catalog name or a file){hint}")


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


def _looks_like_path(ref: str) -> bool:
    return os.sep in ref or ref.endswith((".yaml", ".yml", ".json")) or exists(Path(ref))


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


@lru_cache(maxsize=256)
def _load_model_path(path: Path, mtime_ns: int = 0) -> ModelSpec:
    """Cached on (path, mtime) so a profile rewritten in-process is re-read."""
    if _is_dir(path):
        path = path / "config.json"
    if path.suffix == ".json":
        from calc.spec.hf import spec_from_hf_config

        text = read_text(path, "JSON file")
        try:
            config = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecError(path, None, f"malformed JSON: {exc}") from None
        except RecursionError:
            raise SpecError(path, None, "malformed JSON: nested too deep") from None
        if not isinstance(config, dict):
            raise SpecError(path, None, "expected a JSON object")
        return spec_from_hf_config(config, str(path), name=path.parent.name or None)
    return build(ModelSpec, read_yaml(path), path)


@lru_cache(maxsize=256)
def _load_hardware_path(path: Path, mtime_ns: int = 0) -> HardwareSpec:
    """A profile and the kernel tables it names (paths relative to its folder)."""
    hw = build(HardwareSpec, read_yaml(path), path)
    if hw.kernel_tables:
        hw = hw.with_kernels(load_kernel_tables(hw.kernel_tables, path.parent, path, hw.kind))
    return hw


def _resolve(ref: str, kind: str, catalog: dict[str, Path], load_path):
    """Catalog name first, then a path; an unknown name suggests the closest entries."""
    if ref in catalog:
        return load_path(catalog[ref], _mtime(catalog[ref]))
    if _looks_like_path(ref):
        p = Path(ref)
        if not exists(p):
            raise SpecError(p, None, "no such file")
        try:
            p = p.resolve()
        except OSError:
            pass
        return load_path(p, _mtime(p))
    raise _unknown(kind, ref, list(catalog))


def load_model(ref: str | Path | ModelSpec) -> ModelSpec:
    """A catalog name, a YAML path, a config.json path or a folder holding one."""
    if isinstance(ref, ModelSpec):
        return ref
    return _resolve(str(ref), "model", model_catalog(), _load_model_path)


def load_hardware(ref: str | Path | HardwareSpec) -> HardwareSpec:
    """A catalog name or a YAML path."""
    if isinstance(ref, HardwareSpec):
        return ref
    return _resolve(str(ref), "hardware", hardware_catalog(), _load_hardware_path)


def load_spec(ref: str) -> ModelSpec | HardwareSpec:
    """A name or file that may be a model or a hardware profile. Names: whichever catalog has
    it. A YAML file: the schema it validates against; one that fits neither reports the problem
    of the schema it comes closer to (fewer errors)."""
    if ref in model_catalog():
        return load_model(ref)
    if ref in hardware_catalog():
        return load_hardware(ref)
    p = Path(ref)
    if p.suffix in (".yaml", ".yml") and exists(p):
        data = read_yaml(p)
        tries = []
        for cls, load in ((ModelSpec, load_model), (HardwareSpec, load_hardware)):
            try:
                cls.model_validate({str(k): v for k, v in data.items()})
            except ValidationError as exc:
                tries.append((exc.error_count(), load))
                continue
            except (ValueError, TypeError):
                tries.append((1, load))
                continue
            return load(ref)
        return min(tries, key=lambda t: t[0])[1](ref)  # raises that schema's one-line error
    if _looks_like_path(ref):
        return load_model(ref)  # a config.json, a folder, or a missing file: its own error
    names = [*model_catalog(), *hardware_catalog()]
    raise SpecError("NAME", None, f"unknown model or hardware {ref!r}{suggest(ref, names)}")


@lru_cache(maxsize=256)
def arch_of_name(ref: str) -> str:
    """calc.spec.bands.arch_of of a catalog model (or a model file), read once."""
    from calc.spec.bands import arch_of

    return arch_of(load_model(ref))
