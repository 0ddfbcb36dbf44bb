"""The roofline CLI in process, for checking the page against it."""

import json

from typer.testing import CliRunner

from calc.cli.app import app


def cli(*args) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of the roofline CLI, in process."""
    r = CliRunner().invoke(app, [str(a) for a in args])
    return r.exit_code, r.stdout, r.stderr


def cli_json(*args):
    code, out, err = cli(*args, "--format", "json")
    assert code == 0, err
    return json.loads(out)
