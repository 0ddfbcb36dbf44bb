"""Atomic output: a failed write leaves the old file and no temp file behind."""

import os
import stat
from pathlib import Path

import pytest

from calc.core.errors import SpecError
from calc.core.files import atomic_write


def test_write_is_atomic(tmp_path, monkeypatch):
    target = tmp_path / "p.yaml"
    target.write_text("old\n")

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(SpecError, match="cannot write"):
        atomic_write(target, "new\n")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["p.yaml"]


def test_writes_text_bytes_and_callables_readable_by_all(tmp_path):
    atomic_write(tmp_path / "a.txt", "text")
    atomic_write(tmp_path / "b.bin", b"\x00\x01")
    atomic_write(tmp_path / "c.txt", lambda fh: fh.write(b"from a writer"))
    assert (tmp_path / "a.txt").read_text() == "text"
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    assert (tmp_path / "c.txt").read_text() == "from a writer"
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o644


def test_missing_folder_names_the_option(tmp_path):
    with pytest.raises(SpecError, match="--out.*does not exist"):
        atomic_write(tmp_path / "nope" / "x.csv", "x")


def test_read_text_refuses_special_files_long_names_and_bad_encoding(tmp_path, monkeypatch):
    import os

    import pytest

    from calc.core.errors import SpecError
    from calc.core.files import read_text

    fifo = tmp_path / "x.yaml"
    os.mkfifo(fifo)
    with pytest.raises(SpecError, match="not a regular file"):
        read_text(fifo)  # refused before open(): it would block
    with pytest.raises(SpecError, match="not a regular file"):
        read_text("/dev/zero")
    with pytest.raises(SpecError, match="longer than 255"):
        read_text(tmp_path / ("a" * 300 + ".yaml"))
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(SpecError, match="not UTF-8"):
        read_text(bad)
    big = tmp_path / "big.yaml"
    big.write_bytes(b"x" * 2_000_001)
    monkeypatch.setenv("ROOFLINE_MAX_FILE_MB", "2")
    with pytest.raises(SpecError, match="ROOFLINE_MAX_FILE_MB"):
        read_text(big)
    assert read_text(bad.with_name("ok.yaml").write_text("a: 1\n") and bad.with_name("ok.yaml")) == "a: 1\n"


_SLOW_WRITER = """
import sys, time
from calc.core.files import atomic_write

def slow(fh):
    for _ in range(200):
        fh.write(b"new" * 1000)
        fh.flush()
        print("writing", flush=True)
        time.sleep(0.01)

atomic_write(sys.argv[1], slow)
"""


def test_sigkill_during_a_write_leaves_the_old_file_and_the_next_write_cleans_up(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from calc.core.files import atomic_write

    target = tmp_path / "out.csv"
    target.write_text("old\n")
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_WRITER, str(target)], cwd=root,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"  # the temp file exists and is half-written
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert target.read_text() == "old\n"  # the old file, whole
    stale = list(tmp_path.glob(".out.csv.*.tmp"))
    assert len(stale) == 1
    atomic_write(target, "fresh\n")  # the next run of the same target removes the dead writer's temp
    assert target.read_text() == "fresh\n" and not list(tmp_path.glob(".out.csv.*.tmp"))


def test_a_live_writers_temp_is_left_alone(tmp_path):
    import os

    from calc.core.files import atomic_write

    live = tmp_path / f".out.csv.{os.getppid()}.abcd.tmp"  # our parent is alive
    live.write_text("busy")
    atomic_write(tmp_path / "out.csv", "x")
    assert live.exists()
