"""A request's query parameters parsed by the CLI's own commands: the same names, checks and errors.

``/api/estimate?model=llama-3.1-8b&hardware=h100-sxm&batch=8&prompt-len=2048`` is parsed by
the ``estimate`` command's click parameters exactly as ``roofline estimate --model ... --batch 8
--prompt-len 2048`` would be (``prompt_len`` spells the same option), so a bad value gets the
CLI's one line, which the API answers as a 400 with ``{"error": LINE}``. The page takes catalog
names only, never a path: nothing on the server's disk is read because a request names it.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache

from calc.core.errors import SpecError, suggest

TRUE, FALSE = ("", "1", "true", "on", "yes"), ("0", "false", "off", "no")
NOT_ON_THE_PAGE = {"out", "quiet", "yes", "fmt", "table", "fit", "fit_out"}  # files, terminals, formats: the CLI's


class ApiError(Exception):
    """A request the API refuses: the HTTP status and the one line it says."""

    def __init__(self, status: int, line: str):
        super().__init__(line)
        self.status, self.line = status, line


def refuse(exc: BaseException, status: int = 400) -> ApiError:
    """The ApiError of a user's mistake, worded as the CLI prints it."""
    from calc.cli.base import error_line

    return ApiError(status, error_line(exc))  # the CLI's one printer (SpecErrors included)


@cache
def _command(name: str):
    import typer

    from calc.cli import compare, estimate, sweep  # noqa: F401  (the commands the API parses with)
    from calc.cli.base import app

    return typer.main.get_command(app).commands[name]


def parse(name: str, query: Mapping[str, str], args: tuple[str, ...] = ()) -> dict:
    """The ``name`` command's options parsed from ``query`` (option names without the dashes,
    ``-`` or ``_``), then ``args`` as its arguments: a dict of parameter name -> value as the
    command receives it."""
    cmd = _command(name)
    by_flag = {o[2:]: p for p in cmd.params for o in p.opts if o.startswith("--")}
    argv: list[str] = []
    try:
        for key, value in query.items():
            flag = str(key).replace("_", "-")
            p = by_flag.get(flag)
            if p is None or p.name in NOT_ON_THE_PAGE:
                known = [f for f, q in by_flag.items() if q.name not in NOT_ON_THE_PAGE]
                raise SpecError(f"--{flag}", None, f"no such option on the page{suggest(flag, known)}")
            if getattr(p, "is_flag", False):
                if str(value).lower() not in TRUE + FALSE:
                    raise SpecError(f"--{flag}", None, f"expected true or false, got {value!r}")
                if str(value).lower() in TRUE:
                    argv.append(f"--{flag}")
            else:
                argv += [f"--{flag}", str(value)]
        ctx = cmd.make_context(name, [*argv, "--", *args] if args else argv)
    except Exception as exc:  # noqa: BLE001 (click's usage errors and SpecError: both a user's mistake)
        raise refuse(exc) from None
    params = dict(ctx.params)
    for key in NOT_ON_THE_PAGE:
        params.pop(key, None)
    return params


def catalog_only(params: dict, keys: dict[str, str]) -> None:
    """Each of ``keys`` (parameter -> catalog kind: model or hardware) names catalog entries
    (comma-separated where the command takes several): an unknown name gets the CLI's own line
    (with its suggestions), and a path is refused before anything reads it."""
    import os

    from calc.cli.values import split_names
    from calc.spec.catalog import hardware_catalog, load_hardware, load_model, model_catalog

    for key, kind in keys.items():
        value = params.get(key)
        if value is None:
            continue
        names = (model_catalog() if kind == "model" else hardware_catalog()).keys()
        for ref in split_names(value) or [value]:
            if ref in names:
                continue
            option = "--" + key.replace("_", "-")
            if "/" in ref or os.sep in ref or "\\" in ref or ref.endswith((".yaml", ".yml", ".json")) or os.path.exists(ref):
                raise ApiError(400, f"roofline: error: {option}: unknown {kind} {ref!r} (the page takes catalog "
                                    f"names){suggest(ref, list(names)) or ''}")
            try:
                (load_model if kind == "model" else load_hardware)(ref)  # raises the CLI's unknown-name line
            except SpecError as exc:
                raise ApiError(400, f"roofline: error: {exc}") from None  # as the command says it
            raise ApiError(400, f"roofline: error: {option}: {ref!r} is not in the catalog")


def confined(ref: str | None, where: str, field: str) -> None:
    """A file a request's own file names must be a plain relative path inside its folder."""
    from pathlib import PurePath

    if ref is None:
        return
    p = PurePath(str(ref))
    if p.is_absolute() or ".." in p.parts or "\\" in str(ref) or str(ref).startswith("~"):
        raise ApiError(400, f"roofline: error: {where}: {field}: {ref!r} names a file outside the upload "
                            "(the page reads only the files uploaded with it)")
