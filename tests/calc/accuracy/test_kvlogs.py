"""The KV budget against vLLM's startup logs (reports/accuracy/kv_logs.csv): the profile terms
come from the fit rows alone, and the check rows' logged KV (a third-party measurement) is met."""

import pytest

from calc.accuracy import kvlogs
from calc.core.units import GiB, MiB
from calc.spec.catalog import load_model, model_catalog
from calc.spec.engine import load_engine


@pytest.fixture(scope="module")
def rows():
    return kvlogs.load()


def _row(rows, model, tp=1, pp=1, weight="bf16", kv="bf16"):
    return next(r for r in rows if r.role == "check" and r.model == model and r.tp == tp and r.pp == pp
                and r.weight_dtype == weight and r.kv_dtype == kv and r.engine_args == {"gpu_memory_utilization": 0.95})


def test_fit_rows_are_models_with_no_spec_and_check_rows_models_with_one(rows):
    specs = set(model_catalog())
    assert {r.role for r in rows} == {"fit", "check"}
    assert all(r.model == "" for r in rows if r.role == "fit")
    assert all(r.model in specs for r in rows if r.role == "check")
    # no model is on both sides
    assert not {r.hf_model for r in rows if r.role == "fit"} & {r.hf_model for r in rows if r.role == "check"}


def test_the_vllm_presets_profile_terms_are_the_fit_rows_medians(rows):
    fit = kvlogs.fitted(rows)
    s = load_engine("vllm").scheduler
    assert s.sampler_bytes_per_logit == pytest.approx(fit["sampler_bytes_per_logit"], abs=0.05)
    assert s.non_torch_gib == pytest.approx(fit["non_torch_gib"], abs=0.005)
    assert s.non_torch_tp_gib == pytest.approx(fit["non_torch_tp_gib"], abs=0.005)
    # the default preset runs vLLM's scheduler (its plans launch `vllm serve`): the same terms
    d = load_engine("default").scheduler
    assert [getattr(d, k) for k in kvlogs.PROFILE_TERMS] == [getattr(s, k) for k in kvlogs.PROFILE_TERMS]


def test_the_workspace_is_the_sampler_when_it_outweighs_the_pass_plus_memory_outside_torch(rows):
    s = load_engine("vllm").scheduler
    vocab = load_model("llama-3.1-8b").vocab_size  # 128256
    one = kvlogs.budget(_row(rows, "llama-3.1-8b"))
    # the dummy sampler over 1024 requests (max_num_seqs at 8192 tokens per step) + 0.25 GiB
    assert one.workspace_bytes == pytest.approx(s.sampler_bytes_per_logit * 1024 * vocab + s.non_torch_gib * GiB)
    bare = kvlogs.budget(_row(rows, "llama-3.1-8b"), profile_terms=False)
    assert bare.workspace_bytes < s.sampler_bytes_per_logit * 1024 * vocab  # the pass alone is smaller
    two = kvlogs.budget(_row(rows, "llama-3.1-8b", tp=2))
    assert two.workspace_bytes == pytest.approx(s.sampler_bytes_per_logit * 1024 * vocab + s.non_torch_tp_gib * GiB)


def test_the_kv_budget_sizes_from_the_total_cuda_gives_a_process(rows):
    kv = kvlogs.budget(_row(rows, "llama-3.1-8b"))
    assert kv.capacity_bytes == 81090 * MiB  # 79.19 GiB, as vLLM logs total_memory; nvidia-smi says 81559 MiB


@pytest.mark.parametrize("model,tp,logged_gib,logged_tokens", [
    ("llama-3.1-8b", 1, 58.11, 476_016),  # 'Available KV cache memory: 58.11 GiB', 'GPU KV cache size: 476,016 tokens'
    ("llama-3.1-8b", 4, 67.44, 2_209_792),
    ("qwen2.5-7b", 2, 63.84, 2_390_592),
    ("qwen2.5-72b", 2, 3.04, 19_920),  # 3.04 GiB left after 67.8 GiB of weights
])
def test_check_rows_hold_the_kv_vllm_logged(rows, model, tp, logged_gib, logged_tokens):
    kv = kvlogs.budget(_row(rows, model, tp=tp))
    # within what the counted weights miss (Qwen2.5-72B: 67.71 of the logged 67.80 GiB) and the
    # logs' 0.01 GiB rounding; tokens as close, relative to what is left for KV
    assert abs(kv.kv_bytes / GiB - logged_gib) <= 0.15
    assert kv.pages * kv.block_size == pytest.approx(logged_tokens, rel=0.15 / logged_gib)


def test_the_report_section_states_the_figures_with_and_without_the_terms(rows):
    text = kvlogs.section(rows)
    now, before = kvlogs.figures(kvlogs.check(rows)), kvlogs.figures(kvlogs.check(rows, profile_terms=False))
    assert now["median"] < before["median"] and now["max"] < before["max"]
    assert f"{100 * now['median']:.1f}%" in text and f"without the profile terms: {100 * before['median']:.1f}%" in text
