"""Serving under load: the published load rows' schema, the held-out (LOSO) presets each
publisher's rows are predicted with, and the report table's arithmetic."""

import csv
import math
import re

import numpy as np
import pytest

from calc import SpecError
from calc.accuracy.fit import FitParam, FitSpec, loso
from calc.accuracy.loadrows import (
    COLUMNS,
    LEVELS,
    MEASURED,
    UNDER_LOAD,
    LoadRow,
    _lengths,
    drawn_lengths,
    level,
    load_rows,
    maxent_lengths,
    preset_name,
    runs,
    scenario,
    simulated_requests,
)
from calc.accuracy.rows import ENGINE_OF, PUBLISHED, Row
from calc.accuracy.underload import LoadResult, figures, held_out, predict_all, section, table
from calc.spec.catalog import hardware_catalog, model_catalog
from calc.spec.engine import engines

KNOWN_ENGINES = set(ENGINE_OF) | {"lmdeploy", "tgi"}


def _raw():
    with open(UNDER_LOAD, newline="") as fh:
        return list(csv.DictReader(fh))


def test_every_row_states_its_source_and_conditions():
    raw = _raw()
    models, hws = model_catalog(), hardware_catalog()
    assert tuple(raw[0]) == COLUMNS
    for r in raw:
        assert r["publisher"] and r["source"] and r["run"], r["id"]
        assert r["model"] in models and r["gpu"] in hws, r["id"]
        assert r["engine"] in KNOWN_ENGINES and r["engine_version"], r["id"]
        assert (r["metric"], r["statistic"]) in MEASURED, r["id"]
        assert float(r["value"]) > 0 and float(r["input_len"]) > 0 and float(r["output_len"]) > 0, r["id"]
        assert re.fullmatch(r"fixed|mean|uniform (0|0\.8)|varied (\d+/)?\d+", r["lengths"]) and r["load"] in ("concurrency", "rate", "burst"), r["id"]
        assert int(r["tp"]) >= 1 and int(r["num_gpus"]) >= int(r["tp"]), r["id"]
    assert len({r["id"] for r in raw}) == len(raw)
    rows, skipped = load_rows()
    assert len(rows) == len(raw) and not skipped


def test_the_set_is_as_broad_as_the_issue_asks():
    rows = load_rows()[0]
    assert len({r.publisher for r in rows}) >= 5
    assert len({r.engine for r in rows} - {"nim"}) >= 4  # NIM runs TensorRT-LLM: not an engine of its own
    assert max(r.in_flight or 0 for r in rows) >= 128
    assert {r.load for r in rows} == {"concurrency", "rate", "burst"}
    assert {"TTFT", "TPOT/ITL", "throughput"} <= {{"ttft_s": "TTFT", "tpot_s": "TPOT/ITL", "itl_s": "TPOT/ITL",
                                                  "output_tokens_per_s": "throughput"}.get(r.metric) for r in rows}


def test_no_row_repeats_a_per_pass_row():
    with open(PUBLISHED, newline="") as fh:
        per_pass = {r["id"] for r in csv.DictReader(fh)}
    assert not per_pass & {r["id"] for r in _raw()}


def test_every_row_is_named_in_its_sources_section():
    text = (UNDER_LOAD.parent / "SOURCES.md").read_text()
    part = text[text.index("# Sources for `under_load.csv`"):]
    prefixes = [p.rstrip("*") for p in re.findall(r"`([a-z0-9.-]+\*)`", part)]
    assert len(prefixes) >= 5
    assert not [r["id"] for r in _raw() if not any(r["id"].startswith(p) for p in prefixes)]


def _write(tmp_path, **change):
    good = {c: "" for c in COLUMNS} | dict(
        id="x1", run="x", publisher="P", source="somewhere", engine="vllm", engine_version="0.6", model="llama-3.1-8b",
        weight_dtype="bf16", gpu="h100-sxm", num_gpus="1", tp="1", load="concurrency", concurrency="8",
        input_len="128", output_len="64", lengths="fixed", metric="ttft_s", statistic="mean", value="0.1", unit="s",
        timing="server")
    rows = [good | change] if "second" not in change else [good, good | change["second"]]
    path = tmp_path / "load.csv"
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


