"""Leave-one-source-out: no fit sees the publisher it is scored on; the fit spec is data."""

import math
from dataclasses import replace

import pytest

from calc import SpecError
from calc.accuracy.fit import FitParam, FitSpec, Predictor, fit, folds, load_fit_spec, loso, priors
from calc.accuracy.rows import Row
from calc.spec.engine import engines


def _row(rid, publisher, value, engine="vllm"):
    return Row(id=rid, publisher=publisher, engine=engine, preset=engine, model="llama-3.1-8b", hardware="h100-sxm",
               weight_dtype="bf16", kv_dtype=None, compute_dtype=None, gpus=1, tp=1, pp=1, batch=1,
               concurrency=None, prompt_len=128, output_len=128, metric="tpot_s", value=value)


TINY = [_row("a1", "A", 1.0), _row("a2", "A", 1.0), _row("b1", "B", 4.0), _row("c1", "C", 16.0),
        _row("c2", "C", 16.0, engine="trtllm")]
SPEC = FitSpec(fitted={"step_overhead_us": FitParam(scope="engine", bounds=(1.0, 1e6), prior=100.0)})


class Seen:
    """A fake calculator: the prediction is the preset's step overhead; it records every row it was asked for."""

    def __init__(self):
        self.calls = []

    def __call__(self, row, preset, **memos):
        self.calls.append(row.id)
        return preset.step_overhead_us


def test_folds_by_hand():
    f = folds(TINY)
    assert list(f) == ["A", "B", "C"]
    assert [r.id for r in f["A"][0]] == ["b1", "c1", "c2"] and [r.id for r in f["A"][1]] == ["a1", "a2"]
    assert [r.id for r in f["B"][0]] == ["a1", "a2", "c1", "c2"] and [r.id for r in f["B"][1]] == ["b1"]
    assert [r.id for r in f["C"][0]] == ["a1", "a2", "b1"] and [r.id for r in f["C"][1]] == ["c1", "c2"]


def test_no_fold_fits_on_the_rows_it_scores():
    trained = {}

    def fitter(train, presets, spec, pred):
        source = ({"A", "B", "C"} - {r.publisher for r in train}).pop()
        trained[source] = [r.id for r in train]
        return fit(train, presets, spec, pred)

    seen = Seen()
    predicted, fitted = loso(TINY, engines(), SPEC, seen, fitter=fitter)
    assert trained == {"A": ["b1", "c1", "c2"], "B": ["a1", "a2", "c1", "c2"], "C": ["a1", "a2", "b1"]}
    assert set(predicted) == {r.id for r in TINY} and set(fitted) == {"A", "B", "C"}
    # the fake predicts the fitted overhead itself: fold A's vllm overhead saw b1 (4) and
    # c1 (16), never a1/a2 (1); the best |log| fit of 4 and 16 lies in [4, 16], far from 1
    assert 4.0 <= predicted["a1"] <= 16.0
    # fold C leaves out the only trtllm row: trtllm keeps its prior, not a fit to c2
    assert fitted["C"]["trtllm"].step_overhead_us == 100.0 == predicted["c2"]


def test_fit_asks_only_for_the_rows_it_is_given():
    seen = Seen()
    fit(TINY[:3], engines(), SPEC, seen)
    assert set(seen.calls) == {"a1", "a2", "b1"}


def test_fit_stays_within_bounds_and_starts_from_priors():
    spec = FitSpec(fitted={"step_overhead_us": FitParam(scope="engine", bounds=(50.0, 200.0), prior=100.0)})
    out = fit([_row("x", "X", 1e5)], engines(), spec, Seen())  # the data pull far above the bound
    assert out["vllm"].step_overhead_us == 200.0
    start = priors(engines(), spec)
    assert start["vllm"].step_overhead_us == 100.0 and start["ideal"].ideal  # the ideal preset is left alone


def test_predictor_caches_per_row_and_fitted_values(monkeypatch):
    seen = Seen()
    monkeypatch.setattr("calc.accuracy.fit.model_metric", seen)
    pred, p = Predictor(("step_overhead_us",)), engines()["vllm"]
    pred(TINY[0], p)
    pred(TINY[0], p)
    pred(TINY[0], p.model_copy(update={"step_overhead_us": 7.0}))
    assert seen.calls == ["a1", "a1"]  # the repeat was a cache hit, the changed value was not


