"""Parse command-line value lists: one value, a comma list, or start:stop:step ranges.

Every value is checked against its option's range (calc.core.limits.OPTION_RANGES) and the
count against a size guard before a range is expanded.
"""

from __future__ import annotations

import math

import numpy as np

from calc.core import limits
from calc.core.errors import SpecError


def check_value(value, option: str):
    """A value within its option's stated range (finite for floats), else a SpecError."""
    low, high = limits.OPTION_RANGES.get(option, (1, limits.MAX_GENERIC))
    if isinstance(value, float) and not math.isfinite(value):
        raise SpecError(option, None, f"must be a finite number, got {value}")
    if not low <= value <= high:
        raise SpecError(option, None, f"{limits.short(value)} is out of range ({low:,} to {high:,})")
    return value


def in_range(option: str):
    """A typer callback checking a single-valued option against its range (None passes)."""
    return lambda value: value if value is None else check_value(value, option)


def parse_values(text: str | int | float, option: str, kind=int, max_count: int | None = None,
                 raise_hint: str | None = None) -> list:
    """'8' -> [8]; '1,8,64' -> [1, 8, 64]; '128:1024:128' -> 128, 256, ..., 1024 (inclusive).
    Items may mix: '1,2,4:16:4'. At most ``max_count`` values (default: limits.max_scenarios()),
    counted before a range is expanded; ``raise_hint`` says how to raise that limit."""
    limit = limits.max_scenarios() if max_count is None else max_count
    hint = raise_hint or f"set {limits.SCENARIOS_ENV} to raise it"
    out: list = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        bits = part.split(":")
        if len(bits) > 3:
            raise _unreadable(option, part)
        try:
            nums = [kind(b) for b in bits]
        except ValueError:
            raise _unreadable(option, part) from None
        for n in nums[:2]:
            check_value(n, option)
        if len(nums) == 1:
            out.append(nums[0])
            if len(out) > limit:
                raise SpecError(option, None, f"more than {limit:,} values ({hint})")
            continue
        start, stop = nums[0], nums[1]
        step = nums[2] if len(nums) == 3 else kind(1)
        if not step > 0:  # NaN too
            raise SpecError(option, None, f"range step must be positive in {part!r}")
        if stop < start:
            raise SpecError(option, None, f"range {part!r} is empty (stop < start)")
        count = int(np.floor((stop - start) / step + 1e-9)) + 1
        if len(out) + count > limit:
            raise SpecError(option, None, f"{part!r} gives {len(out) + count:,} values, more than {limit:,} ({hint})")
        out.extend(kind(start + i * step) for i in range(count))
    if not out:
        raise SpecError(option, None, "no values given")
    return out


def _unreadable(option: str, part: str) -> SpecError:
    shown = part if len(part) <= 40 else f"{part[:20]}...({len(part)} characters)"
    return SpecError(option, None, f"cannot read {shown!r}: expected a number, a comma list or start:stop:step")


def split_names(text: str | None) -> list[str | None]:
    """'a,b' -> ['a', 'b']; None -> [None] (the option's default applies)."""
    return [None] if text is None else [t.strip() for t in text.split(",") if t.strip()]


def one(values: list, option: str):
    """The single value of an option that takes one here."""
    if len(values) != 1:
        raise SpecError(option, None, f"takes one value here, got {len(values)}")
    return values[0]