@pytest.mark.parametrize("change, field", [
    (dict(value="-1"), "value"), (dict(value="0"), "value"), (dict(source=""), "source"),
    (dict(publisher=""), "publisher"), (dict(statistic="p42"), "metric"), (dict(metric="goodput"), "metric"),
    (dict(load="batch"), "load"), (dict(concurrency=""), "concurrency"), (dict(unit="ms"), "unit"),
    (dict(engine_args="max_num_seqs"), "engine_args"), (dict(timing=""), "timing"), (dict(timing="client"), "timing"),
    (dict(lengths="uniform 1.5"), "lengths"), (dict(lengths="uniform"), "lengths"), (dict(lengths="zipf"), "lengths"),
    (dict(second=dict(id="x2", metric="tpot_s", concurrency="16")), "concurrency"),
    (dict(second=dict(id="x2")), "metric"),  # the same statistic twice in one run
    (dict(load="burst", num_prompts="10", cached_requests="11"), "cached_requests"),  # more than the run sent
    (dict(load="burst", num_prompts="10", cached_requests="2.5"), "cached_requests"),
    (dict(load="burst", num_prompts="10", cached_requests="-1"), "cached_requests"),
    (dict(second=dict(id="x2", metric="tpot_s", cached_requests="3")), "cached_requests"),  # one run, one cache
])
def test_a_bad_row_is_one_error_naming_it(tmp_path, change, field):
    with pytest.raises(SpecError) as e:
        load_rows(_write(tmp_path, **change))
    assert field in str(e.value) and "row x" in str(e.value)


def test_cached_requests_reach_the_run_s_conditions(tmp_path):
    (row,), _ = load_rows(_write(tmp_path, load="burst", num_prompts="10", cached_requests="4"))
    assert row.cached_requests == 4
    from calc.accuracy.loadrows import scenario

    assert scenario([row], "vllm").cached_requests == 4


def test_an_unknown_model_is_skipped_with_the_reason(tmp_path):
    rows, skipped = load_rows(_write(tmp_path, model="llama-9-1t"))
    assert rows == [] and skipped == [("x1", "model llama-9-1t not in the catalog")]


def _load(rid, publisher, load="concurrency", conc=8, n=None, metric="ttft_s", stat="mean", engine="vllm", args=None):
    return LoadRow(id=rid, run=rid, publisher=publisher, engine=engine, model="llama-3.1-8b", hardware="h100-sxm", ep=1,
                   weight_dtype="bf16", kv_dtype=None, compute_dtype=None, gpus=1, tp=1, load=load,
                   concurrency=conc if load == "concurrency" else None, rate_per_s=2.0 if load == "rate" else None,
                   num_prompts=n, prompt_len=128, output_len=64, metric=metric, statistic=stat, value=1.0,
                   engine_args=args or {})


def _pass(rid, publisher):
    return Row(id=rid, publisher=publisher, engine="vllm", preset="vllm", model="llama-3.1-8b", hardware="h100-sxm",
               weight_dtype="bf16", kv_dtype=None, compute_dtype=None, gpus=1, tp=1, pp=1, batch=1, concurrency=None,
               prompt_len=128, output_len=128, metric="tpot_s", value=1.0)


def test_each_publisher_is_predicted_with_presets_fitted_without_it():
    """Three publishers with per-pass rows (A, B, C) and one with load rows only (D). The fake
    fitter marks each fit with the publishers it saw (A = 1, B = 10, C = 100 in
    step_overhead_us); the fake predictor returns the preset's mark. A's load rows must carry
    B + C = 110, B's 101, C's 11, and D's the fit on everyone, 111."""
    code = {"A": 1.0, "B": 10.0, "C": 100.0}
    per_pass = [_pass("a", "A"), _pass("b", "B"), _pass("c", "C")]
    spec = FitSpec(fitted={"step_overhead_us": FitParam(scope="engine", bounds=(0.0, 1e9), prior=0.0)})

    def fitter(train, presets, spec_, pred):
        mark = sum(code[p] for p in {r.publisher for r in train})
        return {n: p.model_copy(update={"step_overhead_us": mark}) for n, p in presets.items()}

    _, folds = loso(per_pass, engines(), spec, lambda r, p: 1.0, fitter=fitter)
    fitted_all = fitter(per_pass, engines(), spec, None)
    load = [_load("la", "A"), _load("lb", "B", load="rate"), _load("lc", "C", load="burst", n=50), _load("ld", "D")]

    def fake(sc, preset):
        return {m: preset.step_overhead_us for m in sc.measured}

    res, failed = predict_all(load, lambda pub: held_out(pub, folds, fitted_all), predictor=fake)
    assert not failed
    assert {x.row.id: x.predicted for x in res} == {"la": 110.0, "lb": 101.0, "lc": 11.0, "ld": 111.0}


