"""Tables to CSV, Parquet and JSON lines by suffix; the values come back as written."""

import io

import numpy as np
import pandas as pd
import pytest

from calc.core.errors import SpecError
from calc.render.frames import flat_record, write_csv, write_frame

FRAME = pd.DataFrame({"model": ["llama-3.1-8b", "gpt2"], "batch": [1, 64], "ttft_s": [0.1 + 0.2, 1e-7],
                      "fits": [True, False]})


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".jsonl"])
def test_round_trip(tmp_path, suffix):
    path = tmp_path / f"t{suffix}"
    write_frame(FRAME, path)
    back = {".csv": pd.read_csv, ".parquet": pd.read_parquet,
            ".jsonl": lambda p: pd.read_json(p, lines=True, precise_float=True)}[suffix](path)
    assert list(back.columns) == list(FRAME.columns)
    assert back["model"].tolist() == FRAME["model"].tolist()
    assert back["batch"].tolist() == [1, 64]
    assert np.array_equal(back["ttft_s"].to_numpy(), FRAME["ttft_s"].to_numpy())  # bit-exact floats
    assert back["fits"].tolist() == [True, False]


def test_csv_is_plain_unless_a_value_needs_quotes():
    buf = io.BytesIO()
    write_csv(FRAME, buf)
    assert buf.getvalue().decode().splitlines()[:2] == ["model,batch,ttft_s,fits",
                                                        "llama-3.1-8b,1,0.30000000000000004,true"]
    buf = io.BytesIO()
    write_csv(pd.DataFrame({"why": ["a, b", 'say "x"']}), buf)
    assert pd.read_csv(io.BytesIO(buf.getvalue()))["why"].tolist() == ["a, b", 'say "x"']


def test_unknown_suffix_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match="parquet"):
        write_frame(FRAME, tmp_path / "t.txt")


def test_flat_record_moves_units_to_the_leaves():
    rec = {"config": "x", "latency_s": {"ttft_p50": 0.1}, "per_replica": {"kv_pages": 7, "bound_time_s": {"memory": 2.0}},
           "notes": [1, 2]}
    assert flat_record(rec) == {"config": "x", "ttft_p50_s": 0.1, "per_replica_kv_pages": 7,
                                "per_replica_memory_s": 2.0}
