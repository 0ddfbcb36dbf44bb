"""Engine versions as benchmark rows and users state them: a release (``0.6.3``, ``0.1.0a1``,
llama.cpp's ``b3216``), an upper bound when only the publication date is known (``<=b3061``), or a
range (``>=0.3.6, <=0.4.0.post1``). calc.spec.scheduler's by_version rules read them through these."""

from __future__ import annotations

import re

_PRE = {"dev": 0, "a": 1, "b": 2, "rc": 3}  # pre-releases sort before the release itself (PEP 440)


_VERSION = re.compile(r"\s*(<=)?\s*[vb]?(\d+(?:\.\d+)*)(?:[.-]?(dev|a|b|rc)(\d*))?")
_FLOOR = re.compile(r"\s*>=\s*([^,]+),\s*(<=.*)")  # ">=0.3.6, <=0.4.0.post2": known only as a range


def _upper(text: str):
    """The version's match: itself, or the upper bound of a range."""
    m = _FLOOR.match(str(text))
    return _VERSION.match(m.group(2) if m else str(text))


def version_key(text: str) -> tuple | None:
    """An engine version as a sortable key: its leading release numbers, then any pre-release
    (``0.1.0a1`` < ``0.1.0``); llama.cpp's builds by their number (``b3216``: 3216); None for a
    version with no leading number (``sha-11d7af7-rocm``). A version known only as an upper bound
    (``<=b3061``: a run of May 2024, whose build is not stated), or as a range (``>=0.3.6,
    <=0.4.0.post2``: a December 2024 image, its release not recorded), keys as its upper bound;
    ``at_most`` tells it apart and ``floor_key`` gives the range's lower bound."""
    m = _upper(text)
    if m is None:
        return None
    release = tuple(int(x) for x in m.group(2).split("."))
    release += (0,) * (4 - len(release))
    pre = (_PRE[m.group(3)], int(m.group(4) or 0)) if m.group(3) else (9, 0)
    return (*release[:4], *pre)


def at_most(text: str) -> bool:
    """Whether a version is stated as an upper bound (``<=b3061``, or a range), not as itself."""
    m = _upper(text)
    return m is not None and m.group(1) is not None


def floor_key(text: str) -> tuple | None:
    """The oldest release a version can be: itself, a range's lower bound (``>=0.3.6, <=0.4.0``),
    None for a bare upper bound (``<=b3061``: any older build) or no version."""
    m = _FLOOR.match(str(text))
    if m:
        return version_key(m.group(1))
    return None if at_most(text) else version_key(text)


def version_problem(text: str) -> str | None:
    """What is wrong with a version stated as a range (``>=A, <=B``): a bound that is not a version,
    or A after B; None for any other text (a version a rule cannot read is simply unknown)."""
    m = _FLOOR.match(str(text))
    if m is None:
        return None
    lo, hi = version_key(m.group(1)), version_key(m.group(2))
    if lo is None or hi is None:
        return f"{text!r}: a range's bounds are versions ('>=0.3.6, <=0.4.0')"
    if lo > hi:
        return f"{text!r}: the lower bound is after the upper one"
    return None
