"""The planner and `roofline plan`: the answer, the rejections, the report files, and the
outcomes that are answers (exit 0) rather than user errors (exit 2)."""

import json

import pytest
from typer.testing import CliRunner

from calc.render.plan import plan_record
from calc.serving.planner.plan import plan
from calc.spec.workload import load_workload

runner = CliRunner()

TWO_K = """\
name: two-k
model: llama-3.1-8b
hardware: [h100-sxm]
arrival: {rate_per_s: 2}
prompt_len: {dist: fixed, value: 1536}
output_len: {dist: fixed, value: 513}
slo: {tpot_p99_s: 0.1}
tp: [1]
max_batch: [512]
max_gpus: 1
requests: 100
serving: {max_batched_tokens: 2048}  # pinned (the default preset's budget on an 80 GB H100 is 8192)
"""

CHAT = """\
name: small-chat
model: llama-3.1-8b
hardware: [l4, h100-sxm, a100-80gb-sxm]
arrival: {rate_per_s: 8}
prompt_len: {dist: lognormal, median: 600, sigma: 0.7, min: 16, max: 4096}
output_len: {dist: lognormal, median: 150, sigma: 0.6, min: 4, max: 1024}
slo: {ttft_p99_s: 1.0, tpot_p99_s: 0.05}
tp: [1, 2]
max_batch: [32, 128]
max_gpus: 4
requests: 300
"""


