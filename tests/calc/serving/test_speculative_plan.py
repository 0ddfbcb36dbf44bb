"""Speculative decoding in the planner: the verification's step features, the acceptance clock,
the draft in the KV budget, workload validation and the search with and without."""

import math

import numpy as np
import pytest
from typer.testing import CliRunner

from calc.cli.app import app
from calc.core.errors import SpecError
from calc.core.units import DTYPE_BYTES
from calc.cost.dtypes import Dtypes
from calc.cost.efficiency import Efficiency
from calc.cost.latency import decode_cost
from calc.cost.speculative import SpecConfig, verify_cost
from calc.serving.planner.plan import plan
from calc.serving.replica.capacity import Replica
from calc.serving.sim.simulate import simulate
from calc.serving.steps.stepmodel import StepFeatures
from calc.spec.catalog import load_hardware, load_model
from calc.spec.workload import Serving, load_workload

TARGET, DRAFT = load_model("llama-3.1-8b"), load_model("llama-3.2-1b")
H100 = load_hardware("h100-sxm")
DT = Dtypes.resolve(TARGET)


def _rep(spec, max_batch=8, tp=1):
    return Replica(TARGET, H100, tp, max_batch, DT, Serving(), speculative=spec)


def test_verification_features_by_hand():
    # two sequences at contexts 10 and 20, k = 3: each verifies 4 positions, all reaching lm_head
    f = StepFeatures.decoding((None,), np.array([10, 20]), rows=4)
    assert f.tokens == 2 * 4 and f.logit_rows == 2 * 4 and f.decode_seqs == 2 and f.chunk_seqs == 0
    # pairs: sum (k+1) S + (k+1)(k+2)/2 = (4*10 + 10) + (4*20 + 10)
    assert f.decode_pairs[0] == (4 * 10 + 10) + (4 * 20 + 10)
    assert f.decode_read[0] == (10 + 4) + (20 + 4)  # S + k + 1 positions read
    # the same from the groups themselves
    g = StepFeatures.of((None,), [4.0, 4.0], [10.0, 20.0], logits=4, decode_rows=4)
    assert g == f or all(np.array_equal(getattr(g, n), getattr(f, n)) for n in f.__dataclass_fields__)


def test_spec_step_matches_the_cost_layer():
    """A pure decode step at batch B and context S = calc.cost.speculative's verification + k draft
    passes, the draft's passes without the engine's step overhead (run inside the target's step)."""
    rep = _rep(SpecConfig(4, 0.7, draft=DRAFT))
    B, S, k = 8, 1000, 4
    timer = rep.timer
    got = float(timer.decode_run(np.full(B, S), 0.0)[0])
    eff = Efficiency.of(H100)
    ddt = Dtypes.resolve(DRAFT, DT.weight, DT.kv, DT.compute)
    draft = decode_cost(DRAFT, H100, B, S, ddt, eff, "fused", rep.draft.parallel)
    want = (float(verify_cost(TARGET, H100, B, S, k, DT, eff, "fused", rep.par).time_s)
            + k * (float(draft.time_s) - draft.step_overhead_s))
    assert got == pytest.approx(want, rel=1e-9)
    assert timer.tokens_per_step == pytest.approx((1 - 0.7**5) / (1 - 0.7))


def test_draft_in_the_kv_budget():
    plain, spec = _rep(None).kv, _rep(SpecConfig(4, 0.7, draft=DRAFT)).kv
    # llama-3.2-1b ties embedding and lm_head: every parameter once, at bf16
    assert DRAFT.tie_embeddings
    assert spec.weights_bytes - plain.weights_bytes == pytest.approx(DRAFT.params_total * DTYPE_BYTES["bf16"])
    # draft KV per position: 16 layers x 2 x 8 KV heads x 64 head dim x 2 bytes
    assert spec.kv_bytes_per_token - plain.kv_bytes_per_token == 16 * 2 * 8 * 64 * 2
    assert spec.pages == math.floor(spec.kv_bytes / (16 * spec.kv_bytes_per_token))


def test_acceptance_clock_emits_the_expected_tokens():
    # alpha 0.5, k 2: E = (1 - 0.5^3) / 0.5 = 1.75; steps j = 0..3 emit floor(1.75 (j+1)) - floor(1.75 j)
    # = 1, 2, 2, 2 tokens: 7 after 4 steps. One request of 1 + 7 outputs: a prefill and 4 decode steps.
    rep = _rep(SpecConfig(2, 0.5, draft=DRAFT))
    assert rep.tokens_per_step == pytest.approx(1.75)
    sim = simulate(rep, [100], [8], concurrency=1)
    assert sim.steps == 1 + 4
    # two requests of 1 + 8 outputs each: the 5th step emits floor(1.75 * 5) - 7 = 1, so 5 decode steps
    sim = simulate(rep, [100, 100], [9, 9], concurrency=2)
    assert sim.steps == 1 + 5


WL = """\
name: t
model: llama-3.1-8b
hardware: [h100-sxm]
arrival: {rate_per_s: 2}
prompt_len: {dist: fixed, value: 500}
output_len: {dist: fixed, value: 100}
slo: {tpot_p99_s: 0.011}
max_gpus: 2
tp: [1]
max_batch: [16]
requests: 60
"""


def test_planner_searches_with_and_without(tmp_path):
    w = tmp_path / "w.yaml"
    w.write_text(WL + "speculative: {draft: llama-3.2-1b, k: 4, acceptance: 0.7}\n")
    p = plan(load_workload(w))
    specs = {o.trials[0].replica.speculative is not None for o in p.options if o.trials}
    assert specs == {True, False}
    e = p.spec_effect
    assert e is not None and e.best_with is not None
    assert [r.batch for r in e.rows][:3] == [1, 2, 4]


@pytest.mark.parametrize("block, field, problem", [
    ("{draft: llama-3.2-1b, k: 4, acceptance: 1.0}", "speculative.acceptance", "less than 1"),
    ("{draft: qwen2.5-7b, k: 4, acceptance: 0.7}", "speculative.draft", "share the vocabulary"),
    ("{draft: llama-3.2-1b, heads: {layers: 1}, k: 4, acceptance: 0.7}", "speculative", "one of them"),
])
def test_bad_speculative_block(tmp_path, block, field, problem):
    w = tmp_path / "w.yaml"
    w.write_text(WL + f"speculative: {block}\n")
    with pytest.raises(SpecError) as exc:
        load_workload(w)
    assert field in str(exc.value) and problem in str(exc.value)
    r = CliRunner().invoke(app, ["plan", str(w)])
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
