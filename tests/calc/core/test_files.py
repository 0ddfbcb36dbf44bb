"""Atomic output: a failed write leaves the old file and no temp file behind."""

import os
import stat

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