def test_predictor_adds_the_serving_time_without_a_new_prediction(monkeypatch):
    # request_overhead_us is read after the model: a fit trial of it alone recomputes nothing,
    # and the value still moves by the serving time (TTFT rows) or not at all (the others).
    from calc.accuracy.predict import predict

    seen = Seen()
    monkeypatch.setattr("calc.accuracy.fit.model_metric", seen)
    pred, p = Predictor(("step_overhead_us", "request_overhead_us")), engines()["vllm"]
    ttft = replace(TINY[0], metric="ttft_s", served=True)
    a = pred(ttft, p.model_copy(update={"request_overhead_us": 0.0}))
    b = pred(ttft, p.model_copy(update={"request_overhead_us": 3000.0}))
    assert len(seen.calls) == 1 and b - a == pytest.approx(3000e-6, rel=1e-12)
    # an offline TTFT (the engine's own benchmark, no server between) holds no serving time
    offline = replace(ttft, served=False)
    assert pred(offline, p.model_copy(update={"request_overhead_us": 3000.0})) == pred(
        offline, p.model_copy(update={"request_overhead_us": 0.0}))
    monkeypatch.undo()
    real = Predictor(("request_overhead_us",))
    for q in (p, p.model_copy(update={"request_overhead_us": 3000.0})):
        assert real(ttft, q) == predict(ttft, q)


def test_committed_fit_spec_is_valid_and_names_preset_fields():
    spec = load_fit_spec()
    assert {"step_overhead_us", "request_overhead_us"} <= set(spec.fitted)
    for name, p in spec.fitted.items():
        lo, hi = p.bounds
        assert lo <= p.prior_for("vllm") <= hi and math.isfinite(hi), name


def test_bad_fit_spec_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="must hold every prior"):
        FitParam(scope="engine", bounds=(1.0, 2.0), prior=5.0)
    bad = tmp_path / "fit.yaml"
    bad.write_text("fitted:\n  no_such_field: {scope: engine, bounds: [0, 1], prior: 0.5}\n")
    with pytest.raises(SpecError, match="not engine-preset fields"):
        load_fit_spec(bad)


def test_shared_fields_are_shared_by_vendor_kernel_engines_only():
    # a fake calculator whose prediction is the preset's attention share: vLLM and TRT-LLM rows
    # measure 0.4, llama.cpp rows (kernels of its own) 1.0
    rows = [_row("v", "A", 0.4), _row("t", "B", 0.4, engine="trtllm"), _row("l", "C", 1.0, engine="llama.cpp")]
    spec = FitSpec(own_kernels=("llama.cpp",),
                   fitted={"attention": FitParam(scope="shared", bounds=(0.2, 1.0), prior=0.7)})
    out = fit(rows, engines(), spec, lambda row, preset: preset.attention)
    assert out["vllm"].attention == out["trtllm"].attention < 0.55  # one value, moved towards 0.4
    assert out["llama.cpp"].attention == 1.0  # its own, at the measured 1.0 (the bound)
    assert out["sglang"].attention == 0.7  # no rows: the prior


def test_predictor_memos_give_what_predict_gives():
    # rows of one configuration share a replica per preset state, and their steady-state features
    # across states: the predictions are predict()'s, bit for bit, whichever state came first
    from calc.accuracy.predict import predict
    from calc.accuracy.rows import load_rows

    rows = load_rows()[0]
    config = ("llama-3.1-8b", "h100-sxm", 1, "fp8")
    steady = [r for r in rows if r.batch is None and r.metric == "output_tokens_per_s"
              and (r.model, r.hardware, r.tp, r.weight_dtype) == config][:3]
    assert len(steady) == 3 and len({(r.prompt_len, r.output_len) for r in steady}) == 3
    p = engines()[steady[0].preset]
    states = [p, p.model_copy(update={"step_overhead_us": 3 * p.step_overhead_us, "kernel_overhead_us": 7.0})]
    pred = Predictor(tuple(load_fit_spec().fitted))
    got = [[pred(r, q) for r in steady] for q in states]
    assert got == [[predict(r, q) for r in steady] for q in states]
    assert got[0] != got[1] and len(pred.memos) == 2 and len(pred.across) == 3


