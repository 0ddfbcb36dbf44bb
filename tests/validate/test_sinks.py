"""The reference decoder's attention sinks (gpt-oss): a sink takes its share of each softmax, by hand."""

import math

import pytest

torch = pytest.importorskip("torch")

from calc.spec.model import ModelSpec  # noqa: E402
from validate.layers import AttentionCore  # noqa: E402
from validate.reference import build_decoder  # noqa: E402


def test_a_sink_takes_its_share_of_the_softmax_by_hand():
    # One head, one query, two keys with score 0 each (q = 0), values 1 and 3, sink logit log 2:
    # the softmax over [0, 0, log 2] is [1/4, 1/4, 1/2], so the output is 1/4 * 1 + 1/4 * 3 = 1.
    q = torch.zeros(1, 1, 1, 1)
    k = torch.ones(1, 1, 2, 1)
    v = torch.tensor([1.0, 3.0]).view(1, 1, 2, 1)
    out = AttentionCore()(q, k, v, sinks=torch.tensor([math.log(2.0)]))
    assert float(out) == pytest.approx(1.0)


@pytest.mark.parametrize("causal,window", [(True, None), (True, 3), (False, None)])
def test_a_sink_at_minus_infinity_is_plain_attention(causal, window):
    # GQA 4 query heads over 2 KV heads; a sink of -inf takes nothing, so SDPA's answer comes back.
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, h, 6, 8, generator=g) for h in (4, 2, 2))
    mask = None
    if window:
        i = torch.arange(6)
        mask = (i[:, None] - i[None, :] >= 0) & (i[:, None] - i[None, :] < window)
    core = AttentionCore()
    plain = core(q, k, v, mask=mask, causal=causal)
    sunk = core(q, k, v, mask=mask, causal=causal, sinks=torch.full((4,), float("-inf")))
    assert torch.allclose(plain, sunk, atol=1e-5)


def test_the_decoder_holds_one_sink_per_query_head_per_layer():
    spec = ModelSpec(name="t", num_layers=2, hidden_size=64, vocab_size=100, max_context=64, dtype="fp32",
                     attention=dict(num_heads=4, num_kv_heads=2, head_dim=16, sinks=True),
                     mlp=dict(kind="gated", intermediate_size=96))
    model = build_decoder(spec, 32)
    sinks = [p for n, p in model.named_parameters() if n.endswith("sinks")]
    assert [tuple(p.shape) for p in sinks] == [(4,), (4,)]
    assert sum(p.numel() for p in model.parameters()) == spec.params_total
