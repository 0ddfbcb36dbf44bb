"""validate/reference.py's random fill: weights (and the kernel profile's matmul pool) tiled from one
block of normal draws; the weight arena that keeps one model's memory for the next."""

import pytest

torch = pytest.importorskip("torch")

from calc.spec.model import ModelSpec  # noqa: E402
from validate.arena import WeightArena  # noqa: E402
from validate.reference import RANDOM_BLOCK, build_decoder, fill_tiled, weight_bytes  # noqa: E402


def test_fill_tiled_writes_every_element_as_runs_of_the_block():
    gen = torch.Generator().manual_seed(3)
    block = torch.randn(RANDOM_BLOCK, generator=gen).repeat(2)
    n = 2 * RANDOM_BLOCK + 12345  # two whole runs and a short one
    flat = fill_tiled(torch.full((n,), torch.nan), block, gen)
    assert not flat.isnan().any()
    starts = []
    for at in range(0, n, RANDOM_BLOCK):
        run = flat[at:at + RANDOM_BLOCK]
        (start,) = torch.nonzero(block[:RANDOM_BLOCK] == run[0]).flatten().tolist()  # draws are distinct
        assert torch.equal(run, block[start:start + run.numel()])
        starts.append(start)
    assert len(set(starts)) == 3  # each run starts at its own random offset
    assert abs(float(flat.std()) - 1.0) < 0.01


def _spec(layers: int, **moe) -> ModelSpec:
    return ModelSpec(name="t", num_layers=layers, hidden_size=64, vocab_size=100, max_context=64, dtype="fp32",
                     attention=dict(num_heads=4, num_kv_heads=2, head_dim=16),
                     mlp=dict(kind="gated", intermediate_size=96), **moe)


def test_weight_arena_builds_the_same_model_in_the_memory_of_the_one_before():
    small = _spec(1)
    big = _spec(2, moe=dict(num_experts=4, experts_per_token=2, expert_intermediate_size=32))
    # by hand, fp32: embedding 100x64, per layer q 64x64, k and v 64x32, o 64x64, two norms of 64,
    # a gated MLP 3 x 64x96; final norm 64; lm_head 64x100. Every weight rounded up to 64 bytes.
    layer = (64 * 64 + 2 * 64 * 32 + 64 * 64) * 4 + 2 * 64 * 4 + 3 * 64 * 96 * 4
    assert weight_bytes(small, 16, "fp32") == 100 * 64 * 4 + layer + 64 * 4 + 64 * 100 * 4
    arena = WeightArena(weight_bytes(big, 16, "fp32"))
    base = arena.buffer.data_ptr()
    tokens = torch.randint(0, 100, (2, 5), generator=torch.Generator().manual_seed(1))
    for spec, dtype in ((big, "fp32"), (small, "fp32"), (big, "bf16")):
        placed, plain = build_decoder(spec, 16, dtype, arena=arena), build_decoder(spec, 16, dtype)
        for m in (placed, plain):
            m.setup(2, m.embed.weight.dtype, "cpu")
        assert torch.equal(placed.prefill(tokens), plain.prefill(tokens))  # the same values, seed for seed
        ptrs = [p.data_ptr() for p in placed.parameters()]
        assert min(ptrs) == base and max(ptrs) < base + arena.buffer.numel()  # views of the one buffer
        assert len(set(ptrs)) == len(ptrs) and all(p % 64 == 0 for p in ptrs)
    assert arena.buffer.data_ptr() == base  # never reallocated: sized for the largest


def test_weight_arena_grows_for_a_model_larger_than_itself():
    arena = WeightArena(16)
    model = build_decoder(_spec(1), 16, "fp32", arena=arena)
    assert arena.buffer.numel() == weight_bytes(_spec(1), 16, "fp32")
    assert all(p.data_ptr() >= arena.buffer.data_ptr() for p in model.parameters())


def _routed(model, run) -> list[int]:
    """Distinct experts each MoE layer ran during ``run()`` (its router's top-k, as MoE.forward picks)."""
    from validate.layers import MoE

    hits = []

    def hook(mod, inp, out):
        x = inp[0].reshape(-1, inp[0].shape[-1])
        hits.append(torch.topk(mod.router(x).float(), mod.k, dim=-1).indices.unique().numel())

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, MoE)]
    with torch.inference_mode():
        run()
    for h in handles:
        h.remove()
    return hits


MOE16 = ModelSpec(name="moe16", num_layers=2, hidden_size=256, vocab_size=1000, max_context=64, dtype="fp32",
                  attention=dict(num_heads=4, num_kv_heads=4, head_dim=64),
                  mlp=dict(kind="gated", intermediate_size=96),
                  moe=dict(num_experts=16, experts_per_token=2, expert_intermediate_size=32))


def test_random_router_spreads_a_prompts_tokens_as_uniform_routing_would():
    # calc.cost.experts prices an MoE layer by the distinct experts hit under uniform routing: 16 tokens
    # choosing 2 of 16 hit 16 (1 - (14/16)^16) = 14.1 on average. The reference model's random router
    # must spread a random prompt about as much, in every layer (with embeddings of norm 1 the
    # residual stream was one causal average shared by every position and the second layer hit ~half).
    model = build_decoder(MOE16, 64, "fp32")
    model.setup(1, torch.float32, "cpu")
    expected = 16 * (1 - (14 / 16) ** 16)
    hits = []
    for seed in range(10):
        tokens = torch.randint(0, 1000, (1, 16), generator=torch.Generator().manual_seed(seed))
        hits.append(_routed(model, lambda t=tokens: model.prefill(t)))
    per_layer = [sum(h[i] for h in hits) / len(hits) for i in range(2)]
    # measured, 10 prompts: 13.9 and 11.6 now; 10.5 and 7.9 with embeddings of norm 1
    assert sum(per_layer) / 2 >= 0.85 * expected and min(per_layer) >= 0.75 * expected, per_layer


def test_a_timed_decode_batch_is_of_different_requests():
    # Four rows of one decode step: the same token in each would run the same 2 experts; four requests
    # choosing 2 of 16 hit 16 (1 - (14/16)^4) = 6.6 on average.
    from validate.timing import decode_fn

    model = build_decoder(MOE16, 64, "fp32")
    model.setup(4, torch.float32, "cpu")
    hits = _routed(model, decode_fn(model, 4, 20, 1000, "cpu"))
    assert all(h >= 4 for h in hits), hits
