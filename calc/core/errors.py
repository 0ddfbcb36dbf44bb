"""The one error type a user's mistake becomes: file, field, problem."""

from __future__ import annotations

import difflib


class SpecError(ValueError):
    """A user-facing input error; the CLI prints ``str(err)`` and exits 2.

    ``path`` is the file (or ``"--option"`` for a command-line value), ``field``
    the key inside it (dotted), ``problem`` what is wrong, in words.
    """

    def __init__(self, path: object, field: str | None, problem: str):
        self.path = str(path) if path is not None else None
        self.field = field
        self.problem = problem
        parts = [p for p in (self.path, field) if p]
        super().__init__(": ".join([*parts, problem]))

    @classmethod
    def from_validation(cls, path: object, exc: Exception) -> SpecError:
        """Turn a pydantic ValidationError into one line: the first error, and a count."""
        errors = getattr(exc, "errors", lambda: [])()
        if not errors:
            return cls(path, None, str(exc).splitlines()[0])
        first = errors[0]
        field = ".".join(str(p) for p in first.get("loc", ()) if p != "__root__") or None
        msg = first.get("msg", "invalid").removeprefix("Value error, ")
        if first.get("type") == "extra_forbidden":
            msg = "unknown key (a typo?)"
        more = len(errors) - 1
        if more:
            msg += f" (and {more} more problem{'s' if more > 1 else ''})"
        return cls(path, field, msg)


class TooLarge(SpecError):
    """Work over a size limit, refused before anything is allocated; ``parameter`` names the
    library argument that raises the limit (the CLI names its own flag for it)."""

    def __init__(self, path: object, problem: str, parameter: str):
        self.parameter = parameter
        super().__init__(path, None, problem)


def suggest(name: str, names, n: int = 3, cutoff: float = 0.5) -> str:
    """"; did you mean a, b?" for the closest of ``names`` to ``name`` (empty when none is close):
    the one place an unknown name gets its suggestions. Case is ignored, and a name that starts
    with what was typed ("H100" -> h100-sxm, h100-pcie) comes before one merely spelled alike
    (h200), then one that contains it, then difflib's closest."""
    names = list(dict.fromkeys(names))
    typed = name.strip().lower()
    by_lower = {}
    for x in names:
        by_lower.setdefault(x.lower(), x)
    starts = sorted((x for x in names if typed and x.lower().startswith(typed)), key=lambda x: (len(x), x))
    inside = sorted((x for x in names if typed and typed in x.lower() and x not in starts), key=lambda x: (len(x), x))
    close = [by_lower[c] for c in difflib.get_close_matches(typed, list(by_lower), n=n, cutoff=cutoff)]
    picked = list(dict.fromkeys([*starts, *inside, *close]))[:n]
    return f"; did you mean {', '.join(picked)}?" if picked else ""


def known(names, limit: int = 12) -> str:
    """The names a message lists: all of them when few, else the first ``limit`` and a count
    (a catalog path with 2,000 entries must not become a 2,000-name line)."""
    names = sorted(names)
    if len(names) <= limit:
        return ", ".join(names)
    return f"{', '.join(names[:limit])} and {len(names) - limit:,} more"
