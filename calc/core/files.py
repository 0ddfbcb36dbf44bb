"""Reading input files safely and writing output files atomically: nothing half-written, ever.

``read_text`` is the one way an input file is read: a regular file (not a FIFO, a device
or a folder), at most ``limits.max_file_bytes()`` bytes, UTF-8; every problem is one SpecError.

Every report, table, chart and calibrated profile goes through ``atomic_write``:
a temp file in the target folder, then ``os.replace``. Errors a user can cause
(missing folder, no permission) become one SpecError naming the option.
"""

from __future__ import annotations

import glob
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

from calc.core import limits
from calc.core.errors import SpecError

NAME_MAX = 255  # bytes in one path component on Linux, macOS and Windows file systems
PATH_MAX = 4096  # bytes in a whole path (Linux's PATH_MAX)
# A writer's temp file is ``.NAME.PID.XXXXXXXX.tmp``: 1 + 1 + 7 (PID) + 1 + 8 + 4 bytes around
# NAME, so a target name longer than NAME_MAX - 22 is shortened in its temp file's name.
TEMP_NAME_MAX = NAME_MAX - 22
MAX_DEPTH = 256  # folders in an output path (os.makedirs recurses once per missing folder)


def check_path(path: Path | str, option: str = "--out") -> Path:
    """A path the system can look up: no component over NAME_MAX bytes, at most PATH_MAX in all
    (past either, every lookup raises ENAMETOOLONG); one SpecError otherwise."""
    path = Path(path)
    if len(os.fsencode(str(path))) > PATH_MAX:
        raise SpecError(option, None, f"{_short(path)}: the path is longer than {PATH_MAX} bytes")
    if any(len(os.fsencode(part)) > NAME_MAX for part in path.parts):
        raise SpecError(option, None, f"{_short(path)}: a name in the path is longer than {NAME_MAX} bytes")
    if len(path.parts) > MAX_DEPTH:
        raise SpecError(option, None, f"{_short(path)}: the path is {len(path.parts)} folders deep "
                                      f"(at most {MAX_DEPTH})")
    return path


def stat_of(path: Path, option: str):
    """os.stat of ``path`` (None when absent); a path the system refuses (a symlink loop, a
    component that is not a folder) is one SpecError."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise SpecError(option, None, f"{_short(path)}: a component of the path is not a folder") from None
    except OSError as exc:
        raise SpecError(option, None, f"{_short(path)}: cannot look it up ({exc.strerror or exc})") from None


def check_writable(path: Path, option: str = "--out") -> Path:
    """The folder must exist and be writable; the path, when it exists, must be a regular file:
    a writer never replaces a folder, a device node, a FIFO or a socket (as root, os.replace
    over /dev/null would turn it into a regular file)."""
    path = check_path(path, option)
    folder = path.parent if str(path.parent) else Path(".")
    info = stat_of(folder, option)
    if info is None or not stat.S_ISDIR(info.st_mode):
        raise SpecError(option, None, f"{_short(path)}: the folder {_short(folder)} does not exist")
    if not os.access(folder, os.W_OK):
        raise SpecError(option, None, f"{_short(path)}: cannot write there")
    info = stat_of(path, option)
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise SpecError(option, None, f"{_short(path)}: cannot write there: it is a folder")
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise SpecError(option, None, f"{_short(path)}: exists and is not a regular file (a device, FIFO "
                                      "or socket): not replaced")
    return path


def out_folder(out: Path | str, option: str = "--out", parents: bool = False, create: bool = True) -> Path:
    """An output folder, created when absent (with its parents when ``parents``; only checked
    when not ``create``); a file in the way, a missing parent or no permission is one SpecError."""
    path = check_path(out, option)
    info = stat_of(path, option)
    if info is not None and not stat.S_ISDIR(info.st_mode):
        raise SpecError(option, None, f"{_short(path)} exists and is not a folder")
    if not parents:
        parent = stat_of(path.parent, option)
        if parent is None or not stat.S_ISDIR(parent.st_mode):
            raise SpecError(option, None, f"{_short(path)}: the folder {_short(path.parent)} does not exist")
    if create and info is None:
        try:
            os.makedirs(path, exist_ok=True) if parents else os.mkdir(path)
        except FileExistsError:
            pass
        except OSError as exc:
            raise SpecError(option, None, f"{_short(path)}: cannot create ({exc.strerror or exc})") from None
    return path


def atomic_write(path: Path | str, content: str | bytes | Callable[[IO], object], option: str = "--out") -> Path:
    """Write text, bytes, or whatever ``content(fh)`` writes to a binary handle, atomically.
    The file gets the usual 0o644 mode (mkstemp would leave it 0o600)."""
    path = check_writable(Path(path), option)
    remove_stale_temps(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{_temp_stem(path)}.{os.getpid()}.", suffix=".tmp")
    except OSError as exc:
        raise SpecError(option, None, f"{path}: cannot write ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            if isinstance(content, str):
                fh.write(content.encode())
            elif isinstance(content, bytes):
                fh.write(content)
            else:
                content(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        _discard(tmp)
        raise SpecError(option, None, f"{path}: cannot write ({exc.strerror or exc})") from None
    except BaseException:
        _discard(tmp)
        raise
    return path


def remove_stale_temps(path: Path) -> list[Path]:
    """Delete the temp files a killed writer of ``path`` left (``.NAME.PID.XXXX.tmp`` whose PID is
    no longer running); a live writer's temp file, in a concurrent run, is left alone."""
    removed = []
    stem = _temp_stem(path)
    try:
        candidates = list(path.parent.glob(f".{glob.escape(stem)}.*.tmp"))
    except OSError:
        return removed
    for tmp in candidates:
        pid = tmp.name[len(stem) + 2:].split(".", 1)[0]
        if pid.isdigit() and not _running(int(pid)):
            try:
                tmp.unlink()
                removed.append(tmp)
            except OSError:
                pass
    return removed


