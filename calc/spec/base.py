"""The base of every spec model: frozen, no unknown keys, and every number finite and in range.

Field bounds state each quantity's physical range (calc.core.limits); this base adds the
rule for every number a spec holds, nested ones included (dict values, lists): finite, and
no larger in magnitude than ``limits.MAX_GENERIC``. Booleans are not numbers here, nor are
numbers: ``True`` where an int belongs is refused.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, field_validator

from calc.core import limits


class SpecModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _numbers_in_range(cls, value: object) -> object:
        problem = _first_bad(value)
        if problem:
            raise ValueError(problem)
        return value


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
