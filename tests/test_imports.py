"""The CLI starts fast: `import calc` and `roofline --help` pull in no torch, matplotlib or pandas."""

import subprocess
import sys

HEAVY = ("torch", "matplotlib", "pandas")
CHECK = "import sys; {stmt}; print(' '.join(m for m in {heavy!r} if m in sys.modules))"


def _heavy_after(stmt: str) -> str:
    code = CHECK.format(stmt=stmt, heavy=HEAVY)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_import_calc_is_light():
    assert _heavy_after("import calc, calc.cli.app, calc.cost.latency, calc.render.estimate, calc.cost.breakdown") == ""


def test_roofline_help_is_light():
    stmt = ("from typer.testing import CliRunner; from calc.cli.app import app; "
            "r = CliRunner().invoke(app, ['--help']); assert r.exit_code == 0, r.output")
    assert _heavy_after(stmt) == ""


def test_estimate_command_is_light():
    stmt = ("from typer.testing import CliRunner; from calc.cli.app import app; "
            "r = CliRunner().invoke(app, ['estimate', '-m', 'llama-3.1-8b', '--hardware', 'h100-sxm']); "
            "assert r.exit_code == 0, r.output")
    assert _heavy_after(stmt) == ""
