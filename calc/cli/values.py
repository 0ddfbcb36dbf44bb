"""Parse command-line value lists: one value, a comma list, or start:stop:step ranges."""

from __future__ import annotations

import numpy as np

from calc.core.errors import SpecError


def parse_values(text: str | int | float, option: str, kind=int) -> list:
    """'8' -> [8]; '1,8,64' -> [1, 8, 64]; '128:1024:128' -> 128, 256, ..., 1024 (inclusive).
    Items may mix: '1,2,4:16:4'."""
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
        if len(nums) == 1:
            out.append(nums[0])
            continue
        start, stop = nums[0], nums[1]
        step = nums[2] if len(nums) == 3 else kind(1)
        if step <= 0:
            raise SpecError(option, None, f"range step must be positive in {part!r}")
        if stop < start:
            raise SpecError(option, None, f"range {part!r} is empty (stop < start)")
        count = int(np.floor((stop - start) / step + 1e-9)) + 1
        out.extend(kind(start + i * step) for i in range(count))
    if not out:
        raise SpecError(option, None, "no values given")
    return out


def _unreadable(option: str, part: str) -> SpecError:
    return SpecError(option, None, f"cannot read {part!r}: expected a number, a comma list or start:stop:step")


def split_names(text: str | None) -> list[str | None]:
    """'a,b' -> ['a', 'b']; None -> [None] (the option's default applies)."""
    return [None] if text is None else [t.strip() for t in text.split(",") if t.strip()]


def one(values: list, option: str):
    """The single value of an option that takes one here."""
    if len(values) != 1:
        raise SpecError(option, None, f"takes one value here, got {len(values)}")
    return values[0]
