"""Reading a YAML spec file and validating it into a spec: every problem names the file and field."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from calc.core import limits
from calc.core.errors import SpecError
from calc.core.files import read_text

S = TypeVar("S", bound=BaseModel)
# libyaml's composer recurses without a limit and segfaults on deeply nested input
# ("a: [[[[..." 100,000 deep); Python's stops at the recursion limit with a RecursionError,
# reported below. So a text is composed in C (about 10x faster: the catalog's files are read on
# every start) only when it cannot nest deeply: flow nesting is at most its count of brackets,
# block nesting at most its widest indent. Anything else takes the pure-Python loader.
_C_SAFE_DEPTH = 256


def _shallow(text: str) -> bool:
    """Whether no node of this YAML text can nest deeper than ``_C_SAFE_DEPTH`` (a bound, not
    a parse: brackets inside strings count too, which only sends a text to the slower loader)."""
    if text.count("[") + text.count("{") > _C_SAFE_DEPTH:
        return False
    return all(len(line) - len(line.lstrip(" -?:")) <= _C_SAFE_DEPTH for line in text.splitlines())


def _unique_keys(base):
    """``base`` loader refusing a key given twice in one mapping (the last would win silently)."""

    class Loader(base):
        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                except TypeError:  # an unhashable key; the base constructor reports it
                    continue
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return Loader


_PyLoader = _unique_keys(yaml.SafeLoader)
_CLoader = _unique_keys(getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def read_yaml(path: Path) -> dict:
    """Read a YAML mapping; any problem becomes a SpecError naming the file."""
    text = read_text(path, "YAML file", limits.max_yaml_bytes(), limits.YAML_BYTES_ENV)
    try:
        data = yaml.load(text, Loader=_CLoader if _shallow(text) else _PyLoader)  # noqa: S506 (safe loaders)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise SpecError(path, None, f"malformed YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
    except RecursionError:
        raise SpecError(path, None, "malformed YAML: nested too deep") from None
    except ValueError as exc:  # int() of more than 4,300 digits
        problem = "an integer of more than 4,300 digits" if "digits" in str(exc) else str(exc).splitlines()[0][:120]
        raise SpecError(path, None, f"malformed YAML: {problem}") from None
    if not isinstance(data, dict):
        raise SpecError(path, None, "expected a mapping of keys to values at the top level")
    return data


def build(cls: type[S], data: dict, path: object) -> S:
    """Validate a mapping into a spec; errors name the file and field."""
    try:
        return cls(**{str(k): v for k, v in data.items()})
    except ValidationError as exc:
        raise SpecError.from_validation(path, exc, cls) from None
    except (ValueError, TypeError) as exc:
        raise SpecError(path, None, str(exc)) from None
