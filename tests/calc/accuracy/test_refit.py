"""--fit: recovers overheads the runs were made with, held out by run, and writes a loadable preset."""

from dataclasses import replace
from pathlib import Path

import pytest

from calc.accuracy.benchmarks import read_results
from calc.accuracy.compare import load_preset, predict
from calc.accuracy.harness import BOUNDS
from calc.accuracy.refit import Refit, free_parameters, preset_yaml, refit
from calc.accuracy.scenario import Conditions, resolve
from calc.core.errors import SpecError

BENCH = Path(__file__).resolve().parents[2] / "fixtures" / "bench"
LATENCY = sorted((BENCH / "published").glob("vllmbk*.json"))  # six fixed-batch runs: quick to predict


def _synthetic(truth):
    """The published runs with 'measurements' made by a known preset."""
    out = []
    for path in LATENCY:
        sc = resolve(read_results(path)[0], Conditions())
        out.append(replace(sc, measured=predict(sc, truth)))
    return out


def test_refit_recovers_a_known_overhead_on_held_out_runs():
    base = load_preset("vllm")
    truth = base.model_copy(update={"request_overhead_us": 2000.0, "step_overhead_us": 400.0})
    r = refit(_synthetic(truth), base)
    assert len(r.folds) == 5 and sum(len(f.held_out) for f in r.folds) == len(LATENCY)
    # the base preset is off by (1000 - 400) us x 128 steps + (8000 - 2000) us = 83 ms per run,
    # on e2e times of 0.8 to 4 s: a few percent
    assert r.held_out_before > 0.02
    assert r.held_out_after < r.held_out_before / 3
    for p in free_parameters(base):
        lo, hi = BOUNDS[p]
        assert lo <= getattr(r.fitted, p) <= hi


def test_scales_only_for_engines_with_their_own_kernels():
    assert "compute_scale" in free_parameters(load_preset("llama.cpp"))
    assert "compute_scale" not in free_parameters(load_preset("vllm"))


def test_one_run_cannot_be_held_out():
    sc = resolve(read_results(LATENCY[0])[0], Conditions())
    with pytest.raises(SpecError, match="at least 2 runs"):
        refit([sc], load_preset("vllm"))


def test_median_pct_is_ratio_form():
    assert Refit.median_pct([0.0, 0.5, 1.0]) == pytest.approx(2.718281828 ** 0.5 - 1)


def test_preset_yaml_loads_and_cites_every_number(tmp_path):
    base = load_preset("vllm")
    r = refit(_synthetic(base.model_copy(update={"request_overhead_us": 3000.0})), base)
    text = preset_yaml([r], [str(p) for p in LATENCY], ["vllm-latency (version not recorded in the file)"], "0.1.0")
    p = tmp_path / "fit.yaml"
    p.write_text(text)
    fitted = load_preset(str(p))
    assert fitted.name == "vllm-fit" and fitted.request_overhead_us == pytest.approx(r.fitted.request_overhead_us,
                                                                                       rel=1e-3)
    assert "held out by run" in fitted.sources["fit"]
    for line in text.splitlines():
        key, _, value = line.strip().partition(":")
        if value.split("#")[0].strip().replace(".", "", 1).replace("e+", "").isdigit():
            assert "# source:" in line, line
    assert all(f"# file: {LATENCY[0]}" in text for _ in [0]) and "sha256" in text and "roofline 0.1.0" in text


def test_a_refit_llama_cpp_preset_keeps_its_kernel_families_for_old_builds(tmp_path):
    """A refit file carries its base's kernel set and families: a llama-bench file of a build
    before b3216 (the family's by_version rule names dequant-cublas-2024) predicts under it as
    under the catalog preset (the fitted fields equal the base's here), not a refused file."""
    import json as _json

    from calc.accuracy.compare import compare_files

    base = load_preset("llama.cpp")
    r = Refit(base, base, (), ("a", "b"))
    p = tmp_path / "llama.cpp-fit.yaml"
    p.write_text(preset_yaml([r], [], [], "0.1.0"))
    rows = _json.loads((BENCH / "llama-bench.json").read_text())
    f = tmp_path / "old.json"
    f.write_text(_json.dumps([dict(x, build_number=2837) for x in rows]))
    got = {}
    for engine in ("llama.cpp", str(p)):
        results, failures, _ = compare_files([f], Conditions(model="llama-3-8b", hardware="rtx-4090", engine=engine))
        assert not failures, failures
        assert all(x.scenario.serving.weight_only_kernel == "dequant-cublas-2024" for x in results)
        got[engine] = [m.predicted for x in results for m in x.metrics]
    assert got[str(p)] == pytest.approx(got["llama.cpp"], rel=1e-3)