def test_a_max_load_row_sizes_its_kv_cache_as_its_engine_does():
    """TensorRT-LLM keeps kv_cache_free_gpu_memory_fraction 0.9 of the memory the weights and
    workspace leave, and reserves each request's final context (GUARANTEED_NO_EVICT), where vLLM
    keeps 0.9 of all memory: Llama-3.3-70B in fp8 on one H100 (81,090 MiB = 79.19 GiB, what CUDA gives
    a process, as vLLM's startup log prints total_memory; nvidia-smi reports 81,559 MiB)."""
    from calc.accuracy.predict import _steady
    from calc.spec.catalog import load_hardware, load_model

    preset = engines()["trtllm"]
    row = Row(id="r", publisher="P", engine="tensorrt-llm", preset="trtllm", model="llama-3.1-70b",
              hardware="h100-sxm", weight_dtype="fp8", kv_dtype="fp8", compute_dtype="fp8", gpus=1, tp=1, pp=1,
              batch=None, concurrency=None, prompt_len=1000, output_len=1000, metric="output_tokens_per_s", value=1.0)
    kw = dict(weight_dtype="fp8", kv_dtype="fp8", compute_dtype="fp8", group_size=128, attention="fused", ideal=False)
    memo = {}
    _steady(load_model(row.model), load_hardware(row.hardware).with_engine(preset), row, kw, preset, memo)
    kv = next(v for k, v in memo.items() if k[0] == "replica").kv
    assert (kv.share_of, kv.utilization) == ("free", 0.9)
    assert kv.capacity_bytes == pytest.approx(81090 * 2**20)
    free = kv.capacity_bytes - kv.weights_bytes - kv.workspace_bytes
    assert kv.kv_bytes == pytest.approx(0.9 * free)  # vLLM's rule would leave 0.9 x 85.03e9 - weights - workspace
    # fp8 KV: 80 layers x 8 KV heads x 128 x (K and V) x 1 byte = 163,840 bytes per token
    assert kv.kv_bytes_per_token == 80 * 8 * 128 * 2 * 1
    assert next(v for k, v in memo.items() if k[0] == "replica").serving.preemption == "none"


def test_a_closed_loop_tpot_row_is_the_mean_step_its_clients_see():
    """N clients in a closed loop (a concurrency, no batch): a client's mean TPOT is the mean of the
    steps it decodes in, and a share f of all steps also carries another request's prefill chunk, so
    TPOT = f x mixed step + (1 - f) x decode step (calc.serving.replica.capacity.SteadyState). The
    fixed-batch decode TPOT at B = N, which these rows got before, leaves the prefill steps out:
    NIM's 5000-token prompts at 50 clients measured 59.7 ms where it gave 27.9 ms."""
    from calc.accuracy.predict import _steady, predict
    from calc.cost.latency import estimate
    from calc.cost.setup import Setup
    from calc.spec.catalog import load_hardware, load_model

    preset = engines()["trtllm"]
    row = Row(id="r", publisher="P", engine="tensorrt-llm", preset="trtllm", model="llama-3.1-8b",
              hardware="h100-sxm", weight_dtype="fp8", kv_dtype="fp8", compute_dtype="fp8", gpus=1, tp=1, pp=1,
              batch=None, concurrency=16, prompt_len=5000, output_len=500, metric="tpot_s", value=1.0)
    kw = dict(weight_dtype="fp8", kv_dtype="fp8", compute_dtype="fp8", group_size=128, attention="fused", ideal=False)
    hw = load_hardware(row.hardware).with_engine(preset)
    st = _steady(load_model(row.model), hw, row, kw, preset)
    f = st.prefill_share
    assert 0 < f < 1 and st.mixed_step_s > st.decode_step_s
    tpot = predict(row, preset)
    assert tpot == pytest.approx(f * st.mixed_step_s + (1 - f) * st.decode_step_s, rel=1e-12)
    assert predict(replace(row, metric="decode_tokens_per_s"), preset) == pytest.approx(1 / tpot, rel=1e-12)
    fixed = float(estimate(load_model(row.model), hw, 16, 5000, 500, Setup.of(**kw, tp=1, pp=1)).tpot_s)
    assert tpot > fixed + 0.5 * f * (st.mixed_step_s - st.decode_step_s)  # the old prediction misses the prefill steps
    assert predict(replace(row, batch=16), preset) == pytest.approx(fixed, rel=1e-12)  # a fixed batch keeps its pass


def test_every_timed_row_says_whether_a_server_was_in_the_timing(tmp_path):
    """published.csv: a TTFT or e2e row states `timing` (server or offline); vLLM's benchmark_latency
    rows are offline, a client's through Triton or NIM server; a TTFT row without it names the
    file, the row and the column."""
    from calc.accuracy.rows import PUBLISHED, load_rows

    rows, _ = load_rows()
    timed = {r.id: r.served for r in rows if r.metric in ("ttft_s", "e2e_s")}
    assert timed and not timed["vllmbk9515-llama-3.1-8b-h200-tp1"] and timed["trt014-l31-8b-h200-ttft-467"]
    text = PUBLISHED.read_text().splitlines()
    bad = tmp_path / "p.csv"
    bad.write_text("\n".join([text[0]] + [line.removesuffix(",server") + "," for line in text[1:]
                                           if line.startswith("trt014-l31-8b-h200-ttft-467,")]) + "\n")
    with pytest.raises(SpecError, match=r"p\.csv: row trt014-l31-8b-h200-ttft-467.*timing.*this row must say which"):
        load_rows(bad)