def _temp_stem(path: Path) -> str:
    """The target's name as its temp file carries it: cut to TEMP_NAME_MAX bytes (at a character)."""
    name = path.name
    while len(os.fsencode(name)) > TEMP_NAME_MAX:
        name = name[:-1]
    return name


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # someone else's process, or not ours to tell: keep its file
    return True


def _discard(tmp: str) -> None:
    if os.path.exists(tmp):
        os.unlink(tmp)


def exists(path: Path | str) -> bool:
    """Path.exists, but a path the system refuses to look up (a name too long, a loop) counts
    as existing, so that reading it reports why in one line."""
    try:
        return Path(path).exists()
    except (OSError, ValueError):
        return True


def read_text(path: Path | str, what: str = "file", limit: int | None = None,
              limit_env: str = limits.FILE_BYTES_ENV) -> str:
    """The UTF-8 text of a regular file of at most ``limit`` bytes (``limits.max_file_bytes()``;
    ``limit_env`` is the variable that raises it). FIFOs and devices are refused before they
    are opened (they could block or never end)."""
    path = Path(path)
    long = next((part for part in path.parts if len(os.fsencode(part)) > NAME_MAX), None)
    if long is not None:
        raise SpecError(_short(path), None, f"a name in the path is longer than {NAME_MAX} bytes")
    try:
        info = path.stat()
    except FileNotFoundError:
        raise SpecError(path, None, "no such file") from None
    except OSError as exc:
        raise SpecError(_short(path), None, f"cannot read {what} ({exc.strerror or exc})") from None
    if stat.S_ISDIR(info.st_mode):
        raise SpecError(path, None, f"cannot read {what}: it is a folder")
    if not stat.S_ISREG(info.st_mode):
        raise SpecError(path, None, f"cannot read {what}: not a regular file (a FIFO, socket or device)")
    limit = limits.max_file_bytes() if limit is None else limit
    if info.st_size > limit:
        raise SpecError(path, None, limits.too_many("bytes", info.st_size, limit, limit_env))
    try:
        with open(path, "rb") as fh:
            data = read_at_most(fh, limit + 1)
    except OSError as exc:
        raise SpecError(path, None, f"cannot read {what} ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise SpecError(path, None, limits.too_many("bytes", len(data), limit, limit_env))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(path, None, f"not UTF-8 text (byte {exc.start}: {data[exc.start:exc.start + 1]!r})") from None


CHUNK_BYTES = 1 << 20


def read_at_most(fh: IO[bytes], size: int) -> bytes:
    """Up to ``size`` bytes of ``fh``, read a MiB at a time: ``fh.read(size)`` allocates ``size``
    bytes before it reads one, so a limit raised to a petabyte would be a MemoryError."""
    chunks, got = [], 0
    while got < size:
        chunk = fh.read(min(CHUNK_BYTES, size - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _short(path: Path) -> str:
    text = str(path)
    return text if len(text) <= 80 else f"{text[:60]}...({len(text)} characters)"
