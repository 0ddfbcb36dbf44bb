"""Engine schedulers as data: the presets' values, their resolution on a GPU, and overrides
under the engine's own names (each bad one a one-line error naming the file and key)."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from calc.core.errors import SpecError
from calc.spec.catalog import load_hardware
from calc.spec.engine import engine_arg_names, engines, load_engine
from calc.spec.scheduler import Serving, engine_args_of, resolve_serving
from calc.spec.workload import load_workload

BENCH = Path(__file__).resolve().parents[2] / "fixtures" / "bench"
WORKLOAD = """\
name: t
model: llama-3.1-8b
hardware: [h100-sxm]
arrival: {rate_per_s: 2}
prompt_len: {dist: fixed, value: 512}
output_len: {dist: fixed, value: 64}
tp: [1]
max_batch: [64]
requests: 20
"""


def _resolved(engine: str, gpu: str, **args) -> Serving:
    hw = load_hardware(gpu)
    return resolve_serving(load_engine(engine), hw.name, hw.memory_gb, engine_args=args or None,
                           others=engine_arg_names())


def test_every_engine_preset_states_a_scheduler_and_cites_it():
    for name in ("vllm", "sglang", "trtllm", "lmdeploy", "tgi"):
        e = engines()[name]
        assert {"max_batched_tokens", "gpu_memory_utilization", "prefill", "preemption"} <= e.scheduler.model_fields_set
        assert e.engine_args, name
        assert any(k.endswith(("_sched", "_cfg", "_launch")) for k in e.sources), name


def test_vllm_picks_its_budget_by_gpu_memory():
    # EngineArgs.get_batch_defaults: >= 70 GiB and not an A100 -> 8192 tokens, 1024 sequences; else 2048, 256
    h100, a100, l4 = _resolved("vllm", "h100-sxm"), _resolved("vllm", "a100-80gb-sxm"), _resolved("vllm", "l4")
    assert (h100.max_batched_tokens, h100.max_num_seqs) == (8192, 1024)
    assert (a100.max_batched_tokens, a100.max_num_seqs) == (2048, 256)
    assert (l4.max_batched_tokens, l4.max_num_seqs) == (2048, 256)


def test_engines_differ_where_their_sources_say():
    sg, trt, tgi, lmd = (_resolved(e, "h100-sxm") for e in ("sglang", "trtllm", "tgi", "lmdeploy"))
    assert sg.max_num_seqs is None and sg.prefill == "prefill_first" and sg.kv_share_of == "static"
    assert trt.preemption == "none" and trt.kv_share_of == "free" and not trt.chunked_prefill
    assert tgi.graph_max_batch == 32 and tgi.preemption == "none"
    assert lmd.max_num_seqs == 1024 and lmd.kv_share_of == "free"  # get_max_batch_size: h100 -> 1024
    assert _resolved("lmdeploy", "l40s").max_num_seqs == 128


def test_engine_args_override_under_the_engines_own_names():
    v = _resolved("vllm", "h100-sxm", gpu_memory_utilization=0.5, max_num_batched_tokens=2048)
    assert (v.gpu_memory_utilization, v.max_batched_tokens) == (0.5, 2048)
    s = _resolved("sglang", "h100-sxm", mem_fraction_static=0.7, chunked_prefill_size=4096, enable_mixed_chunk=True)
    assert (s.gpu_memory_utilization, s.max_batched_tokens, s.prefill) == (0.7, 4096, "mixed")
    t = _resolved("trtllm", "h100-sxm", capacity_scheduler_policy="MAX_UTILIZATION")
    assert t.preemption == "recompute"
    # TGI's KV share is cuda_memory_fraction x TGI_WIGGLE_ROOM 0.9
    assert _resolved("tgi", "h100-sxm", cuda_memory_fraction=0.5).gpu_memory_utilization == pytest.approx(0.45)
    # and back to the engine's names, for a launch command
    assert engine_args_of(load_engine("tgi"), Serving(gpu_memory_utilization=0.45))["cuda_memory_fraction"] \
        == pytest.approx(0.5)


@pytest.mark.parametrize("args, words", [
    ({"max_num_batched_tokens": -8}, ["engine_args.max_num_batched_tokens", "-8", "greater than or equal to 16"]),
    ({"gpu_memory_utilization": 1.5}, ["engine_args.gpu_memory_utilization", "less than or equal to 1"]),
    ({"max_num_seq": 8}, ["unknown vllm argument", "valid keys:", "max_num_seqs", "did you mean max_num_seqs"]),
    ({"mem_fraction_static": 0.8}, ["mem_fraction_static is an argument of sglang, not vllm", "valid keys:"]),
])
def test_bad_engine_args_are_one_line_naming_file_and_key(tmp_path, args, words):
    p = tmp_path / "w.yaml"
    p.write_text(WORKLOAD + f"engine: vllm\nengine_args: {args}\n")
    with pytest.raises(SpecError) as exc:
        load_workload(p)
    msg = str(exc.value)
    assert msg.startswith(str(p)) and "\n" not in msg
    for w in words:
        assert w in msg, msg


def test_bad_engine_args_exit_2_from_plan_and_compare(tmp_path):
    from calc.cli.app import app

    runner = CliRunner()
    p = tmp_path / "w.yaml"
    p.write_text(WORKLOAD + "engine: sglang\nengine_args: {mem_fraction_static: 1.2}\n")
    r = runner.invoke(app, ["plan", str(p)])
    assert r.exit_code == 2 and "engine_args.mem_fraction_static" in r.stderr and "Traceback" not in r.output
    r = runner.invoke(app, ["compare", str(BENCH / "vllm-serve-concurrency16.json"), "--hardware", "h100-sxm",
                            "--engine-arg", "max_num_batched_tokens=-1"])
    assert r.exit_code == 2 and "--engine-arg: max_num_batched_tokens" in r.stderr, r.output
    r = runner.invoke(app, ["compare", str(BENCH / "vllm-serve-concurrency16.json"), "--hardware", "h100-sxm",
                            "--engine-arg", "chunked_prefill_size=4096"])
    assert r.exit_code == 2 and "argument of sglang" in r.stderr and "valid keys:" in r.stderr


def test_sidecar_engine_args_are_checked_against_the_runs_engine(tmp_path):
    import shutil

    f = tmp_path / "run.json"
    shutil.copy(BENCH / "vllm-serve-concurrency16.json", f)
    (tmp_path / "run.roofline.yaml").write_text("hardware: h100-sxm\nengine_args: {gpu_memory_utilization: 2}\n")
    from calc.accuracy.compare import compare_files
    from calc.accuracy.scenario import Conditions

    results, failures, _ = compare_files([f], Conditions())
    assert not results and "run.roofline.yaml: engine_args.gpu_memory_utilization" in failures[0][1]


def test_burst_arrival_kind():
    from calc.spec.workload import Arrival

    assert Arrival(kind="burst").kind == "burst"
    with pytest.raises(ValueError, match="no rate_per_s or concurrency"):
        Arrival(kind="burst", rate_per_s=2)


def test_versions_sort_as_releases_with_pre_releases_first():
    from calc.spec.versions import version_key

    order = ["0.0.14", "0.1.0a1 (TurboMind)", "0.1.0", "v0.7.4.dev181+gf35f8e22", "0.7.4", "0.10.0"]
    keys = [version_key(v) for v in order]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert version_key("sha-11d7af7-rocm") is None


def test_by_version_rule_gives_an_old_engine_its_scheduler():
    """LMDeploy before v0.1.0 ran TurboMind's iteration scheduler (engines.yaml lmdeploy, tm_iter):
    a run of 0.1.0a1 resolves to the batched policy with whole prompts; 0.1.0, an unknown or no
    version keep the preset's own."""
    preset, hw = engines()["lmdeploy"], load_hardware("a100-80gb-sxm")
    old = resolve_serving(preset, hw.name, hw.memory_gb, version="0.1.0a1 (TurboMind)")
    assert (old.prefill, old.chunked_prefill) == ("batched", False)
    for version in ("0.1.0", "sha-1234", None):
        assert resolve_serving(preset, hw.name, hw.memory_gb, version=version).prefill == preset.scheduler.prefill


