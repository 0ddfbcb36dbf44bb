"""The typer app every command module registers on, the output formats and the error rule."""

from __future__ import annotations

import functools
from enum import Enum
from typing import Annotated

import typer

from calc.core import text as render
from calc.core.errors import SpecError

app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=False,
    help="Roofline and capacity-planning calculator for LLM inference. "
    "FLOPs: a multiply-add is 2; bytes: GB = 1e9; times in seconds.",
)


class Format(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="Output format: table, json or csv.")]


def command(*args, **kwargs):
    """app.command, plus the error rule: a SpecError prints one line and exits 2."""

    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            try:
                return fn(*a, **k)
            except SpecError as exc:
                typer.echo(f"roofline: error: {exc}", err=True)
                raise typer.Exit(2) from None

        return app.command(*args, **kwargs)(wrapper)

    return deco


def emit(fmt: Format, rows: list[dict], headers: list[str], table_rows: list[list[object]], obj=None):
    if fmt is Format.json:
        typer.echo(render.to_json(obj if obj is not None else rows))
    elif fmt is Format.csv:
        typer.echo(render.to_csv(rows), nl=False)
    else:
        typer.echo(render.table(table_rows, headers))
