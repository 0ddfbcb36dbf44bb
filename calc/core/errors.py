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
    def from_validation(cls, path: object, exc: Exception, model: type | None = None) -> SpecError:
        """Turn a pydantic ValidationError into one line listing every problem, the first one's
        field as ``field``; an unknown key lists the keys valid there (``model``: the spec class
        validated, whose fields say which)."""
        errors = _one_union_branch(getattr(exc, "errors", lambda: [])())
        if not errors:
            return cls(path, None, str(exc).splitlines()[0])
        parts = []
        for e in errors:
            loc = tuple(p for p in e.get("loc", ()) if p != "__root__")
            msg = e.get("msg", "invalid").removeprefix("Value error, ")
            if e.get("type") == "extra_forbidden":
                keys = valid_keys(model, loc[:-1]) if model is not None else None
                msg = f"unknown key (a typo? valid keys: {', '.join(keys)})" if keys else "unknown key (a typo?)"
            parts.append((".".join(str(p) for p in loc) or None, msg))
        field, first = parts[0]
        rest = [f"{f}: {m}" if f else m for f, m in parts[1:]]
        return cls(path, field, "; ".join([first, *rest]))


_SHAPE_ERRORS = frozenset({"list_type", "dict_type", "model_type", "model_attributes_type", "string_type",
                           "int_type", "float_type", "bool_type", "none_required"})


def _is_tag(part) -> bool:
    """A pydantic union member's tag in an error location ('DtypeChoice', 'list[str]', 'str'),
    not a field name (fields here are snake_case)."""
    return isinstance(part, str) and (part[:1].isupper() or "[" in part or part in ("str", "int", "float", "bool",
                                                                                      "none"))


def _one_union_branch(errors: list[dict]) -> list[dict]:
    """pydantic reports every branch of a union that failed; keep the branch the input had the
    shape of (its errors reach past the tag) and drop the tag, so a field of ``A | list[A]``
    given one A says what is wrong with the A, once."""
    out = []
    for e in errors:
        loc = tuple(e.get("loc", ()))
        cut = next((i for i, p in enumerate(loc) if _is_tag(p)), None)
        if cut is None:
            out.append(e)
            continue
        deeper = any(tuple(o.get("loc", ()))[:cut] == loc[:cut] and len(o.get("loc", ())) > cut + 1
                     for o in errors if o is not e)
        if len(loc) == cut + 1 and e.get("type") in _SHAPE_ERRORS and deeper:
            continue  # the input is not of this branch's shape: another branch says what is wrong
        out.append({**e, "loc": loc[:cut] + loc[cut + 1:]})
    return out


def valid_keys(model: type, loc: tuple) -> list[str] | None:
    """The keys a pydantic model accepts at ``loc`` (nested models, list items, dict values
    followed through the field annotations); None where that is not a model."""
    import typing

    def models_in(tp) -> list:
        if isinstance(tp, type) and hasattr(tp, "model_fields"):
            return [tp]
        return [m for a in typing.get_args(tp) for m in models_in(a)]

    current = [model]
    for part in loc:
        if isinstance(part, int) or not current:
            continue  # a list index or a dict key: the item's model is already in ``current``
        nxt = []
        for m in current:
            f = m.model_fields.get(part)
            if f is not None:
                nxt += models_in(f.annotation)
        if nxt or any(part in m.model_fields for m in current):
            current = nxt
    keys = sorted({k for m in current for k in m.model_fields})
    return keys or None


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