def test_a_run_becomes_the_scenario_compare_predicts():
    r = _load("r", "P", conc=16, n=1000, args={"max_num_seqs": 64, "gpu_memory_utilization": 0.5})
    sc = scenario([r, LoadRow(**{**r.__dict__, "id": "r2", "metric": "output_tokens_per_s",
                                 "statistic": "aggregate", "value": 900.0})], "vllm")
    assert (sc.model, sc.hardware, sc.engine, sc.tp, sc.gpus) == ("llama-3.1-8b", "h100-sxm", "vllm", 1, 1)
    assert (sc.run.load, sc.run.concurrency, sc.max_num_seqs) == ("concurrency", 16, 64)
    assert sc.prompt_lens.tolist() == [128] and sc.output_lens.tolist() == [64]
    assert sc.measured == {"ttft_mean_s": 1.0, "output_tokens_per_s": 900.0}
    assert sc.run.num_requests == 1000  # the 1000 published
    assert sc.serving.gpu_memory_utilization == 0.5  # every engine argument reaches the scheduler


def test_uniform_lengths_are_drawn_per_request_as_the_benchmark_draws_them():
    """lengths "uniform 0.8" at L = 1024 (vLLM's and SGLang's --random-range-ratio 0.8): each of the
    run's requests gets its own prompt and output length, integers in [int(0.8 x 1024), 1024] =
    [819, 1024], mean (819 + 1024) / 2 = 921.5 (the published 0.9 x 1024 = 921.6 rounds the same);
    the scenario carries them per request, not one constant (which would keep a closed loop's
    clients in lockstep)."""
    r = LoadRow(**{**_load("u", "P", conc=8, n=4000).__dict__, "prompt_len": 1024, "output_len": 1024,
                   "range_ratio": 0.8})
    sc = scenario([r], "vllm")
    for lens in (sc.prompt_lens, sc.output_lens):
        assert lens.size == 4000 and lens.min() >= 819 and lens.max() <= 1024
        assert lens.mean() == pytest.approx(921.5, abs=3 * 59.5 / math.sqrt(4000))  # sd of U{819..1024}: 206 / sqrt(12)
    assert not np.array_equal(sc.prompt_lens, sc.output_lens)  # drawn apart
    assert np.array_equal(sc.prompt_lens, scenario([r], "vllm").prompt_lens)  # seeded: scoring repeats


def test_range_ratio_zero_draws_as_sglangs_sample_random_requests():
    """lengths "uniform 0" (bench_serving's old default --random-range-ratio 0.0): prompts from
    [max(int(1024 x 0), 1), 1024] = [1, 1024], mean (1 + 1024) / 2 = 512.5; outputs from
    [int(512 x 0), 512] = [0, 512], mean 256 (an output of 0 still yields the one token the
    simulator's floor gives it). DataCrunch's 300 prompts at 1024/1024 totalled 152,612 input
    tokens: 508.7 a prompt, within the draw's spread."""
    r = LoadRow(**{**_load("z", "P", conc=8, n=20000).__dict__, "prompt_len": 1024, "output_len": 512,
                   "range_ratio": 0.0})
    T, G = drawn_lengths(r, 20000)
    assert T.min() == 1 and T.max() == 1024 and G.min() == 0 and G.max() == 512
    assert T.mean() == pytest.approx(512.5, abs=3 * 1024 / math.sqrt(12 * 20000))  # sd of U{1..1024}: ~1024 / sqrt(12)
    assert G.mean() == pytest.approx(256.0, abs=3 * 513 / math.sqrt(12 * 20000))
    assert _lengths("uniform 0", "f") == (0.0, None) and _lengths("fixed", "f") == (None, None)
    with pytest.raises(SpecError, match="0 <= R <= 1"):
        _lengths("uniform 1.5", "f")


def test_varied_lengths_parse_as_caps_and_bad_ones_name_the_column():
    """"varied O": outputs vary up to O, prompts stay at their mean; "varied P/O": both vary."""
    assert _lengths("varied 150", "f") == (None, (None, 150))
    assert _lengths("varied 1024/2044", "f") == (None, (1024, 2044))
    for bad in ("varied", "varied 0", "varied 1.5", "varied x/10", "varied 10/", "mean 3"):
        with pytest.raises(SpecError, match="lengths.*varied P/O"):
            _lengths(bad, "f")


