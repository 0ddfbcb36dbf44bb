"""validate.measurements.read_rows: a bad calibration CSV is one SpecError naming file, line and column."""

from __future__ import annotations

from pathlib import Path

import pytest

from calc.core.errors import SpecError
from validate.measurements import read_rows

ROOT = Path(__file__).resolve().parents[2]
SAVED = ROOT / "reports" / "validation" / "cpu-llama-3.2-1b-1layer" / "measurements.csv"


def _with_cell(tmp_path, column: str, value: str) -> Path:
    lines = SAVED.read_text().splitlines()
    header = lines[0].split(",")
    cells = lines[1].split(",")
    cells[header.index(column)] = value
    p = tmp_path / "m.csv"
    p.write_text("\n".join([lines[0], ",".join(cells), *lines[2:]]) + "\n")
    return p


def test_saved_measurements_read():
    rows = read_rows(SAVED)
    assert rows and all(r.point.batch >= 1 for r in rows)


@pytest.mark.parametrize("column,value", [
    ("dtype", " "), ("dtype", "fp7"), ("samples", "-inf"), ("measured_s", "inf"), ("measured_s", "nan"),
    ("batch", "-1"), ("batch", "1.5"), ("prompt_len", "1e20"), ("min_s", "x"),
])
def test_bad_cells_name_line_and_column(tmp_path, column, value):
    with pytest.raises(SpecError) as err:
        read_rows(_with_cell(tmp_path, column, value))
    msg = str(err.value)
    assert "line 2" in msg and (column in msg or "dtype" in msg) and "\n" not in msg


def test_truncated_row_and_row_cap(tmp_path, monkeypatch):
    text = SAVED.read_text()
    p = tmp_path / "cut.csv"
    p.write_text(text[: text.index("\n", text.index("\n") + 1) + 30])  # the second row cut mid-way
    with pytest.raises(SpecError, match="truncated"):
        read_rows(p)
    monkeypatch.setenv("ROOFLINE_MAX_CSV_ROWS", "10")
    with pytest.raises(SpecError, match="ROOFLINE_MAX_CSV_ROWS"):
        read_rows(SAVED)


def test_non_utf8_csv(tmp_path):
    p = tmp_path / "m.csv"
    p.write_bytes(SAVED.read_bytes().replace(b"cpu", b"cp\xe9", 1))
    with pytest.raises(SpecError, match="not UTF-8"):
        read_rows(p)
