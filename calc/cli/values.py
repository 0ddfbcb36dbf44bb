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
        try:
            if ":" in part:
                bits = part.split(":")
                if len(bits) not in (2, 3):
                    raise ValueError
                start, stop = kind(bits[0]), kind(bits[1])
                step = kind(bits[2]) if len(bits) == 3 else kind(1)
                if step <= 0:
                    raise SpecError(option, None, f"range step must be positive in {part!r}")
                if stop < start:
                    raise SpecError(option, None, f"range {part!r} is empty (stop < start)")
                count = int(np.floor((stop - start) / step + 1e-9)) + 1
                out.extend(kind(start + i * step) for i in range(count))
            else:
                out.append(kind(part))
        except ValueError:
            raise SpecError(option, None, f"cannot read {part!r}: expected a number, a comma list or "
                                          "start:stop:step") from None
    if not out:
        raise SpecError(option, None, "no values given")
    return out
