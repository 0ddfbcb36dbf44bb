"""A mixed step of the reference decoder (validate --grid serving): B decode rows and one prompt
chunk in one pass give what the separate passes give, and the calculator prices it as
mixed_step_cost does."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from calc.cost.dtypes import Dtypes  # noqa: E402
from calc.cost.efficiency import Efficiency  # noqa: E402
from calc.cost.latency import decode_cost, prefill_cost  # noqa: E402
from calc.spec.catalog import load_hardware, load_model  # noqa: E402
from calc.spec.model import ModelSpec  # noqa: E402
from validate.grid import mixed_points  # noqa: E402
from validate.measurements import predict_point  # noqa: E402
from validate.reference import build_decoder  # noqa: E402
from validate.timing import Point  # noqa: E402

B, S, C, T = 3, 20, 12, 9


def _spec(**over) -> ModelSpec:
    return ModelSpec(name="t", num_layers=2, hidden_size=64, vocab_size=100, max_context=64, dtype="fp32",
                     attention=dict(num_heads=4, num_kv_heads=2, head_dim=16, **over),
                     mlp=dict(kind="gated", intermediate_size=96))


@pytest.mark.parametrize("over", [{}, {"qkv_bias": True, "qk_norm": True}])
def test_a_mixed_step_gives_the_separate_passes_logits(over):
    spec = _spec(**over)
    model = build_decoder(spec, 64, "fp32")
    gen = torch.Generator().manual_seed(5)
    seq = torch.randint(0, 100, (1, C + T), generator=gen)
    rows = torch.randint(0, 100, (B, 1), generator=gen)
    with torch.inference_mode():
        # the chunk: its first C tokens prefilled into a batch-1 cache, then the last T in the mixed step
        model.setup(1, torch.float32, "cpu")
        full = model.prefill(seq)[0]  # the C + T tokens at once: the chunk's last logits must match
        model.setup(1, torch.float32, "cpu")
        model.prefill(seq[:, :C])
        prompt_cache = model.cache
        model.setup(B, torch.float32, "cpu")
        model.cache.prime()
        alone = model.decode_step(rows, S)  # the rows alone, over zeroed caches
        model.setup(B, torch.float32, "cpu")
        model.cache.prime()
        model.chunk_cache = prompt_cache
        mixed = model.mixed_step(rows, S, seq[:, C:], C)
    assert mixed.shape == (B + 1, 100)
    torch.testing.assert_close(mixed[:B], alone, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(mixed[B], full, rtol=1e-4, atol=1e-4)


def test_the_chunk_attends_to_the_cached_tokens():
    """The chunk's keys start at C: changing the C cached tokens changes its logits (a mixed step that
    ignored the cache, or aligned the causal mask top-left, would not see them all)."""
    model = build_decoder(_spec(), 64, "fp32")
    gen = torch.Generator().manual_seed(6)
    rows = torch.randint(0, 100, (B, 1), generator=gen)
    chunk = torch.randint(0, 100, (1, T), generator=gen)
    outs = []
    with torch.inference_mode():
        for fill in (0.0, 1.0):
            model.setup(B, torch.float32, "cpu")
            model.cache.prime()
            model.setup_chunk(C + T)
            for k in model.chunk_cache.k:
                k.narrow(2, 0, C).fill_(fill)
            outs.append(model.mixed_step(rows, S, chunk, C))
    assert torch.equal(outs[0][:B], outs[1][:B])  # the rows do not see the chunk's cache
    assert not torch.allclose(outs[0][B], outs[1][B])


def test_a_mixed_point_is_priced_between_its_parts_and_their_sum():
    """One pass over B + T tokens reads the weights once: dearer than the chunk's prefill alone (more
    tokens through every GEMM, plus B rows' attention), cheaper than the chunk and the decode step apart."""
    spec, hw = load_model("llama-3.1-8b"), load_hardware("h200")
    p = Point("bf16", "mixed", 64, 1024, 2048, 2048)
    mixed, _ = predict_point(spec, hw, p)
    dt, eff = Dtypes("bf16", "bf16", "bf16"), Efficiency.of(hw)
    chunk = float(prefill_cost(spec, hw, np.float64(1), np.float64(2048), dt, eff, past=2048.0)[0].time_s)
    rows = float(decode_cost(spec, hw, np.float64(64), np.float64(1024), dt, eff).time_s)
    assert chunk < mixed < chunk + rows


def test_the_serving_grid_holds_mixed_steps_within_context_and_window():
    # llama-3.1-8b: batches 8, 64 x chunks 512, 2048 x cached 0, 2048: 8 points, all within 131072
    pts = mixed_points(load_model("llama-3.1-8b"), "serving", "bf16")
    assert sorted((p.batch, p.chunk, p.cached) for p in pts) == [
        (b, t, c) for b in (8, 64) for t in (512, 2048) for c in (0, 2048)]
    assert all(p.size == 1024 and p.positions == max(1025, p.cached + p.chunk) for p in pts)
    # gemma-2-9b's sliding window is 4096: 2048 cached + 2048 = 4096 fits; none is dropped
    assert len(mixed_points(load_model("gemma-2-9b"), "serving", "bf16")) == 8
    # phi-3-mini slides a 2047-token window on every layer: only 512 after 0 (512 + 2048, 2048 + 0 and
    # 2048 + 2048 are over), at both batches. MLA (deepseek-v2-lite) has no mixed step; the default grid none
    spec = load_model("phi-3-mini")
    assert spec.attention.sliding_window == 2047
    assert sorted((p.batch, p.chunk, p.cached) for p in mixed_points(spec, "serving", "bf16")) == [
        (8, 512, 0), (64, 512, 0)]
    assert mixed_points(load_model("deepseek-v2-lite"), "serving", "bf16") == []
    assert mixed_points(load_model("llama-3.1-8b"), "default", "bf16") == []
