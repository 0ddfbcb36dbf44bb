"""The typer app every command module registers on, the output formats and the error rule."""

from __future__ import annotations

import functools
import sys
from enum import Enum
from typing import Annotated

import typer
from typer._click import exceptions as click  # typer >= 0.26 vendors click: its exceptions live here
from typer.core import TyperCommand, TyperGroup

from calc.cli.interrupt import handled
from calc.core import text as render
from calc.core.errors import SpecError


def error_line(exc: BaseException) -> str:
    """The one line a user's mistake prints: ``roofline: error: <option or file>: <problem>``."""
    param = getattr(exc, "param", None)
    if isinstance(exc, click.UsageError):
        # where: the option or argument, else the option named, else the (sub)command
        opts = (getattr(param, "opts", None) or [(param.name or "value").upper()]) if param is not None else []
        ctx = exc.ctx
        where = (max(opts, key=len) if opts else getattr(exc, "option_name", None)
                 or (ctx.info_name if ctx is not None and ctx.parent is not None else "COMMAND"))
        if isinstance(exc, click.MissingParameter):
            kind = "option" if getattr(param, "param_type_name", "") == "option" else "argument"
            problem = f"missing {kind}"
        elif isinstance(exc, click.BadParameter):
            problem = exc.message.removeprefix("Value error, ")
        else:
            problem = exc.format_message()
        text = f"{where}: {problem}"  # at the app itself, the command word (not "roofline" twice)
    elif isinstance(exc, click.ClickException):
        text = exc.format_message()
    elif isinstance(exc, SpecError) and exc.path in OPTION_OF:
        text = str(SpecError(OPTION_OF[exc.path], exc.field, exc.problem))
    else:
        text = str(exc)
    return "roofline: error: " + one_line(text)


def one_line(text: str) -> str:
    """``text`` on one line: newlines and runs of spaces (a path may hold them) become one space."""
    return " ".join(text.split())


# The cost layer names a scenario value by its field (as a workload spells it); on the command line
# the same value came from an option, so the CLI's message names the option.
OPTION_OF = {"tp": "--tp", "pp": "--pp", "ep": "--ep", "imbalance": "--imbalance", "seq_len": "--seq-len",
             "prompt_len/output_len": "--prompt-len/--output-len"}


def _flags_without_type(params: list) -> list:
    """A flag takes no value, so its help shows no type: typer would print ``--help <bool>``."""
    for p in params:
        if getattr(p, "is_flag", False) and p.metavar is None:
            p.metavar = ""
    return params


class RooflineCommand(TyperCommand):
    """Every subcommand: its help lists flags without a value type."""

    def get_params(self, ctx):
        return _flags_without_type(super().get_params(ctx))


class RooflineGroup(TyperGroup):
    """The app's click group: click's usage errors (a bad option value, an unknown option or
    command, a missing argument) take the SpecError path too: one line on stderr, exit 2,
    instead of click's boxed multi-line message."""

    def get_params(self, ctx):
        return _flags_without_type(super().get_params(ctx))

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.NoArgsIsHelpError as exc:
            typer.echo(exc.ctx.get_help() if exc.ctx else exc.format_message(), err=True)
            code = 2
        except (click.ClickException, SpecError) as exc:
            typer.echo(error_line(exc), err=True)
            code = getattr(exc, "exit_code", 2)
        except typer.Abort:
            typer.echo("Aborted!", err=True)
            code = 1
        else:
            code = rv if isinstance(rv, int) else 0
        if standalone_mode:
            sys.exit(code)
        return code

    def invoke(self, ctx):
        """A Ctrl-C inside a command says so (typer would turn it into a silent Exit(130))."""
        with handled():
            return super().invoke(ctx)


app = typer.Typer(
    cls=RooflineGroup,
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
                typer.echo(error_line(exc), err=True)  # the one way an error is printed
                raise typer.Exit(2) from None
            except MemoryError:  # past the guards: a request the machine cannot hold
                typer.echo(error_line(SpecError("memory", None, "out of memory: ask for less at once (fewer "
                                                "scenarios, requests or columns)")), err=True)
                raise typer.Exit(2) from None

        return app.command(*args, cls=kwargs.pop("cls", RooflineCommand), **kwargs)(wrapper)

    return deco


def emit(fmt: Format, rows: list[dict], headers: list[str], table_rows: list[list[object]], obj=None):
    if fmt is Format.json:
        typer.echo(render.to_json(obj if obj is not None else rows))
    elif fmt is Format.csv:
        typer.echo(render.to_csv(rows), nl=False)
    else:
        typer.echo(render.table(table_rows, headers))
