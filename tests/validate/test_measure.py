"""The held-out grid's timing (validate/measure.py): a shape is warmed up once, not once per round."""

import time

import pytest

torch = pytest.importorskip("torch")

from calc.core.progress import Reporter  # noqa: E402
from calc.spec.catalog import load_hardware  # noqa: E402
from calc.spec.model import ModelSpec  # noqa: E402
from validate.measure import PARTS, measure_grid  # noqa: E402
from validate.reference import build_decoder  # noqa: E402
from validate.runner import _Points  # noqa: E402
from validate.timing import Point  # noqa: E402

SPEC = ModelSpec(name="t", num_layers=1, hidden_size=64, vocab_size=100, max_context=64, dtype="fp32",
                 attention=dict(num_heads=4, num_kv_heads=2, head_dim=16),
                 mlp=dict(kind="gated", intermediate_size=96))


class Counted:
    """The reference decoder, each prefill and decode call counted and made ``call_s`` long."""

    def __init__(self, call_s: float):
        self.model, self.call_s, self.calls = build_decoder(SPEC, 40), call_s, 0

    def __getattr__(self, name):
        return getattr(self.model, name)

    def _slow(self, out):
        self.calls += 1
        time.sleep(self.call_s)
        return out

    def prefill(self, tokens):
        return self._slow(self.model.prefill(tokens))

    def decode_step(self, token, pos):
        return self._slow(self.model.decode_step(token, pos))


def grid(model, point, rounds, tmp_path, per_point=0.01, spent=None):
    hw = load_hardware("cpu-generic-2core")
    meta = {"model": "t", "layers": 1, "device": "cpu", "threads": 0}
    with torch.inference_mode():
        (row,) = measure_grid(model, SPEC, hw, hw, [point], meta, lambda: None, per_point, 5.0, rounds,
                              _Points(Reporter(), 1), tmp_path / "m.csv", [], "cpu", None, torch, lambda *a: None,
                              spent)
    return row


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_a_slow_shape_is_warmed_up_once_over_two_rounds(tmp_path, phase):
    # 60 ms a call (> 50 ms: the first call is the warm-up) and a budget of 5 ms a round: one sample
    # a round. Round 1: the warm-up, then 1 sample; round 2: 1 sample, no warm-up. 3 calls, not 4.
    model = Counted(0.06)
    row = grid(model, Point("fp32", phase, 2, 16), 2, tmp_path)
    assert row.status == "ok" and row.samples == 2
    assert model.calls == 1 + 2
    assert row.measured_s >= 0.06


def test_a_fast_shape_gets_its_warm_up_calls_in_round_one_only(tmp_path):
    # 4 ms a call (< 50 ms, > the 2 ms a sample lasts: one call a sample), 0.5 s a round: round 1
    # makes its first call and time_call's 2 warm-up calls, then samples; round 2 makes samples only
    # (at least 5 a round)
    model = Counted(0.004)
    row = grid(model, Point("fp32", "prefill", 1, 8), 2, tmp_path, per_point=1.0)
    assert row.status == "ok" and row.samples >= 2 * 5
    assert model.calls == 3 + row.samples


def test_the_timing_says_where_its_time_went(tmp_path):
    # the slow shape above: 3 calls of 60 ms and more, 2 of them kept samples, 1 the warm-up; no
    # thread count, so no sample is dropped as descheduled
    model, spent = Counted(0.06), {}
    t0 = time.perf_counter()
    row = grid(model, Point("fp32", "prefill", 2, 16), 2, tmp_path, spent=spent)
    wall = time.perf_counter() - t0
    assert list(spent) == list(PARTS)
    kept, again, warm = spent.values()
    assert kept == pytest.approx(2 * row.measured_s, rel=0.05) and kept >= 2 * 0.06
    assert again < 0.01  # nothing dropped: only the clock reads between samples
    assert 0.06 <= warm < 0.06 * 1.5 + 0.05  # one call, plus building the call's inputs
    assert kept + again + warm <= wall