def test_maxent_lengths_keep_the_published_mean_and_bounds():
    """The maximum-entropy law on [1, cap] with mean m is p(k) ~ exp(-lam k): at m = (1 + cap) / 2
    lam = 0 and the law is uniform; a mean at the cap leaves every length at the cap; for a cap
    far above the mean (ShareGPT: 214 of 2044) it is a geometric law, whose median is about
    ln 2 x m = 148 (exponential: median / mean = ln 2), well below the mean: the long tail that
    fixed means hide. Every draw is rescaled to the published total, n x m."""
    rng = np.random.default_rng(1)
    u = maxent_lengths(512.5, 1024, 40000, rng)
    assert u.min() >= 1 and u.max() <= 1024 and u.mean() == pytest.approx(512.5, abs=1)
    # uniform on 1..1024: each quarter holds a quarter of the draws (sd of a share: sqrt(.25 x .75 / 40000) = 0.0022)
    assert np.histogram(u, bins=[1, 257, 513, 769, 1025])[0] / 40000 == pytest.approx([0.25] * 4, abs=0.01)
    assert maxent_lengths(80, 80, 7, rng).tolist() == [80] * 7 and maxent_lengths(90, 80, 3, rng).tolist() == [80] * 3
    g = maxent_lengths(214, 2044, 40000, rng)
    assert g.mean() == pytest.approx(214, abs=0.5) and g.max() <= 2044
    assert np.median(g) == pytest.approx(math.log(2) * 214, rel=0.05)
    few = maxent_lengths(63.5, 150, 2, rng)  # a burst of two: the total still 2 x 63.5 = 127
    assert few.sum() == pytest.approx(127, abs=1) and few.max() <= 150


def test_varied_rows_draw_outputs_around_their_mean_and_keep_fixed_prompts():
    """lengths "varied 150" (sonnet prompts of about 80 tokens, outputs ending at EOS before 150):
    prompts all at the mean, outputs spread on [1, 150] with the run's mean."""
    r = LoadRow(**{**_load("v", "P", conc=8, n=500).__dict__, "prompt_len": 80.4, "output_len": 60.0,
                   "length_caps": (None, 150)})
    sc = scenario([r], "vllm")
    assert set(sc.prompt_lens.tolist()) == {80}
    assert sc.output_lens.size == 500 and sc.output_lens.max() <= 150 and sc.output_lens.min() >= 1
    assert sc.output_lens.mean() == pytest.approx(60.0, abs=0.5) and sc.output_lens.std() > 20


def test_a_runs_engine_arguments_are_read_under_the_engines_own_names():
    """TensorRT-LLM's max_num_tokens / max_batch_size are its token budget and running cap; a
    name the preset does not map is an error in the data, naming the row."""
    r = _load("t", "P", conc=16, n=100, engine="tensorrt-llm", args={"max_batch_size": 512, "max_num_tokens": 16384})
    sc = scenario([r], "trtllm")
    assert (sc.serving.max_batched_tokens, sc.serving.max_num_seqs, sc.max_num_seqs) == (16384, 512, 512)
    bad = _load("u", "P", conc=16, n=100, engine="tensorrt-llm", args={"ep_size": 4})
    with pytest.raises(SpecError, match="ep_size"):
        scenario([bad], "trtllm")


def test_engine_arguments_in_the_data_are_read_as_compare_reads_them():
    from calc.accuracy.loadrows import _engine_args

    assert _engine_args("max_batch_size=512; enable_chunked_prefill=false;x=fp8", "f") == {
        "max_batch_size": 512, "enable_chunked_prefill": False, "x": "fp8"}
    with pytest.raises(SpecError, match="expected KEY=VALUE"):
        _engine_args("max_batch_size", "f")


def test_simulated_requests_by_hand():
    assert simulated_requests(_load("a", "P", conc=8, n=48)) == 48  # the run's own count
    assert simulated_requests(_load("a", "P", conc=8, n=50_000)) == 50_000  # no cap: a backlog is simulated whole
    assert simulated_requests(_load("a", "P", conc=8)) == 80  # not published: ten per client
    assert simulated_requests(_load("a", "P", load="burst", n=2048)) == 2048  # a burst is all of it
    assert simulated_requests(_load("a", "P", load="rate", n=500)) == 500
    assert simulated_requests(_load("a", "P", load="rate", n=50_000)) == 50_000


