"""A wheel install works from any directory: .ci/wheel-check builds the wheel from the checkout's
files, installs it into a fresh venv outside the checkout and runs the README tour's torch-free
commands from there (so the catalogs, presets and published rows must come from the wheel)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_wheel_installs_and_runs_the_tour_outside_the_checkout():
    # The interpreter running the tests builds the wheel and lends the venv its packages (a
    # virtualenv's, not the base interpreter's), whichever `python3` is first on PATH.
    env = {**os.environ, "PYTHON": sys.executable}
    r = subprocess.run(["bash", str(ROOT / ".ci" / "wheel-check")], capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert r.stdout.strip().endswith("wheel check: ok")
