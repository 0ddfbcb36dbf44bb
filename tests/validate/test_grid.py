"""validate.grid: which passes each grid times, and the memory check that refuses a model too large."""

import pytest

from calc.core.errors import SpecError
from calc.spec.catalog import load_model as resolve_model
from validate.grid import check_fits, grid


def test_serving_grid_caps_a_prefill_at_16384_tokens():
    spec = resolve_model("llama-3.1-8b")
    pts = grid(spec, "serving", ("bf16",))
    prefill = sorted((p.batch, p.size) for p in pts if p.phase == "prefill")
    decode = sorted((p.batch, p.size) for p in pts if p.phase == "decode")
    # batches 1, 8, 64 x prompts 512, 2048, kept where B x T <= 16384: 1x512, 1x2048, 8x512 (4096),
    # 8x2048 (16384); 64x512 = 32768 and 64x2048 = 131072 are over
    assert prefill == [(1, 512), (1, 2048), (8, 512), (8, 2048)]
    # decode: every batch at every context (4096 + 1 <= 131072, the model's context)
    assert decode == [(b, s) for b in (1, 8, 64) for s in (512, 4096)]


def test_a_context_past_the_models_window_is_dropped():
    spec = resolve_model("phi-3-mini")  # max_position_embeddings 4096: a 4096-token cache plus one is over
    assert spec.max_context == 4096
    sizes = {p.size for p in grid(spec, "serving", ("bf16",)) if p.phase == "decode"}
    assert sizes == {512}


def test_check_fits_sizes_activations_by_the_largest_prefill_not_the_largest_batch():
    spec = resolve_model("llama-3.1-8b")
    pts = grid(spec, "serving", ("bf16",))
    # the largest prefill holds 16384 tokens: 6 x 16384 x 14336 (intermediate) x 4 bytes = 5.6 GB of
    # activations; B = 64 x T = 2048 (131072 tokens) would have been 45 GB
    check_fits(spec, ("bf16",), pts, "cuda", 141e9)
    with pytest.raises(SpecError, match="--layers"):
        check_fits(spec, ("bf16",), pts, "cuda", 12e9)  # 16 GB of bf16 weights alone
