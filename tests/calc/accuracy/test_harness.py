"""The published rows, a row predicted by hand, the harness on a subset, the command."""

import csv

import numpy as np
import pytest
from typer.testing import CliRunner

from calc import load_hardware, load_model
from calc.accuracy.harness import MODELS, PUBLISHED, load_rows, predict, run, stats
from calc.accuracy.rows import METRICS
from calc.accuracy.summary import TARGET_MEDIAN, TARGET_ROWS, done_when
from calc.cli.app import app
from calc.cost.latency import estimate
from calc.cost.setup import Setup


def test_rows_load_with_their_conditions_and_publisher():
    rows, skipped = load_rows()
    raw = list(csv.DictReader(open(PUBLISHED, newline="")))
    assert len(rows) + len(skipped) == len(raw)
    assert all(r["publisher"] and r["source"] and r["unit"] and r["metric"] in METRICS for r in raw)
    assert len({r.id for r in rows}) == len(rows)
    assert {r.metric for r in rows} >= {"decode_tokens_per_s", "prefill_tokens_per_s", "ttft_s", "output_tokens_per_s"}
    assert len({r.hardware for r in rows}) >= 5 and len({r.engine for r in rows}) >= 2
    assert len({r.publisher for r in rows}) >= 8


def test_a_batch1_decode_row_by_hand():
    # llama.cpp, Llama-3-8B F16 on an RTX 4090, tg512: 512 tokens from an empty context
    [row] = [r for r in load_rows()[0] if r.id == "xd-rtx-4090-8b-f16-tg512"]
    est = estimate(load_model("llama-3-8b"), load_hardware("rtx-4090"), 1, 1, 512,
                   Setup.of(weight_dtype="fp16", kv_dtype="fp16", ideal=True))
    assert predict(row, None) == pytest.approx(1 / float(est.tpot_s))
    # the ideal roofline reads every weight but the embedding table (one row of it) per token:
    # (8,030,261,248 - 128,256 x 4,096) x 2 B = 15.01 GB at 1.008 TB/s, ~67 tokens/s at most
    weights = (8_030_261_248 - 128_256 * 4_096) * 2
    assert 0.97 * 1.008e12 / weights < predict(row, None) < 1.008e12 / weights


def test_loso_on_a_subset_of_three_publishers():
    rows = load_rows()[0]
    pubs = sorted({r.publisher for r in rows})[:3]
    sub = [r for r in rows if r.publisher in pubs and r.metric != "output_tokens_per_s"][:12]
    r = run(rows=sub)
    assert set(r.folds) == {x.publisher for x in sub}
    assert [x.row.id for x in r.results] == [x.id for x in sub]
    for x in r.results:  # every model predicts every row (a time); the ideal roofline is never slower
        assert all(getattr(x, w) > 0 for w, _ in MODELS)
        assert x.ideal <= x.current * (1 + 1e-9), (x.row.id, x.ideal, x.current)
    lines = done_when(r.results, len(sub))
    # each target's mark follows its figure, whichever way the figure goes
    errors = sorted(abs(x.error("current")) for x in r.results if x.error("current") == x.error("current"))
    median = float(np.median(errors))
    assert lines[0].startswith("LOSO median |error|")
    assert lines[0].endswith(f"{'met' if median <= TARGET_MEDIAN else 'NOT met'})"), (lines[0], median)
    assert lines[-1].startswith("rows") and lines[-1].endswith(f"{'met' if len(sub) >= TARGET_ROWS else 'NOT met'})")