def write(tmp_path, text, name="w.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def run(*args):
    return runner.invoke(app_(), [str(a) for a in args])


def app_():
    from calc.cli.app import app

    return app


def test_planner_kv_concurrency_matches_the_hand_derivation(tmp_path):
    """Llama-3.1-8B bf16 on one 80 GB GPU (81,090 MiB as CUDA gives it a process), 2k contexts
    (1536 + 513 - 1 = 2048 positions), launched as `vllm serve --max-num-seqs 512`. The workspace is
    what vLLM 0.19's profile counts: the larger of the pass at the 2048-token budget (192,937,984 B,
    see tests/calc/serving/test_capacity.py) and the dummy sampler over 512 requests, 15.8 B x 512 x
    128,256 logits = 1,037,539,737.6 B, plus 0.25 GiB outside torch: 1,305,975,193.6 B;
    pages = floor((81,090 x 2**20 x 0.9 - 16,060,522,496 - 1,305,975,193.6) / (16 x 131072)) = 28,209;
    sequences = floor(28,209 / (2048 / 16)) = 220."""
    r = run("plan", write(tmp_path, TWO_K), "--format", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    rep = d["chosen"]["per_replica"]
    assert rep["memory_weights_bytes"] == 8_030_261_248 * 2
    forward = 2048 * 4096 * 2 + 2048 * 2 * 14336 * 2 + 2048 * 14336 * 2
    sampler = 15.8 * 512 * 128_256
    assert forward == 192_937_984 < sampler
    assert rep["memory_workspace_bytes"] == pytest.approx(sampler + 0.25 * 2**30)
    assert rep["kv_pages"] == (81_090 * 2**20 * 0.9 - 16_060_522_496 - (sampler + 0.25 * 2**30)) // (16 * 131072) == 28_209
    assert rep["kv_sequences_at_longest_context"] == 28_209 // 128 == 220


def test_plan_picks_the_cheapest_that_meets_the_slos(tmp_path):
    p = plan(load_workload(write(tmp_path, CHAT)))
    c = p.chosen
    assert c is not None and c.meets
    for t in p.trials:  # nothing cheaper that was simulated meets the SLOs
        if t.meets:
            assert t.usd_per_hour >= c.usd_per_hour
    assert all(p.ranked[i].usd_per_hour <= p.ranked[i + 1].usd_per_hour for i in range(len(p.ranked) - 1))
    for o in p.rejected:
        assert o.reason and o.kind in ("fit", "split", "kv", "ttft", "tpot", "gpus", "slo", "pruned", "same")
    # fewer replicas of the chosen configuration miss (or cannot keep up)
    opt = next(o for o in p.options if c in o.trials)
    assert all(not t.meets for t in opt.trials if t.replicas < c.replicas)
    rec = plan_record(p)
    assert rec["chosen"]["config"] == c.label and rec["chosen"]["meets_slos"]


def test_plan_writes_markdown_and_self_contained_html(tmp_path):
    out = tmp_path / "report"
    r = run("plan", write(tmp_path, CHAT), "--out", out)
    assert r.exit_code == 0, r.output
    assert "Cheapest configuration that meets the SLOs" in r.output and "planned in" in r.output
    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    for section in ("## Answer", "## Workload", "## Configurations that meet the SLOs", "## Rejected configurations",
                    "## Chosen configuration", "## Charts", "## Assumptions", "## What would change the answer"):
        assert section in md
    for png in ("pareto.png", "kv.png", "roofline.png"):
        assert f"]({png})" in md and (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert html.count("data:image/png;base64,") == 3 and "src=\"http" not in html and "<table>" in html
    assert "uncalibrated" in md and "efficiencies compute" in md
    assert json.loads((out / "plan.json").read_text())["chosen"]["gpus"] >= 1
    assert not list(out.glob(".*.tmp"))  # written atomically, nothing left behind


def test_no_configuration_meets_the_slos_is_an_answer(tmp_path):
    text = CHAT.replace("slo: {ttft_p99_s: 1.0, tpot_p99_s: 0.05}", "slo: {e2e_p99_s: 0.05}")
    r = run("plan", write(tmp_path, text))
    assert r.exit_code == 0, r.output
    assert "No configuration meets the SLOs" in r.output and "Closest:" in r.output and "e2e p99" in r.output


def test_a_workload_that_fits_on_no_candidate(tmp_path):
    text = CHAT.replace("llama-3.1-8b", "llama-3.1-405b").replace("[l4, h100-sxm, a100-80gb-sxm]", "[l4, h100-sxm]")
    out = tmp_path / "nofit"
    r = run("plan", write(tmp_path, text), "--out", out)
    assert r.exit_code == 0, r.output
    assert "fits on no candidate" in r.output and "does not fit" in r.output and "short by" in r.output
    assert "fits on no candidate" in (out / "report.md").read_text()


def test_slo_floor_rejects_without_simulating(tmp_path):
    text = CHAT.replace("slo: {ttft_p99_s: 1.0, tpot_p99_s: 0.05}", "slo: {tpot_p99_s: 0.001}")
    p = plan(load_workload(write(tmp_path, text)))
    assert p.chosen is None and not p.trials
    assert {o.kind for o in p.rejected} == {"tpot"}
    assert "a decode step at batch 1" in p.rejected[0].reason


def test_unpriced_hardware_ranks_by_gpus(tmp_path):
    text = CHAT.replace("llama-3.1-8b", "llama-3.2-1b").replace("[l4, h100-sxm, a100-80gb-sxm]", "[rtx-4090]")
    p = plan(load_workload(write(tmp_path, text)))
    assert p.chosen is not None and p.chosen.usd_per_hour is None
    r = run("plan", write(tmp_path, text, "again.yaml"))
    assert r.exit_code == 0 and "price unknown" in r.output


def test_closed_loop_concurrency(tmp_path):
    text = CHAT.replace("arrival: {rate_per_s: 8}", "arrival: {concurrency: 24}").replace(
        "[l4, h100-sxm, a100-80gb-sxm]", "[h100-sxm]")
    p = plan(load_workload(write(tmp_path, text)))
    assert p.chosen is not None and p.chosen.sim.offered_per_s is None


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_formats(tmp_path, fmt):
    r = run("plan", write(tmp_path, TWO_K), "--format", fmt, "--requests", 50)
    assert r.exit_code == 0, r.output
    if fmt == "csv":
        import csv
        import io

        assert r.stdout.splitlines()[0].startswith("config,hardware,tp,max_batch,replicas,gpus")
        rows = list(csv.DictReader(io.StringIO(r.stdout)))
        assert rows and all(int(r["gpus"]) == int(r["tp"]) * int(r["replicas"]) for r in rows)
    else:
        d = json.loads(r.stdout)
        chosen = d["chosen"]
        # one replica of TP t on g GPUs; the per-replica weights are Llama-3.1-8B's bf16 bytes over TP
        assert chosen["gpus"] == chosen["tp"] * chosen["replicas"] >= 1
        assert chosen["per_replica"]["memory_weights_bytes"] == 8_030_261_248 * 2 / chosen["tp"]


def test_out_must_be_a_folder(tmp_path):
    f = tmp_path / "file.txt"
    f.write_text("x")
    r = run("plan", write(tmp_path, TWO_K), "--out", f)
    assert r.exit_code == 2 and "not a folder" in r.output


def test_planning_modules_import_no_matplotlib_or_pandas():
    import subprocess
    import sys

    code = ("import sys, calc.spec.workload, calc.serving.replica.capacity, calc.serving.sim.simulate, calc.serving.planner.plan, calc.render.plan, calc.plot.plan; "
            "print(' '.join(m for m in ('torch', 'matplotlib', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_fp8_alternatives_of_the_chosen_replica(tmp_path):
    """The what-if figures: FP8 KV holds twice the tokens per page; FP8 weights halve the matmuls' bytes."""
    p = plan(load_workload(write(tmp_path, TWO_K), 60))
    r, w = p.chosen.replica, p.what_if
    # pages = floor(room / (block x kv_bytes_per_token)): half the bytes per token -> 2p or 2p + 1 pages
    assert w.fp8_kv_pages in (2 * r.kv.pages, 2 * r.kv.pages + 1)
    # Llama-3.1-8B bf16: 8,030,261,248 params; FP8 stores the decoder matmuls at 1 byte, while the
    # embeddings and lm_head (2 x 128,256 x 4,096) and the norms ((2 x 32 + 1) x 4,096) stay bf16
    keep = 2 * 128_256 * 4096 + 65 * 4096
    assert w.fp8_weights_bytes == (8_030_261_248 - keep) * 1 + keep * 2
    assert w.fp8_decode_step.time_s < w.steps.decode.time_s
    assert w.steps.running >= 1 and w.steps.with_chunk.time_s > w.steps.decode.time_s


HOPELESS = """\
name: hopeless
model: llama-3.1-8b
hardware: [h100-sxm]
arrival: {rate_per_s: 8}
prompt_len: {dist: fixed, value: 1536}
output_len: {dist: fixed, value: 129}
slo: {tpot_p99_s: 0.008}
tp: [1]
max_batch: [16, 64]
max_gpus: 4
requests: 200
"""


def test_a_max_batch_that_misses_at_the_most_replicas_is_not_simulated_at_fewer(tmp_path):
    """Max batch 16 misses at 1 replica and at 4 (max_gpus). At 4 its running batch never reached
    16, so max batch 64's run there is the same run, and it misses: max batch 64 is not simulated
    at fewer replicas (each one's load only grows; here simulated to show it misses at 1 too)."""
    from calc.serving.planner.planresult import Option
    from calc.serving.planner.search import Search

    wl = load_workload(write(tmp_path, HOPELESS))
    p = plan(wl)
    o16, o64 = [o for o in p.options if o.max_batch]
    assert p.simulations == 2
    assert [t.replicas for t in o16.trials] == [1, 4] and not any(t.meets for t in o16.trials)
    (t64,) = o64.trials
    assert t64.replicas == 4 and t64.same_as == 16 and t64.sim is o16.trials[1].sim
    assert o64.kind == "slo" and o64.reason == o16.reason and "with 4 replicas" in o64.reason
    search = Search(wl, None, p.dtypes)
    at_one = search.trial(Option(t64.replica.hw, 1, 64, None), t64.replica, t64.saturation, 1)
    assert search.sims == 1 and not at_one.meets and at_one.stats["tpot_p99"] > 0.008


SIBLINGS = """\
name: siblings
model: llama-3.1-8b
hardware: [h100-sxm]
arrival: {rate_per_s: 40}
prompt_len: {dist: fixed, value: 1024}
output_len: {dist: fixed, value: 129}
slo: {tpot_p99_s: 0.02, ttft_p99_s: 0.5}
tp: [1]
max_batch: [16, 32]
max_gpus: 8
requests: 200
"""


def test_another_max_batchs_fewest_replicas_leads_the_search_but_never_decides_it(tmp_path):
    """Max batch 32 (the cheaper lower bound) meets at 3 replicas, its closed-form lower bound. Max
    batch 16 cannot keep up below 4, so its search starts at 4 (3 raised to its lower bound), misses,
    and meets at 4 + 1 = 5: two runs. Searched alone it runs the closed-form guess 4, then the most
    replicas allowed (8), then bisects 6 and 5: the same answer from four runs."""
    from calc.serving.planner.planresult import Option
    from calc.serving.planner.search import Search

    wl = load_workload(write(tmp_path, SIBLINGS))
    p = plan(wl)
    o16, o32 = [o for o in p.options if o.max_batch]
    assert [(t.replicas, t.meets) for t in o32.trials] == [(3, True)] and o32.lower_bound_replicas == 3
    assert [(t.replicas, t.meets) for t in o16.trials] == [(4, False), (5, True)] and o16.lower_bound_replicas == 4
    assert p.simulations == 3
    t = o16.best
    alone, search = Option(t.replica.hw, 1, 16, None), Search(wl, None, p.dtypes)
    search.fewest_replicas(alone, t.replica, t.saturation, 4, 8)
    assert [t.replicas for t in alone.trials] == [4, 8, 6, 5] and alone.best.replicas == 5
    assert alone.best.stats == t.stats  # the same run: the order of the runs changes no result


def test_after_a_miss_on_a_gpu_its_next_option_tries_the_most_replicas_first(tmp_path):
    """TP1 misses TPOT p99 8 ms at 1 replica and at 4 (max_gpus 4): two runs, as with no history.
    On the same GPU TP2 is then tried at its most replicas (4 GPUs / 2 = 2) first, where it meets,
    then at its closed-form guess, 1, where it meets too: its answer is 1 replica, the same one a
    search of TP2 alone finds in one run (the order is a bet on a hopeless option, never a decision)."""
    from calc.serving.planner.planresult import Option
    from calc.serving.planner.search import Search

    wl = load_workload(write(tmp_path, HOPELESS.replace("tp: [1]", "tp: [1, 2]").replace("[16, 64]", "[64]")))
    p = plan(wl)
    tp1, tp2 = [o for o in p.options if o.max_batch]
    assert [(t.replicas, t.meets) for t in tp1.trials] == [(1, False), (4, False)] and tp1.kind == "slo"
    assert [(t.replicas, t.meets) for t in tp2.trials] == [(2, True), (1, True)] and tp2.best.replicas == 1
    assert p.simulations == 4
    t = tp2.best
    alone, search = Option(t.replica.hw, 2, 64, None), Search(wl, None, p.dtypes)
    search.fewest_replicas(alone, t.replica, t.saturation, 1, 2)
    assert [t.replicas for t in alone.trials] == [1] and alone.best.stats == t.stats


def test_the_plan_json_scheduler_carries_no_null(tmp_path):
    # A field the preset leaves unset (no KV token cap, no MoE kernel family) is left out, not
    # written as null: a null number reads as silent nonsense (the fuzz campaign flagged kv_tokens).
    r = run("plan", write(tmp_path, CHAT), "--format", "json", "-q")
    assert r.exit_code == 0, r.output
    sched = json.loads(r.stdout)["scheduler"]
    assert sched and None not in sched.values()
    assert "kv_tokens" not in sched and sched["max_batched_tokens"] > 0
