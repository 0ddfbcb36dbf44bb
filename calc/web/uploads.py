"""Uploads: a capped request body, and a private temporary folder for each request's files.

The page sends files as JSON (``{"files": [{"name": ..., "text": ...}], ...}``, read in the
browser), so nothing is spooled anywhere by a multipart parser: the body is read into memory
up to ``MAX_BODY_BYTES`` (a larger one is dropped unparsed and answered 413), each file is written
under its own base name (``[A-Za-z0-9._-]`` only) into a fresh folder, and the CLI's readers
(calc.core.files.read_text, through the commands' loaders) read it back from there.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from fastapi import Request

from calc.web.params import ApiError

MAX_BODY_BYTES = 8_000_000   # one request's uploads: a benchmark file is KBs, a long trace a few MB
MAX_FILES = 16
DRAIN_BYTES = 64_000_000  # a body over the limit is read and dropped up to this, then the answer is sent
ROOT_PREFIX = "roofline-web-"
SAFE = re.compile(r"[^A-Za-z0-9._-]")


async def read_json(request: Request) -> dict:
    """The request's JSON object, at most MAX_BODY_BYTES (else 413), or a 400 naming the problem."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size <= MAX_BODY_BYTES:
            chunks.append(chunk)
        elif size > DRAIN_BYTES:
            break  # read on (and drop) so the client hears the 413; past this, answer anyway
    if size > MAX_BODY_BYTES:
        raise _too_big(size)
    try:
        body = json.loads(b"".join(chunks) or b"{}")
    except (ValueError, RecursionError):
        raise ApiError(400, "roofline: error: request: malformed JSON body") from None
    if not isinstance(body, dict):
        raise ApiError(400, "roofline: error: request: expected a JSON object")
    return body


def _too_big(size: int) -> ApiError:
    return ApiError(413, f"roofline: error: upload: {size:,} bytes exceeds the page's limit of {MAX_BODY_BYTES:,} "
                         "(use the command line for larger files)")


def safe_name(name: object) -> str:
    """A file's base name with anything but letters, digits, '.', '_' and '-' replaced by '_'."""
    base = SAFE.sub("_", Path(str(name)).name)[:200].lstrip(".")
    return base or "upload"


def files_of(body: dict, key: str = "files") -> list[tuple[str, str]]:
    """(safe name, text) of each uploaded file; names made unique; at most MAX_FILES."""
    raw = body.get(key) or []
    if not isinstance(raw, list) or not all(isinstance(f, dict) for f in raw):
        raise ApiError(400, f"roofline: error: {key}: expected a list of {{name, text}}")
    if len(raw) > MAX_FILES:
        raise ApiError(400, f"roofline: error: {key}: {len(raw)} files, more than the page takes ({MAX_FILES})")
    out, seen = [], set()
    for f in raw:
        text = f.get("text")
        if not isinstance(text, str):
            raise ApiError(400, f"roofline: error: {key}: {safe_name(f.get('name'))}: no text")
        name = safe_name(f.get("name"))
        stem, i = name, 1
        while name in seen:
            i += 1
            name = f"{i}-{stem}"
        seen.add(name)
        out.append((name, text))
    return out


def new_folder(root: Path | None = None) -> Path:
    """A fresh private folder (mode 0700) under ``root`` (the server's) or the system's temp dir."""
    return Path(tempfile.mkdtemp(prefix=ROOT_PREFIX, dir=root))


@contextmanager
def request_folder(root: Path | None = None):
    """A per-request folder, removed with everything in it when the request is answered."""
    folder = new_folder(root)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def write_files(folder: Path, files: list[tuple[str, str]]) -> list[Path]:
    """The uploads written into ``folder`` (atomically, as every output is)."""
    from calc.core.files import atomic_write

    return [atomic_write(folder / name, text, "upload") for name, text in files]


def unfold(text: str, folder: Path) -> str:
    """A message without the private folder's path: file names as the user uploaded them."""
    return text.replace(f"{folder}/", "").replace(str(folder), ".")