@pytest.mark.slow
def test_loso_folds_and_bounds_over_every_publisher_but_the_largest():
    # every publisher but the largest (NVIDIA's TensorRT-LLM docs: 253 of the 355 rows, which would
    # triple the time; `roofline accuracy` fits and scores them all): a fold per publisher, llama.cpp's
    # own kernels among them
    rows = load_rows()[0]
    publishers = {r.publisher for r in rows}
    largest = max(publishers, key=lambda p: sum(r.publisher == p for r in rows))
    r = run(rows=[x for x in rows if x.publisher != largest])
    assert len(r.folds) == len(publishers) - 1 >= 9 and "llama.cpp" in {x.row.preset for x in r.results}
    assert set(r.folds) == {x.row.publisher for x in r.results}
    for fold in [*r.folds.values(), r.fitted_all]:  # every fitted value within its stated bounds
        for name, preset in fold.items():
            for f, p in r.spec.fitted.items():
                if not preset.ideal and r.spec.applies(f, name):
                    lo, hi = p.bounds  # a fit at a bound may land a rounding error past it
                    assert lo - 1e-9 * max(abs(lo), 1) <= getattr(preset, f) <= hi + 1e-9 * max(abs(hi), 1), (name, f)
    cur = stats([x.error("current") for x in r.results])
    print(f"LOSO median {cur['median']:.1%} p90 {cur['p90']:.1%} over {cur['n']} rows")
    assert cur["n"] >= 0.95 * len(r.results)


