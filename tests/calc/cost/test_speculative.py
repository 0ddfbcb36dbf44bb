"""Speculative decoding: expected tokens per step, step cost, draft memory, input errors."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from calc import SpecError, load_hardware, load_model
from calc.cli.app import app
from calc.cost.efficiency import Efficiency
from calc.cost.latency import decode_cost, estimate
from calc.cost.operators import Dtypes
from calc.cost.parallel import SINGLE
from calc.cost.setup import Setup
from calc.cost.speculative import DraftHeads, SpecConfig, expected_tokens, speculative, verify_cost


@pytest.fixture(scope="module")
def llama8b():
    return load_model("llama-3.1-8b")


@pytest.fixture(scope="module")
def llama1b():
    return load_model("llama-3.2-1b")


@pytest.fixture(scope="module")
def h100():
    return load_hardware("h100-sxm")


@pytest.mark.parametrize("alpha,k,tokens", [
    (0.5, 2, 1 + 0.5 + 0.25),                     # accepted prefix 0, 1 or 2, plus the target's token
    (0.7, 4, 1 + 0.7 + 0.49 + 0.343 + 0.2401),
    (0.0, 5, 1.0),                                # nothing accepted: one token per step, as plain decode
])
def test_expected_tokens_per_step(alpha, k, tokens):
    assert float(expected_tokens(alpha, k)) == pytest.approx(tokens)


def test_verify_pass_runs_every_weight_over_k_plus_1_positions(h100):
    tiny = load_model("tiny-decoder")
    dt, eff = Dtypes.resolve(tiny), Efficiency.of(h100, True)
    # H=256, Hq=4, Hkv=2, D=64, V=128, no MLP: q 256*256, k+v 2*256*128, o 256*256, lm_head 256*128 per token
    per_token = 2 * (256 * 256 + 2 * 256 * 128 + 256 * 256 + 256 * 128)
    ph = verify_cost(tiny, h100, 2, 100, 3, dt, eff, "fused", SINGLE)
    assert float(ph.linear_flops) == 2 * (3 + 1) * per_token
    # each of the 4 new queries sees the 100 cached keys plus the new ones up to itself: 101..104
    assert float(ph.attention_flops) == 2 * (101 + 102 + 103 + 104) * 4 * 4 * 64


def test_tpot_is_step_time_over_expected_tokens(llama8b, llama1b, h100):
    # G = 2: one decode step, at context T, so the step is k draft steps plus one verification at T
    est = estimate(llama8b, h100, 4, 512, 2, Setup(ideal=True))
    sp = speculative(est, SpecConfig(3, 0.6, draft=llama1b))
    dt, eff = Dtypes.resolve(llama1b), Efficiency.of(h100, True)
    draft = 3 * float(decode_cost(llama1b, h100, 4, 512, dt, eff).time_s)
    verify = float(verify_cost(llama8b, h100, 4, 512, 3, Dtypes.resolve(llama8b), eff, "fused", SINGLE).time_s)
    assert float(sp.step_mean_s) == pytest.approx(draft + verify)
    assert float(sp.tpot_s) == pytest.approx((draft + verify) / (1 + 0.6 + 0.36 + 0.216))


def test_draft_memory_counts_its_weights_and_kv(llama8b, llama1b, h100):
    est = estimate(llama8b, h100, 1, 512, 128)
    sp = speculative(est, SpecConfig(4, 0.7, draft=llama1b))
    # Llama 3.2 1B KV: 16 layers x 2 x 8 heads x 64 dims x 2 bytes per position; T + G - 1 + k positions
    assert float(sp.draft_kv_cache_bytes) == (512 + 127 + 4) * 16 * 2 * 8 * 64 * 2
    assert sp.draft_weight_bytes == llama1b.params_total * 2
    assert float(sp.memory_total_bytes) == pytest.approx(float(est.memory.total_bytes) + sp.draft_weight_bytes
                                                         + float(sp.draft_kv_cache_bytes))


def test_draft_heads_share_embedding_and_lm_head(llama8b, h100):
    sp = speculative(estimate(llama8b, h100, 1, 512, 16), SpecConfig(2, 0.5, heads=DraftHeads(1)))
    # one Llama 3.1 8B layer: q,o 4096*4096 each, k,v 4096*1024 each, MLP 3*4096*14336, 2 norms + the final one
    params = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 3 * 4096
    assert sp.draft_weight_bytes == params * 2


def test_speculation_stops_helping_as_batch_grows(llama8b, llama1b, h100):
    est = estimate(llama8b, h100, np.array([1, 512]), 512, 128)
    speedup = speculative(est, SpecConfig(4, 0.7, draft=llama1b)).speedup
    assert speedup[0] > 1 > speedup[1]


@pytest.mark.parametrize("cfg,option", [
    (dict(k=4, acceptance=1.0), "--spec-accept"),
    (dict(k=4, acceptance=-0.1), "--spec-accept"),
    (dict(k=0, acceptance=0.5), "--spec-k"),
])
def test_bad_spec_input(llama8b, llama1b, h100, cfg, option):
    with pytest.raises(SpecError) as e:
        speculative(estimate(llama8b, h100), SpecConfig(draft=llama1b, **cfg))
    assert e.value.path == option


def test_draft_vocab_must_match(llama8b, h100):
    with pytest.raises(SpecError, match="vocab"):
        speculative(estimate(llama8b, h100), SpecConfig(4, 0.5, draft=load_model("gpt2")))


runner = CliRunner()


def test_cli_estimate_speculative_beside_plain():
    args = ["estimate", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", "-f", "json"]
    plain = json.loads(runner.invoke(app, args).output)
    r = runner.invoke(app, args + ["--spec-draft", "llama-3.2-1b", "--spec-k", "4", "--spec-accept", "0.7"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    sp = d.pop("speculative")
    assert d == plain  # the contract keys are left as they are
    assert sp["tokens_per_step"] == pytest.approx(2.7731)
    assert sp["plain_tpot_s"] == plain["tpot_s"]
    text = runner.invoke(app, args[:-2] + ["--spec-draft", "llama-3.2-1b"]).output
    assert "tokens per verification step" in text and "plain" in text


@pytest.mark.parametrize("extra,needle", [
    (["--spec-draft", "llama-3.2-1b", "--spec-accept", "1"], "--spec-accept"),
    (["--spec-draft", "gpt2"], "vocab_size"),
    (["--spec-heads", "x:1"], "--spec-heads"),
])
def test_cli_bad_spec_exits_2(extra, needle):
    r = runner.invoke(app, ["estimate", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", *extra])
    assert r.exit_code == 2
    assert needle in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_cli_sweep_spec_columns():
    r = runner.invoke(app, ["sweep", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", "-b", "1,512",
                            "--spec-draft", "llama-3.2-1b", "--columns", "spec_tpot_s,spec_speedup"])
    assert r.exit_code == 0, r.output
    head, *rows = r.output.strip().splitlines()
    assert head.endswith("spec_tpot_s,spec_speedup") and len(rows) == 2
