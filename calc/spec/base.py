"""The base of every spec model: frozen, no unknown keys, and every number finite and in range.

Field bounds state each quantity's physical range (calc.core.limits); this base adds the
rule for every number a spec holds, nested ones included (dict values, lists): finite, and
no larger in magnitude than ``limits.MAX_GENERIC``. Booleans are not numbers here, nor are
numbers: ``True`` where an int belongs is refused.
"""

from __future__ import annotations

import typing
from functools import cache

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from calc.core import limits


class SpecModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_as_numbers(cls, data: object) -> object:
        """pydantic's lax mode reads ``true`` as 1 where an int or float belongs (``tp: [true]``,
        ``k: true``); a spec refuses it, naming the key. Fields that may hold a flag, and nested
        specs (which check their own fields), are left alone."""
        if isinstance(data, dict):
            for key, value in data.items():
                if isinstance(key, str) and _takes_numbers_only(cls, key) and _has_bool(value):
                    raise ValueError(f"{key}: true/false where a number belongs")
        return data

    @field_validator("*", mode="after")
    @classmethod
    def _numbers_in_range(cls, value: object) -> object:
        problem = _first_bad(value)
        if problem:
            raise ValueError(problem)
        return value


@cache
def _takes_numbers_only(cls: type, name: str | None) -> bool:
    """Whether the field's type has no bool and no nested model anywhere in it."""
    field = cls.model_fields.get(name) if name else None
    if field is None:
        return False
    todo, seen = [field.annotation], 0
    while todo and seen < 64:
        t = todo.pop()
        seen += 1
        if t is bool or t is typing.Any or t is object:
            return False
        if isinstance(t, type) and issubclass(t, BaseModel):
            return False
        todo.extend(typing.get_args(t))
    return True


def _has_bool(value: object, depth: int = 0) -> bool:
    if isinstance(value, bool):
        return True
    if depth > 4:
        return False
    if isinstance(value, dict):
        return any(_has_bool(v, depth + 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_bool(v, depth + 1) for v in value)
    return False


def _first_bad(value: object, depth: int = 0) -> str | None:
    if depth > 4:
        return None
    if isinstance(value, dict):
        values = value.values()
    elif isinstance(value, (list, tuple)):
        values = value
    else:
        return limits.bad_number(value, limits.MAX_GENERIC)
    for v in values:
        problem = _first_bad(v, depth + 1)
        if problem:
            return problem
    return None
