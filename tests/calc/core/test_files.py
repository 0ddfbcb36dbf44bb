"""Atomic output: a failed write leaves the old file and no temp file behind."""

import os
import socket
import stat
from pathlib import Path

import pytest

from calc.core.errors import SpecError
from calc.core.files import atomic_write, out_folder


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
from calc.core.files import atomic_write, out_folder

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


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a character device needs root")
def test_a_device_node_is_never_replaced(tmp_path):
    """As root, os.replace over a device node would leave a regular file where /dev/null was."""
    node = tmp_path / "null"
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    with pytest.raises(SpecError, match="not a regular file"):
        atomic_write(node, "x", "--fit-out")
    assert stat.S_ISCHR(os.stat(node).st_mode)


def test_fifos_sockets_and_folders_are_never_replaced(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(SpecError, match="not a regular file"):
        atomic_write(fifo, "x")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    with pytest.raises(SpecError, match="not a regular file"):
        atomic_write(tmp_path / "sock", "x")
    sock.close()
    (tmp_path / "dir").mkdir()
    with pytest.raises(SpecError, match="folder"):
        atomic_write(tmp_path / "dir", "x")
    link = tmp_path / "link"  # a symlink to a regular file is written through (the link is replaced)
    (tmp_path / "real").write_text("old")
    link.symlink_to(tmp_path / "real")
    atomic_write(link, "new")
    assert link.read_text() == "new"


def test_long_and_deep_paths_are_one_line(tmp_path):
    # a 255-byte name fits: its temp file's name is shortened (1 + 255 + 22 bytes would not fit)
    name = "n" * 255
    atomic_write(tmp_path / name, "ok")
    assert (tmp_path / name).read_text() == "ok"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    with pytest.raises(SpecError, match="longer than 255 bytes"):
        atomic_write(tmp_path / ("n" * 256), "x", "--table")
    with pytest.raises(SpecError, match="longer than 255 bytes"):
        out_folder(tmp_path / ("d" * 300), "--out")
    with pytest.raises(SpecError, match="folders deep"):
        out_folder(tmp_path.joinpath(*["a"] * 2000), "--out", parents=True)
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(SpecError, match="cannot look it up"):
        out_folder(loop / "x", "--out", parents=True)
    with pytest.raises(SpecError, match="cannot look it up"):
        atomic_write(loop / "x.yaml", "x", "--out")


def test_a_huge_raised_limit_reads_only_the_file(tmp_path, monkeypatch):
    """ROOFLINE_MAX_YAML_KB=1e12 (a petabyte) once made the reader ask for a petabyte buffer
    before reading a byte: MemoryError (fuzz, issue 25). It now reads a MiB at a time."""
    import io

    from calc.core import files
    from calc.core.files import read_text

    path = tmp_path / "m.yaml"
    path.write_text("name: m\n")
    asked = []
    real_open = open

    class Spy(io.BufferedReader):
        def read(self, size=-1):
            asked.append(size)
            return super().read(size)

    monkeypatch.setattr(files, "open", lambda p, mode: Spy(real_open(p, "rb", buffering=0)), raising=False)
    assert read_text(path, limit=10**15) == "name: m\n"
    assert max(asked) == files.CHUNK_BYTES  # never the limit itself
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * (3 * files.CHUNK_BYTES + 5))
    assert len(read_text(big, limit=10**15)) == 3 * files.CHUNK_BYTES + 5  # whole, over several chunks
    with pytest.raises(SpecError, match="exceeds"):
        read_text(big, limit=files.CHUNK_BYTES + 1)  # the limit still holds across chunks