def test_preset_names():
    p = engines()
    assert preset_name("tensorrt-llm", p) == "trtllm" and preset_name("nim", p) == "trtllm"
    assert preset_name("vllm", p) == "vllm" and preset_name("no-such-engine", p) == "default"
    assert preset_name("lmdeploy", p) == ("lmdeploy" if "lmdeploy" in p else "default")


def test_load_levels():
    assert [level(_load("a", "P", conc=c)) for c in (1, 4, 5, 32, 33, 128, 129)] == \
        ["1-4", "1-4", "5-32", "5-32", "33-128", "33-128", ">128"]
    assert level(_load("a", "P", load="burst", n=2048)) == ">128"
    assert level(_load("a", "P", load="rate")) == "rate (open loop)" == LEVELS[-1]


def _res(rid, value, predicted, metric="ttft_s", conc=8, publisher="P"):
    stat = "aggregate" if metric == "output_tokens_per_s" else "mean"
    row = LoadRow(**{**_load(rid, publisher, conc=conc, metric=metric, stat=stat).__dict__, "value": value})
    return LoadResult(row, "vllm", predicted)


def test_figures_by_hand():
    # errors -0.1, +0.2, -0.3, +0.4: |e| sorted 0.1 0.2 0.3 0.4 -> median 0.25; p90 at rank
    # 0.9 * 3 = 2.7 -> 0.3 + 0.7 * 0.1 = 0.37; signed median of -0.3 -0.1 0.2 0.4 = 0.05
    f = figures([-0.1, 0.2, -0.3, 0.4, math.nan])
    assert f["n"] == 4 and f["median"] == pytest.approx(0.25) and f["p90"] == pytest.approx(0.37)
    assert f["signed"] == pytest.approx(0.05)
    assert figures([])["n"] == 0 and math.isnan(figures([])["median"])


def test_the_table_by_hand():
    res = [_res("t1", 1.0, 0.9), _res("t2", 1.0, 1.2), _res("t3", 2.0, 1.4), _res("t4", 2.0, 2.8),  # TTFT, c=8
           _res("o1", 100.0, 150.0, "output_tokens_per_s", conc=64),  # +50%
           _res("o2", 100.0, math.nan, "output_tokens_per_s", conc=64)]  # not predicted: not counted
    out = table(res, "load level", lambda r: level(r.row), LEVELS).splitlines()
    assert out[0].split() == ["load", "level", "all", "TTFT", "throughput"]
    five = [c.strip() for c in re.split(r"\s{2,}", out[2].strip())]
    assert five == ["5-32", "25% / 37% / +5% (4)", "25% / 37% / +5% (4)", "-"]
    big = [c.strip() for c in re.split(r"\s{2,}", out[3].strip())]
    assert big == ["33-128", "50% / 50% / +50% (1)", "-", "50% / 50% / +50% (1)"]
    assert len(out) == 4  # only the levels that have rows
    # all six rows in one group: |e| 0.1 0.2 0.3 0.4 0.5 -> median 0.3, p90 0.46, signed median 0.2
    e = np.array([-0.1, 0.2, -0.3, 0.4, 0.5])
    assert figures(e)["p90"] == pytest.approx(0.46) and figures(e)["signed"] == pytest.approx(0.2)


def test_the_section_names_what_it_scores():
    from calc.accuracy.underload import LoadRun

    res = [_res("t1", 1.0, 0.9), _res("o1", 100.0, 150.0, "output_tokens_per_s", conc=64, publisher="Q")]
    text = section(LoadRun(res, [("r9", "cannot be simulated")], 1.5), 2)
    assert "## Serving under load" in text and "2 publishers" in text and "### By publisher" in text
    assert "`r9`: cannot be simulated" in text and "1.5 s" in text
    assert "median |error| 30%" in text  # |e| 0.1 and 0.5 -> median 0.3
    assert "presets as committed" not in text
    # beside it, the same rows as the committed presets predict them: |e| 0.2 and 0.1 -> median 15%
    shipped = LoadRun([_res("t1", 1.0, 1.2), _res("o1", 100.0, 90.0, "output_tokens_per_s", conc=64)], [], 1.0)
    both = section(LoadRun(res, [], 1.5), 2, shipped=shipped)
    assert "presets as committed" in both and "median |error| 15%" in both.split("presets as committed")[1]


