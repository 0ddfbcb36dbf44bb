"""The planner's chunked-prefill knob: each size is its own candidate, named in the labels."""

import numpy as np
import pytest

from calc.core.errors import SpecError
from calc.serving.planner.plan import plan
from calc.serving.replica.floors import floors
from calc.spec.workload import load_workload

BASE = """\
name: t
model: llama-3.1-8b
hardware: [h100-sxm]
arrival: {rate_per_s: 2}
prompt_len: {dist: fixed, value: 4096}
output_len: {dist: fixed, value: 20}
slo: {ttft_p99_s: 2.0}
max_gpus: 2
tp: [1]
max_batch: [32]
requests: 60
"""


def test_each_chunk_size_is_a_candidate(tmp_path):
    w = tmp_path / "w.yaml"
    w.write_text(BASE + "chunk_tokens: [512, 4096]\n")
    p = plan(load_workload(w))
    labels = {o.label for o in p.options}
    assert {"h100-sxm TP1, max batch 32, chunk 512", "h100-sxm TP1, max batch 32, chunk 4,096"} <= labels
    chunks = {t.replica.serving.max_batched_tokens for t in p.trials}
    assert chunks == {512, 4096}
    assert all(t.label.endswith(f"chunk {t.replica.serving.max_batched_tokens:,}") for t in p.trials)


def test_the_ttft_floor_runs_the_prompt_in_chunks_of_the_size(tmp_path):
    w = tmp_path / "w.yaml"
    w.write_text(BASE + "chunk_tokens: [512, 4096]\n")
    p = plan(load_workload(w))
    reps = {t.replica.serving.max_batched_tokens: t.replica for t in p.trials}
    T, G = np.array([4096]), np.array([20])
    small = reps[512]
    # 4096 tokens in chunks of 512: 8 steps of 512 new tokens after 0, 512, ..., 3584 cached
    by_hand = sum(small.steps.step_s([512], [512 * i]) for i in range(8))
    assert floors(small, T, G)["ttft"][0] == pytest.approx(by_hand)
    assert floors(reps[4096], T, G)["ttft"][0] == pytest.approx(reps[4096].steps.step_s([4096], [0]))


def test_chunk_sizes_below_16_are_an_error(tmp_path):
    w = tmp_path / "w.yaml"
    w.write_text(BASE + "chunk_tokens: [8]\n")
    with pytest.raises(SpecError, match="chunk_tokens"):
        load_workload(w)
