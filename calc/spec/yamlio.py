"""Reading a YAML spec file and validating it into a spec: every problem names the file and field."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from calc.core.errors import SpecError

S = TypeVar("S", bound=BaseModel)
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(path: Path) -> dict:
    """Read a YAML mapping; any problem becomes a SpecError naming the file."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(path, None, f"cannot read file ({exc.__class__.__name__}: {exc.strerror or exc})") from None
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 (a safe loader, C when available)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise SpecError(path, None, f"malformed YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(data, dict):
        raise SpecError(path, None, "expected a mapping of keys to values at the top level")
    return data


def build(cls: type[S], data: dict, path: object) -> S:
    """Validate a mapping into a spec; errors name the file and field."""
    try:
        return cls(**{str(k): v for k, v in data.items()})
    except ValidationError as exc:
        raise SpecError.from_validation(path, exc) from None
    except (ValueError, TypeError) as exc:
        raise SpecError(path, None, str(exc)) from None