def test_accuracy_command_writes_the_report_without_fit(tmp_path):
    res = CliRunner().invoke(app, ["accuracy", "--no-fit", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "NO FIT median |error|" in res.output and "TTFT bias" in res.output
    assert {p.name for p in tmp_path.iterdir()} == {"README.md", "predictions.csv", "under_load_predictions.csv",
                                                    "errors.png"}
    assert "serving under load" in res.output and "## Serving under load" in (tmp_path / "README.md").read_text()
    load = list(csv.DictReader(open(tmp_path / "under_load_predictions.csv")))
    assert {"publisher", "level", "in_flight", "measured", "current", "current_error"} <= set(load[0])
    assert sum(1 for r in load if r["current"] not in ("", "nan")) >= 0.95 * len(load)
    from calc.accuracy.bands import table_residuals  # the bands read the load rows' residuals from this file

    assert len(table_residuals(tmp_path / "under_load_predictions.csv")[0]) >= 0.95 * len(load)
    head = next(csv.reader(open(tmp_path / "predictions.csv")))
    assert {"ideal", "previous", "presets", "current", "publisher"} <= set(head)


def test_accuracy_without_out_writes_nothing_and_says_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["accuracy", "--no-fit"])
    assert res.exit_code == 0, res.output
    assert list(tmp_path.iterdir()) == []  # no ./reports/accuracy/ in whatever directory it ran from
    assert "nothing written to a folder: --out DIR writes README.md" in res.output
    # the parameters it prints say how they relate to `roofline engines`
    assert "the presets as committed (`roofline engines`), not refitted (--no-fit)" in res.output


def test_accuracy_command_bad_out_is_exit_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    res = CliRunner().invoke(app, ["accuracy", "--no-fit", "--out", str(blocker / "sub")])
    assert res.exit_code == 2 and "--out" in res.output, res.output


def test_previous_presets_record_round_trips(tmp_path):
    from calc.accuracy.harness import load_previous
    from calc.accuracy.report import record_previous

    path = tmp_path / "previous.csv"
    assert load_previous(path) == {}
    record_previous(path)
    rec = load_previous(path)
    rows = load_rows()[0]
    assert set(rec) == {r.id for r in rows}
    [row] = [r for r in rows if r.id == "xd-rtx-4090-8b-f16-tg512"]
    from calc.spec.engine import engines

    assert rec[row.id] == pytest.approx(predict(row, engines()[row.preset]))


def test_every_row_is_named_in_sources_md():
    import re

    text = (PUBLISHED.parent / "SOURCES.md").read_text()
    prefixes = [p.rstrip("*") for p in re.findall(r"`([a-z0-9.-]+\*)`", text)]
    assert len(prefixes) >= 14
    raw = list(csv.DictReader(open(PUBLISHED, newline="")))
    unnamed = [r["id"] for r in raw if not any(r["id"].startswith(p) for p in prefixes)]
    assert not unnamed
    for r in raw:  # the conditions a row must state (empty only where the source does not say)
        assert r["model"] and r["gpu"] and r["engine"] and r["weight_dtype"] and r["value"], r["id"]
        assert float(r["value"]) > 0 and r["unit"], r["id"]


def test_rows_are_grouped_by_the_kernel_mechanism_they_test():
    from calc.accuracy.rows import load_rows

    rows = {r.id: r for r in load_rows()[0]}
    # NVFP4 (fp4 activations) runs the fp4 GEMM class; GGUF rows are llama.cpp's kernels
    assert rows["trt020-l33-70b-fp4-b200-tp1-128-128"].compute_dtype == "fp4"
    assert rows["trt020-l33-70b-fp4-b200-tp1-128-128"].mechanism == "fp4"
    assert rows["xd-a100-80gb-sxm-8b-q4_k_m-tg512"].mechanism == "llama.cpp"
    assert rows["trt017-l31-8b-h200-128-128"].mechanism == "other"
    assert {r.mechanism for r in rows.values()} <= {"fp4", "llama.cpp", "weight-only", "other"}


def test_a_rows_stated_activation_dtype_is_its_gemms_dtype():
    """A row's act_dtype is the dtype its GEMMs run in, even where the model ships another: a
    Q4_K_M Llama 3 8B under llama.cpp states fp16 (its CUDA backend dequantises to fp16 for
    cuBLAS), not the bf16 of Meta's checkpoint; on an RTX 3090 that is the fp16-accumulate rate,
    142.3 TFLOP/s (82 SMs x 4 tensor cores x 128 FP16 FMA x 2 x 1.695 GHz), not 71. None stated: the model's serving dtype;
    fp8 weights with none stated: fp8 GEMMs; fp8 / fp4 activations: those classes."""
    from calc.accuracy.rows import compute_dtype_of, load_rows
    from calc.cost.dtypes import Dtypes
    from calc.cost.roofline import peak_for
    from calc.spec.catalog import load_hardware, load_model

    assert compute_dtype_of("int4", "fp16") == "fp16" and compute_dtype_of("bf16", "bf16") == "bf16"
    assert compute_dtype_of("int4", None) is None and compute_dtype_of("fp8", None) == "fp8"
    assert compute_dtype_of("fp4", "fp4") == "fp4" and compute_dtype_of("bf16", "fp8") == "fp8"
    assert compute_dtype_of("fp8", "bf16") == "bf16"  # fp8 weights with 16-bit activations: W8A16, dequantised
    row = {r.id: r for r in load_rows()[0]}["xd-rtx-3090-8b-q4_k_m-pp512"]
    assert row.compute_dtype == "fp16" and load_model(row.model).serving_dtype == "bf16"
    dt = Dtypes.resolve(load_model(row.model), row.weight_dtype, row.kv_dtype, row.compute_dtype)
    assert peak_for(load_hardware("rtx-3090"), dt, "matmul", fp16_accumulate=True) == pytest.approx(142.3e12)


def test_a_rows_bad_activation_dtype_names_the_file_row_and_column(tmp_path):
    """An act_dtype that is no dtype, or a storage format no matmul runs in, is an error in the data:
    one SpecError naming the file, the row and act_dtype (not an option the user never passed)."""
    from calc import SpecError
    from calc.accuracy.rows import PUBLISHED, load_rows

    lines = PUBLISHED.read_text().splitlines()
    header, first = lines[0], lines[1]
    cols = header.split(",")
    for bad, why in (("bf61", "unknown"), ("int4", "storage format")):
        row = next(csv.reader([first]))
        row[cols.index("act_dtype")] = bad
        f = tmp_path / f"{bad}.csv"
        with open(f, "w", newline="") as fh:
            csv.writer(fh).writerows([cols, row])
        with pytest.raises(SpecError) as exc:
            load_rows(f)
        assert str(f) in str(exc.value) and "act_dtype" in str(exc.value) and row[0] in str(exc.value)
        assert why in str(exc.value)
