"""The `roofline` command line: one thin function per subcommand (parse -> calc -> render).

Counting conventions (also in README): a multiply-add is 2 FLOPs; linear FLOPs
are the weight matmuls; attention FLOPs are QK^T and PV over the positions a
query may see (causal in prefill); everything else is "other". GB = 1e9 bytes.

Each command group lives in its own module and registers on ``calc.cli.base.app``;
importing them here puts them on the app in the order ``--help`` lists them.
"""

# ruff: noqa: I001  (the import order is the order --help lists the commands)
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from calc.cli import catalog, estimate, plan, compare, sweep  # noqa: F401  (registered in this order)
from calc.cli.base import app


def validation_package() -> str:
    """The validation package's import name. The wheel ships the repository's validate/ folder
    as ``calc.validate`` (pyproject's package-dir), so it takes no generic top-level name; a
    checkout imports the folder beside calc/ as ``validate`` (its modules import each other
    relatively, so either name works), and only that folder, never another project's."""
    beside = Path(__file__).resolve().parents[2] / "validate" / "__init__.py"
    if beside.is_file():
        found = importlib.util.find_spec("validate")
        if found is not None and found.origin and Path(found.origin).resolve() == beside:
            return "validate"
    return "calc.validate"


# profile, validate, calibrate, validate-comm: registered on import; torch only inside them.
importlib.import_module(validation_package() + ".cli")
import calc.web.command  # noqa: E402, F401  (serve; the web stack only inside it)

__all__ = ["app", "main"]


def _only(name: str):
    """The app with just the command ``name`` on it: typer builds the options of every
    registered command at start-up (inspecting each signature), which a run of one command
    need not pay. Commands resolve, parse and fail exactly as on the full app."""
    import typer

    infos = [c for c in app.registered_commands if (c.name or c.callback.__name__) == name]
    if not infos:
        return app  # unknown, or an option such as --help: the full app answers
    one = typer.Typer(**{k: getattr(app.info, k) for k in ("cls", "no_args_is_help", "help")},
                      pretty_exceptions_show_locals=False, add_completion=False)
    one.registered_commands = infos
    one.callback()(lambda: None)  # a group, as the full app is (one command alone would be the app)
    return one


def main() -> None:
    (_only(sys.argv[1]) if len(sys.argv) > 1 else app)()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
