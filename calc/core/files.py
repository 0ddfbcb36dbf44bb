"""Writing output files atomically: nothing half-written, ever.

Every report, table, chart and calibrated profile goes through ``atomic_write``:
a temp file in the target folder, then ``os.replace``. Errors a user can cause
(missing folder, no permission) become one SpecError naming the option.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

from calc.core.errors import SpecError


def check_writable(path: Path, option: str = "--out") -> Path:
    """The folder must exist and be writable, and the path must not be a folder."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise SpecError(option, None, f"{path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or path.is_dir():
        raise SpecError(option, None, f"{path}: cannot write there")
    return path


def atomic_write(path: Path | str, content: str | bytes | Callable[[IO], object], option: str = "--out") -> Path:
    """Write text, bytes, or whatever ``content(fh)`` writes to a binary handle, atomically.
    The file gets the usual 0o644 mode (mkstemp would leave it 0o600)."""
    path = check_writable(Path(path), option)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
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


def _discard(tmp: str) -> None:
    if os.path.exists(tmp):
        os.unlink(tmp)