def test_targets_by_hand():
    from calc.accuracy.underload import target_lines

    # TTFT errors 0.05, 0.10, 0.40 (median 0.10); throughput 0.02: overall |e| 0.02 0.05 0.10 0.40
    # -> median 0.075 (met, <= 10%), p90 at rank 2.7 -> 0.10 + 0.7 * 0.30 = 0.31 (NOT met, > 30%)
    res = [_res("a", 1.0, 1.05), _res("b", 1.0, 0.9), _res("c", 1.0, 1.4),
           _res("d", 100.0, 102.0, "output_tokens_per_s")]
    lines = target_lines(res)
    assert lines[0].split()[:3] == ["median", "|error|", "8%"] and lines[0].endswith(": met)")
    assert "31%" in lines[1] and lines[1].endswith("NOT met)")
    assert "TTFT" in lines[2] and "10%" in lines[2] and lines[2].endswith(": met)")


def test_the_wheel_carries_the_load_rows():
    tomllib = pytest.importorskip("tomllib")
    from calc.spec.catalog import REPO_ROOT

    setup = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert UNDER_LOAD.name in setup["package-data"]["calc._catalog.accuracy"]
    assert setup["package-dir"]["calc._catalog.accuracy"] == "reports/accuracy"


def test_the_worst_runs_come_first():
    from calc.accuracy.underload import worst

    res = [_res("small", 1.0, 1.1), _res("big", 1.0, 3.0), _res("none", 1.0, math.nan)]
    out = worst(res, 5).splitlines()
    assert out[2].startswith("big") and "+200%" in out[2] and out[3].startswith("small") and len(out) == 4


def test_open_loop_in_flight_by_littles_law():
    from calc.accuracy.loadrows import open_loop_in_flight

    rate = _load("q", "P", load="rate")  # 2 requests/s, 64 output tokens
    ttft = LoadRow(**{**rate.__dict__, "value": 0.5})
    itl = LoadRow(**{**rate.__dict__, "id": "q2", "metric": "itl_s", "value": 0.02})
    # e2e = 0.5 + 63 x 0.02 = 1.76 s; in flight = 2 / s x 1.76 s = 3.52
    assert open_loop_in_flight([ttft, itl]) == pytest.approx(3.52)
    e2e = LoadRow(**{**rate.__dict__, "id": "q3", "metric": "e2e_s", "statistic": "median", "value": 10.0})
    assert open_loop_in_flight([ttft, e2e]) == pytest.approx(20.0)  # a published e2e wins
    assert open_loop_in_flight([ttft]) is None and open_loop_in_flight([_load("c", "P")]) is None


def test_an_unstated_kv_dtype_is_the_checkpoints():
    from calc.accuracy.rows import kv_dtype_of

    assert kv_dtype_of("fp8", "", "llama-3.1-70b") == "fp8"  # quantised after training: KV scales ship with it
    assert kv_dtype_of("fp8", "", "deepseek-v3") is None  # its own checkpoint is fp8, its cache the model dtype
    assert kv_dtype_of("fp8", "bf16", "llama-3.1-70b") == "bf16" and kv_dtype_of("bf16", "", "llama-3.1-8b") is None
    assert kv_dtype_of("fp4", "", "llama-3.1-70b") == "fp8"  # ModelOpt NVFP4: hf_ptq.py quantises KV to fp8 by default
    r = _load("d", "P", conc=16, n=100)
    sc = scenario([LoadRow(**{**r.__dict__, "model": "deepseek-v3", "hardware": "h200", "weight_dtype": "fp8",
                              "kv_dtype": kv_dtype_of("fp8", "", "deepseek-v3"), "gpus": 8, "tp": 8})], "vllm")
    from calc.accuracy.compare import replica

    # MLA's latent (kv_lora_rank 512 + rope 64) of 61 layers at bf16, replicated on each TP rank
    assert replica(sc, engines()["vllm"], 16).kv.kv_bytes_per_token == 61 * (512 + 64) * 2


def test_lmdeploys_in_process_profiler_rows_reach_the_simulator_unserved():
    """LMDeploy's profile_generation drives TurboMind in process: its TTFT holds no request through
    a server, so its runs' scenarios say so (calc.accuracy.compare adds no request_overhead_us)."""
    rows, _ = load_rows()
    by_run = runs(rows)
    lmd = [r for r in rows if r.publisher.startswith("LMDeploy")]
    assert lmd and not any(r.served for r in lmd)
    assert all(r.served for r in rows if not r.publisher.startswith("LMDeploy"))
    assert not scenario(by_run[lmd[0].run], "lmdeploy").run.served
