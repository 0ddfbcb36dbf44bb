"""Ctrl-C at any moment, start-up included, is one line and exit 130, never a traceback."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
# the console script's lines (pyproject: roofline = "calc.cli.entry:main"), with a mark on stdout once
# calc.cli.entry is loaded (three tiny modules: before that, a signal lands in Python's own start-up,
# which is Python's to report); everything after, the app's imports included, runs inside main()
SCRIPT = ("import sys; from calc.cli.entry import main; sys.stdout.write('up'); sys.stdout.flush(); "
          "sys.argv[0] = 'roofline'; sys.exit(main())")


@pytest.mark.parametrize("delay_s", [0.01, 0.03, 0.08, 0.3, 1.0])  # 0.01: past the two statements before main()
def test_sigint_at_any_moment_is_one_line_and_130(delay_s, tmp_path):
    out = tmp_path
    # a sweep that runs for many seconds, so the signal always lands before it ends
    args = ["sweep", "--batch", "1:64", "--prompt-len", "128:32768:128", "--output-len", "16:512:16",
            "--yes", "--out", str(out / "grid.csv")]
    p = subprocess.Popen([sys.executable, "-c", SCRIPT, *args], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout.read(2) == "up"
    time.sleep(delay_s)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert "Traceback" not in err, err
    assert p.returncode == 130, (p.returncode, err)
    assert err.strip().splitlines() == ["roofline: interrupted"], err


@pytest.mark.parametrize("delay_s", [0.01, 0.3, 1.0])
def test_sigterm_is_one_line_143_and_leaves_no_temp_file(delay_s, tmp_path):
    """SIGTERM (what `kill`, systemd and container runtimes send) once ended the process on the
    spot: no word, status -15, and a writer's temp file left for the next run (kills, issue 25).
    It is now raised as an interrupt: the writer removes its temp file, one line, exit 143."""
    args = ["sweep", "--batch", "1:64", "--prompt-len", "128:32768:128", "--output-len", "16:512:16",
            "--yes", "-q", "--out", str(tmp_path / "grid.csv")]
    p = subprocess.Popen([sys.executable, "-c", SCRIPT, *args], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout.read(2) == "up"
    time.sleep(delay_s)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert "Traceback" not in err, err
    assert p.returncode == 143, (p.returncode, err)
    assert err.strip().splitlines() == ["roofline: terminated"], err
    assert list(tmp_path.iterdir()) == []  # neither a torn grid.csv nor a .grid.csv.PID.XXXX.tmp


def test_an_interrupt_wrapped_by_library_code_is_still_the_interrupt():
    # pydantic turns an exception raised while it builds a schema into a SchemaError; the signal
    # handler noted the signal, so the command ends as the interrupt (one line, 143), not a traceback
    import click
    from click.testing import CliRunner

    from calc.cli import interrupt
    from calc.cli.base import RooflineGroup

    @click.command()
    def boom():
        interrupt._received.append(signal.SIGTERM)  # what _raise_terminated notes before raising
        raise RuntimeError("SchemaError: Error building serializer: Terminated")

    try:
        r = CliRunner().invoke(RooflineGroup(name="t", commands={"boom": boom}), ["boom"])
        assert r.exit_code == interrupt.TERMINATED and r.stderr == "roofline: terminated\n"
        interrupt._received.clear()
        r = CliRunner().invoke(RooflineGroup(name="t", commands={"boom": click.command()(lambda: 1 / 0)}), ["boom"])
        assert isinstance(r.exception, ZeroDivisionError)  # without a signal, a bug stays a bug
    finally:
        interrupt._received.clear()


def test_an_interrupt_landing_in_a_callback_that_cannot_raise_is_not_lost():
    # Ctrl-C landing inside a weakref callback (CI caught one in importlib's module-lock callback)
    # raises there, where Python can only print "Exception ignored" and go on: the command then
    # ran to its end with a traceback on stderr. The unraisable hook delivers it again, so it lands
    # at the main thread's next instruction; a subprocess, so the test runner's own handlers stay.
    script = """
import gc, signal, sys, time, weakref
from calc.cli import interrupt
interrupt.catch_sigterm()
class T: pass
t = T()
def cb(ref):  # what the signal handler does when SIGINT lands in the callback
    interrupt._raise_interrupt(signal.SIGINT, None)
r = weakref.ref(t, cb)
try:
    del t; gc.collect()
    for _ in range(100):
        time.sleep(0.01)
    print("lost")
except KeyboardInterrupt:
    print("delivered")
"""
    p = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "delivered" and "Traceback" not in p.stderr, (p.stdout, p.stderr)
