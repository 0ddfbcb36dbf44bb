"""Tables of results (pandas DataFrames) to files: CSV, Parquet or JSON lines, by suffix.

Written through pyarrow (its CSV writer is an order of magnitude faster than pandas'
text formatting on a million rows) and atomically (temp file, then rename). Column
names carry their units (``_s``, ``_bytes``, ``_per_s``), as in the JSON contract.
"""

from __future__ import annotations

import sys
from pathlib import Path

from calc.core.errors import SpecError
from calc.core.files import atomic_write

FORMATS = {".csv": "csv", ".parquet": "parquet", ".jsonl": "jsonl", ".json": "jsonl"}


def check_table_path(path, option: str = "--out") -> Path:
    """The path, if its suffix names a table format; else a one-line SpecError."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise SpecError(option, None, f"{path}: use a .csv, .parquet or .jsonl (JSON lines) file name")
    return path


def _arrow(frame):
    import pyarrow as pa

    return pa.Table.from_pandas(frame, preserve_index=False)


def _quoting(table) -> str:
    """"none" (plain text, as pandas writes it) unless some text holds a comma, quote or newline."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for col in table.columns:
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            if pc.any(pc.match_substring_regex(pc.unique(col), '[",\r\n]')).as_py():
                return "needed"
    return "none"


def write_csv(frame, fh) -> None:
    """CSV with a header row to a binary file object: floats round-trip (shortest repr),
    booleans as true/false, text quoted only where some value needs it."""
    import pyarrow.csv as pacsv

    table = _arrow(frame)
    quoting = _quoting(table)
    names = [n if quoting == "none" else '"' + n.replace('"', '""') + '"' for n in table.column_names]
    fh.write((",".join(names) + "\n").encode())  # pyarrow would quote every name
    pacsv.write_csv(table, fh, pacsv.WriteOptions(include_header=False, quoting_style=quoting))


def print_csv(frame) -> None:
    """CSV on stdout (the bytes go to stdout's buffer, after anything printed before)."""
    sys.stdout.flush()
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:  # a text-only stream (e.g. a test's StringIO)
        import io

        raw = io.BytesIO()
        write_csv(frame, raw)
        sys.stdout.write(raw.getvalue().decode())
    else:
        write_csv(frame, buffer)
        buffer.flush()


def flat_record(record: dict) -> dict:
    """One table row from a nested JSON record: ``{"latency_s": {"ttft_p50": x}}`` becomes
    ``ttft_p50_s`` (the parent's unit moves onto each child), ``{"per_replica": {"kv_pages": n}}``
    becomes ``per_replica_kv_pages``; lists are left out."""
    out = {}
    for key, value in record.items():
        if isinstance(value, dict):
            for k, v in flat_record(value).items():
                out[f"{k}_s" if key.endswith("_s") else f"{key}_{k}"] = v
        elif not isinstance(value, (list, tuple)):
            out[key] = value
    return out


def write_frame(frame, path, option: str = "--out") -> None:
    """CSV, Parquet (.parquet) or JSON lines (.jsonl/.json), chosen by the suffix."""
    path = check_table_path(path, option)
    kind = FORMATS[path.suffix.lower()]
    if kind == "csv":
        atomic_write(path, lambda fh: write_csv(frame, fh))
    elif kind == "parquet":
        import pyarrow.parquet as pq

        atomic_write(path, lambda fh: pq.write_table(_arrow(frame), fh))
    else:
        atomic_write(path, lambda fh: write_jsonl(frame, fh))


def write_jsonl(frame, fh, chunk: int = 20_000) -> None:
    """One JSON object per row; floats exact (shortest repr, as the JSON contract writes
    them; pandas' writer keeps 10 digits), NaN as null."""
    import json

    import pandas as pd

    for i in range(0, len(frame), chunk):
        part = frame.iloc[i:i + chunk]
        part = part.astype(object).where(pd.notna(part), None)
        fh.write("".join(json.dumps(r) + "\n" for r in part.to_dict("records")).encode())
