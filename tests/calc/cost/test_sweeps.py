"""Sweeps: the grid, its columns and units, the library entry, the CLI and its errors."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import calc
from calc.cli.app import app
from calc.cli.values import parse_values

runner = CliRunner()


def test_parse_values():
    assert parse_values("8", "--b") == [8]
    assert parse_values("1,8,64", "--b") == [1, 8, 64]
    assert parse_values("128:512:128", "--b") == [128, 256, 384, 512]  # inclusive
    assert parse_values("1,4:8:2", "--b") == [1, 4, 6, 8]
    for bad in ("", "a", "5:1", "1:5:0", "1:2:3:4"):
        with pytest.raises(calc.SpecError):
            parse_values(bad, "--b")


def test_library_sweep_matches_estimate():
    df = calc.sweep(["llama-3.1-8b", "mistral-7b"], ["h100-sxm", "l4"], batch=[1, 16], prompt_len=[128, 2048],
                    output_len=[64], tp=[1, 2])
    assert len(df) == 2 * 2 * 2 * 2 * 2
    row = df[(df.model == "mistral-7b") & (df.hardware == "l4") & (df.tp == 2) & (df.batch == 16)
             & (df.prompt_len == 2048)].iloc[0]
    est = calc.estimate("mistral-7b", "l4", 16, 2048, 64, tp=2)
    assert row.ttft_s == pytest.approx(float(est.ttft_s))
    assert row.tpot_s == pytest.approx(float(est.tpot_s))
    assert row.memory_fits == bool(est.memory.fits)


# Columns only a sweep has (prices); every other column is `estimate --format csv`'s name for it.
SWEEP_ONLY = {"usd_per_hour", "usd_per_million_output_tokens"}


def test_sweep_columns_are_estimate_csv_columns():
    # One contract: a quantity in both has estimate's name (README, "Column names") and its value.
    df = calc.sweep("llama-3.1-8b", "l4", batch=[8], prompt_len=[1024], output_len=[64], tp=[2])
    r = runner.invoke(app, ["estimate", "-m", "llama-3.1-8b", "--hardware", "l4", "--batch", "8",
                            "--prompt-len", "1024", "--output-len", "64", "--tp", "2", "--format", "csv"])
    import csv
    import io

    head, values = list(csv.reader(io.StringIO(r.stdout)))
    est = dict(zip(head, values, strict=True))
    assert "prompt_tokens" not in df.columns and "weights_bytes_per_gpu" not in df.columns
    assert set(df.columns) - set(est) <= SWEEP_ONLY, set(df.columns) - set(est) - SWEEP_ONLY
    row = df.iloc[0]
    for col in set(df.columns) - SWEEP_ONLY:
        want = est[col]
        got = row[col]
        if isinstance(got, (str, bool)) or want in ("True", "False", "true", "false"):
            assert str(got).lower() == want.lower(), col
        else:
            assert float(got) == pytest.approx(float(want), rel=1e-6), col


def test_price_columns():
    df = calc.sweep("llama-3.1-8b", "h100-sxm", batch=8, prompt_len=512, output_len=256, tp=[1, 2])
    price = calc.load_hardware("h100-sxm").price.usd_per_hour
    assert df.usd_per_hour.tolist() == [price, 2 * price]
    r = df.iloc[0]
    assert r.usd_per_million_output_tokens == pytest.approx(price / 3600 / r.output_tokens_per_s * 1e6)


def test_cli_sweep_writes_csv_and_jsonl(tmp_path):
    out = tmp_path / "s.csv"
    r = runner.invoke(app, ["sweep", "--batch", "1,8", "--prompt-len", "128:384:128", "--out", str(out)])
    assert r.exit_code == 0, r.output
    lines = out.read_text().strip().splitlines()
    assert len(lines) == 1 + 6 and lines[0].startswith("model,hardware")
    js = tmp_path / "s.jsonl"
    r = runner.invoke(app, ["sweep", "--context", "1024,2048", "--batch", "4", "--out", str(js)])
    rows = [json.loads(x) for x in js.read_text().splitlines()]
    assert [x["decode_context"] for x in rows] == [1024, 2048]
    assert rows[1]["tpot_s"] > rows[0]["tpot_s"]


@pytest.mark.parametrize("args,needle", [
    (["--batch", ""], "no values"),
    (["--batch", "1:100000", "--prompt-len", "1:2000", "--output-len", "1:1000"], "--yes"),
    (["--out", "/nonexistent-dir/x.csv"], "does not exist"),
    (["--out", "x.xlsx"], ".parquet or .jsonl"),
    (["--columns", "nope"], "unknown column"),
    (["--tp", "3"], "--tp"),
])
def test_cli_sweep_errors(args, needle):
    r = runner.invoke(app, ["sweep", *args])
    assert r.exit_code == 2 and needle in r.output


def test_sweep_is_vectorised_not_a_loop(monkeypatch):
    # 20,000 scenarios through one model/hardware pair: one estimator call over the grid's axes
    # per BLOCK of them, not one per scenario (how fast that is, `python -m calc.bench` prints)
    import calc.cost.sweep as sw

    calls = []
    real = sw.estimate
    monkeypatch.setattr(sw, "estimate", lambda *a, **k: calls.append(np.broadcast(*a[2:5]).size) or real(*a, **k))
    df = calc.sweep(batch=list(range(1, 101)), prompt_len=list(range(64, 12864, 64)), output_len=[128])
    assert len(df) == 20_000 and np.isfinite(df.ttft_s).all()
    assert sum(calls) == 20_000 and len(calls) == -(-20_000 // sw.BLOCK)


def test_sweep_blocks_keep_the_nested_row_order(monkeypatch):
    # small blocks force both ways of cutting the grid; rows stay batch, prompt, output nested
    import calc.cost.sweep as sw

    expected = calc.sweep(batch=[1, 2, 3], prompt_len=[64, 128, 256, 512, 1024], output_len=[2, 16, 64])
    for block in (7, 20):
        monkeypatch.setattr(sw, "BLOCK", block)
        df = calc.sweep(batch=[1, 2, 3], prompt_len=[64, 128, 256, 512, 1024], output_len=[2, 16, 64])
        assert df[["batch", "prompt_len", "output_len"]].values.tolist() == [
            [b, t, g] for b in (1, 2, 3) for t in (64, 128, 256, 512, 1024) for g in (2, 16, 64)]
        assert df.equals(expected)


def test_a_grid_whose_table_would_not_fit_in_memory_is_refused_before_it_runs(monkeypatch):
    """1,000 scenarios x PEAK_BYTES_PER_SCENARIO (1,100 B, measured) = 1.1 MB; with 1 MB free the
    sweep refuses in one line, naming both, before computing anything (a 25.6 million-scenario --yes
    grid needed about 28 GB on this 24 GB machine: the fuzz campaign's memory blow-up)."""
    from calc.core import limits
    from calc.cost import sweep as sweep_mod

    assert sweep_mod.PEAK_BYTES_PER_SCENARIO == 1100
    monkeypatch.setattr(limits, "host_available_bytes", lambda: 1e6)
    called = []
    monkeypatch.setattr(sweep_mod, "estimate", lambda *a, **k: called.append(1))
    with pytest.raises(calc.SpecError, match=r"1,000 scenarios need about 0.0 GB .* more than the 0.0 GB free"):
        calc.sweep(calc.load_model("llama-3.1-8b"), calc.load_hardware("h100-sxm"), batch=list(range(1, 11)),
                   prompt_len=list(range(1, 101)))
    assert not called
    monkeypatch.undo()  # with the machine's own free memory the same grid runs
    r = runner.invoke(app, ["sweep", "--batch", "1:10", "--prompt-len", "1:100"])
    assert r.exit_code == 0 and len(r.output.strip().splitlines()) == 1 + 1000


def test_running_out_of_memory_past_the_guards_is_one_line(monkeypatch):
    import calc.cli.sweep as cli_sweep

    def boom(*a, **k):
        raise MemoryError

    monkeypatch.setattr(cli_sweep, "sweep_frame", boom)
    r = runner.invoke(app, ["sweep"])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and "out of memory" in r.output
