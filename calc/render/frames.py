"""Tables of results (pandas DataFrames) to files: CSV or JSON lines, written atomically."""

from __future__ import annotations

from pathlib import Path

from calc.core.errors import SpecError
from calc.core.files import atomic_write


def write_frame(frame, path) -> None:
    """CSV, or JSON lines for .jsonl/.json, written atomically (temp file, then rename)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".jsonl", ".json"):
        raise SpecError("--out", None, f"{path}: use a .csv or .jsonl file name")
    if suffix == ".csv":
        atomic_write(path, lambda fh: frame.to_csv(fh, index=False))
    else:
        atomic_write(path, lambda fh: frame.to_json(fh, orient="records", lines=True))
