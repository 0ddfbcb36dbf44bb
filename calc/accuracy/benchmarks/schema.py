"""The fields a reader takes from a result file, each checked against a stated range.

A result file is someone else's output, often hand-edited or truncated, so no number in it is
trusted: every field a reader uses goes through one of these getters, which return the value
in the type the reader needs, None when the file leaves it out, or raise one SpecError naming
the file, the field and what is wrong. The ranges are calc.core.limits' physical bounds:

field kind      range                                   why
latency (ms/s)  0 .. MAX_SECONDS (1e9 s)                a time the tools measured; never negative
rate, tok/s     0 .. MAX_GENERIC (1e15)                 a throughput; never negative
count           whole, 0 .. MAX_BATCH (16.7 M)          requests, completed, concurrency, clients
tokens          whole, 0 .. MAX_TOKENS (2^30)           a prompt / output length, a token total mean
text            a string of at most 4,096 characters    a model id or path (PATH_MAX)

A latency or throughput of exactly 0 is "not measured" (vLLM writes 0 for the TTFT of an endpoint
that does not stream: np.mean of an empty list `or 0`), so ``measured`` leaves it out. In a CSV every
value is text: ``text=True`` parses it ("1,234.56" as GenAI-Perf formats it; "", "-", "N/A" absent).
"""

from __future__ import annotations

import math

from calc.core import limits
from calc.core.errors import SpecError

MAX_TEXT = 4096  # characters in a model id (a Hugging Face id, or a local path: PATH_MAX)
MAX_COUNT = limits.MAX_BATCH
ABSENT_TEXT = ("", "-", "n/a", "none", "null", "nan")  # how the CSV writers spell a missing value


def _parse(value, path, key, text: bool):
    """The raw value as a Python number (or None when absent); a wrong type is an error."""
    if value is None:
        return None
    if isinstance(value, str) and text:
        s = value.strip().replace(",", "")
        if s.lower() in ABSENT_TEXT:
            return None
        if len(s) > 40:
            raise SpecError(path, key, f"not a number ({len(s):,} characters)")
        try:
            return int(s) if s.lstrip("+-").isdigit() else float(s)
        except ValueError:
            raise SpecError(path, key, f"not a number: {value[:40]!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        shown = "true/false" if isinstance(value, bool) else type(value).__name__
        raise SpecError(path, key, f"must be a number, got {shown}")
    return value


def number(doc: dict, key: str, path, where: str = "", *, low: float = 0.0, high: float = limits.MAX_GENERIC,
           whole: bool = False, above: bool = False, required: bool = False, text: bool = False):
    """``doc[key]`` as a finite number in [low, high] (> low when ``above``), an int when
    ``whole``; None when absent (an error when ``required``)."""
    name = f"{where}{key}"
    v = _parse(doc.get(key), path, name, text)
    if v is None:
        if required:
            raise SpecError(path, name, "missing")
        return None
    problem = limits.bad_number(v, high, low)
    if problem is None and above and v <= low:
        problem = f"must be more than {limits.short(low)}, got {limits.short(v)}"
    if problem is None and whole and (isinstance(v, float) and not v.is_integer()):
        problem = f"must be a whole number, got {v:g}"
    if problem:
        raise SpecError(path, name, problem)
    return int(v) if whole else float(v)


def latency(doc, key, path, where="", unit: float = 1e-3, text=False) -> float | None:
    """A time in the tool's unit (``unit`` seconds: 1e-3 for ms), as seconds."""
    v = number(doc, key, path, where, high=limits.MAX_SECONDS / unit, text=text)
    return None if v is None else v * unit


def count(doc, key, path, where="", *, low=0, required=False, text=False) -> int | None:
    return number(doc, key, path, where, low=low, high=MAX_COUNT, whole=True, required=required, text=text)


def tokens(doc, key, path, where="", *, required=False, text=False) -> float | None:
    """A token length or a mean of them."""
    return number(doc, key, path, where, high=limits.MAX_TOKENS, required=required, text=text)


def total(doc, key, path, where="", text=False) -> float | None:
    """A token total over a run (at most MAX_TOKENS per request of at most MAX_COUNT)."""
    return number(doc, key, path, where, high=float(limits.MAX_TOKENS) * MAX_COUNT, text=text)


def rate(doc, key, path, where="", text=False) -> float | None:
    """A request rate in requests/s: > 0, or None for "inf" / Infinity (everything at once)."""
    v = doc.get(key)
    if isinstance(v, str) and v.strip().lower() in ("inf", "infinity", "+inf"):
        return None
    if isinstance(v, float) and v == math.inf:
        return None
    return number(doc, key, path, where, high=1e9, above=True, text=text or isinstance(v, str))


def string(doc, key, path, where="") -> str | None:
    v = doc.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        raise SpecError(path, f"{where}{key}", f"must be a string, got {type(v).__name__}")
    if len(v) > MAX_TEXT:
        raise SpecError(path, f"{where}{key}", f"{len(v):,} characters (at most {MAX_TEXT:,})")
    return v


def mapping(doc, key, path, where="", required=False) -> dict:
    """A nested object ({} when absent)."""
    v = doc.get(key)
    if v is None:
        if required:
            raise SpecError(path, f"{where}{key}", "missing")
        return {}
    if not isinstance(v, dict):
        raise SpecError(path, f"{where}{key}", f"must be an object, got {type(v).__name__}")
    return v


def per_request(doc, key, path, where="") -> tuple[int, ...] | None:
    """A list of per-request token counts, or None when the file does not keep it."""
    values = doc.get(key)
    if values is None or values == []:
        return None
    name = f"{where}{key}"
    if not isinstance(values, list):
        raise SpecError(path, name, f"must be a list of token counts, got {type(values).__name__}")
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 <= v <= limits.MAX_TOKENS) \
                or (isinstance(v, float) and not v.is_integer()):
            shown = limits.short(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else repr(v)[:20]
            raise SpecError(path, f"{name}[{i}]", f"must be a whole number of tokens in 0..{limits.MAX_TOKENS:,}, "
                                                  f"got {shown}")
    return tuple(int(v) for v in values)