def test_version_rules_bound_versions_memory_and_tp():
    """A rule applies from ``since`` up to ``before`` (exclusive), on GPUs in its memory range, at TP
    >= min_tp; without a version nothing applies."""
    from calc.spec.scheduler import VersionRule

    r = VersionRule(since="0.4.1", before="0.4.6", max_memory_gb=26.21, min_tp=4, set={})
    assert r.applies("0.4.1", 24.0, 4) and r.applies("0.4.5", 24.0, 8)
    assert not r.applies("0.4.0", 24.0, 4)  # before since
    assert not r.applies("0.4.6", 24.0, 4)  # at before
    assert not r.applies("0.4.3", 26.21, 4)  # memory range excludes its top
    assert not r.applies("0.4.3", 24.0, 2)  # TP below min_tp
    assert not r.applies(None, 24.0, 4)


@pytest.mark.parametrize("rule", [{"before": "0.4.6", "since": "0.5.0"},
                                  {"before": "0.4.6", "min_memory_gb": 30, "max_memory_gb": 20}])
def test_a_rule_that_can_never_apply_is_refused(rule):
    from calc.spec.scheduler import VersionRule

    with pytest.raises(ValueError, match="never applies"):
        VersionRule(**rule, set={})


def test_sglang_04x_runs_get_that_versions_defaults():
    """SGLang 0.4.1-0.4.5 chose its defaults by TP and memory (engines.yaml sglang, sglang_04x, from
    the wheels' server_args.py): on an H200 (>= 25,000 MiB) at TP 8, mem_fraction_static 0.81,
    chunked_prefill_size 8192, cuda_graph_max_bs 160; on an L4 (24 GB, below 25,000 MiB) at TP 1,
    0.88, 2048 and 8, at TP 4 0.85, 2048 and 80. A run of 0.5.7, or of no known version, keeps the
    preset's own values."""
    preset = engines()["sglang"]
    h200, l4 = load_hardware("h200"), load_hardware("l4")

    def at(hw, version, tp):
        s = resolve_serving(preset, hw.name, hw.memory_gb, version=version, tp=tp)
        return s.gpu_memory_utilization, s.max_batched_tokens, s.graph_max_batch

    assert at(h200, "0.4.3.post2", 8) == (0.81, 8192, 160)
    assert at(l4, "0.4.1", 1) == (0.88, 2048, 8)
    assert at(l4, "0.4.5", 4) == (0.85, 2048, 80)
    own = at(h200, None, 8)
    assert at(h200, "0.5.7", 8) == own and own != (0.81, 8192, 160)
    # 0.3.0-0.4.0 had the same budget and graph cap (sglang_03x), TP 8's share moving 0.83 -> 0.82 -> 0.81
    assert at(h200, "0.3.2", 8) == (0.83, 8192, 160) and at(h200, "0.3.6", 8) == (0.82, 8192, 160)
    assert at(h200, "0.4.0", 4) == (0.85, 8192, 160)
    # a version known as a range gets what every release in it had: at TP 4, 0.85 throughout
    assert at(h200, ">=0.4.0, <=0.4.0.post1", 4) == (0.85, 8192, 160)
    assert at(h200, ">=0.3.6, <=0.4.0.post1", 4) == (0.85, 8192, 160)
    # at TP 8 the range spans 0.82 and 0.81, so neither TP-8 rule holds (TP 4's 0.85 stays)
    assert at(h200, ">=0.3.6, <=0.4.0.post1", 8)[0] == 0.85
    # a bare upper bound may be any older release (0.2.9 had no chunked prefill): no since-rule holds
    assert at(h200, "<=0.4.0.post1", 4) == at(h200, None, 4)


def test_version_ranges_hold_a_since_rule_only_when_whole():
    """``>=A, <=B`` keys as B (as ``<=B`` does) and holds a rule with a ``since`` only from A on."""
    from calc.spec.scheduler import VersionRule
    from calc.spec.versions import at_most, floor_key, version_key

    assert version_key(">=0.3.6, <=0.4.0.post1") == version_key("0.4.0") and at_most(">=0.3.6,<=0.4.0")
    assert floor_key(">=0.3.6, <=0.4.0") == version_key("0.3.6") and floor_key("<=0.4.0") is None
    assert floor_key("0.4.2") == version_key("0.4.2")
    r = VersionRule(since="0.4.0", before="0.4.6", set={})
    assert r.applies(">=0.4.0, <=0.4.5") and r.applies(">=0.4.1, <=0.4.2")
    assert not r.applies(">=0.3.6, <=0.4.2")  # 0.3.6 is before since
    assert not r.applies(">=0.4.0, <=0.4.6")  # 0.4.6 is not before before
    assert not r.applies("<=0.4.2")


def test_bad_by_version_rule_is_one_line(tmp_path):
    p = tmp_path / "e.yaml"
    base = (Path(__file__).resolve().parents[3] / "calc" / "data" / "engines.yaml").read_text()
    import yaml

    spec = yaml.safe_load(base)["lmdeploy"] | {"by_version": [{"before": "soon", "set": {}}]}
    p.write_text(yaml.safe_dump({"old-lmdeploy": spec}))
    with pytest.raises(SpecError, match="by_version.0.before.*not a version"):
        load_engine(str(p))


def test_compare_takes_the_engine_version():
    """compare --engine-version reaches the scheduler: the same run under LMDeploy 0.1.0a1 (batched
    iterations) predicts a different TTFT than under the preset's own (prefill-first) scheduler."""
    from calc.accuracy.compare import compare_files
    from calc.accuracy.scenario import Conditions

    f = BENCH / "vllm-serve-concurrency16.json"
    ttft = {}
    for version in (None, "0.1.0a1"):
        results, failures, _ = compare_files([f], Conditions(hardware="h100-sxm", engine="lmdeploy",
                                                             engine_version=version))
        assert not failures and results[0].scenario.serving.prefill == ("batched" if version else "prefill_first")
        ttft[version] = next(m.predicted for m in results[0].metrics if m.metric.startswith("ttft"))
    assert ttft[None] != ttft["0.1.0a1"]


def test_vllm_v0_runs_whole_prompts_prefill_first():
    # vLLM before 0.8.0 ran the V0 engine: without chunked prefill, no decodes beside a prefill
    vllm = load_engine("vllm")
    off = {"enable_chunked_prefill": False}
    old = resolve_serving(vllm, "h200", 141, version="0.7.4.dev181+gf35f8e22", engine_args=off)
    new = resolve_serving(vllm, "h200", 141, version="0.8.0", engine_args=off)
    assert (old.policy, new.policy) == ("prefill_first", "mixed")
    assert resolve_serving(vllm, "h200", 141, version="0.7.3").policy == "mixed"  # chunked: V0 mixes chunks


def test_a_version_range_must_read_as_one():
    """A range whose bounds are not versions, or whose lower bound is after its upper, is a user's
    mistake: one line, exit 2; any other text is a version a rule may not know (no problem)."""
    from typer.testing import CliRunner

    from calc.cli.app import app
    from calc.spec.versions import version_problem

    assert version_problem(">=0.3.6, <=0.4.0") is None and version_problem("sha-1234") is None
    assert "after the upper" in version_problem(">=0.5, <=0.4")
    assert "bounds are versions" in version_problem(">=soon, <=0.4")
    bench = Path(__file__).resolve().parents[2] / "fixtures" / "bench" / "vllm-serve-concurrency16.json"
    r = CliRunner().invoke(app, ["compare", str(bench), "--hardware", "h100-sxm", "--engine-version", ">=0.5, <=0.4"])
    assert r.exit_code == 2 and "--engine-version" in r.output and "Traceback" not in r.output
