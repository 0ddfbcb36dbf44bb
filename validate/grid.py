"""The held-out grid of `roofline validate`: which passes each model runs (batch x prompt length for
prefill, batch x context for decode steps), which catalog profile the base predictions use on this
device, and whether a model fits the device at the depth asked (an input error with a --layers hint
when it does not)."""

from __future__ import annotations

from calc.core.errors import SpecError
from calc.core.units import GB
from calc.spec.catalog import hardware_catalog
from calc.spec.model import ModelSpec

from .timing import Point

GRIDS = {  # batches, prompt lengths (prefill), decode contexts
    "default": ((1, 4), (64, 256), (64, 256)),
    # quick: prompts half as long: the 1024-token prefills at fp32 (2.4-2.7 s a call, 3 calls each)
    # were 40% of a quick run's timed passes on a 2-vCPU machine
    "quick": ((1, 4), (32, 128), (64, 256)),
    # serving: the steps a loaded engine takes on a GPU: decode batches up to 64 at contexts up to 4096,
    # prefills of up to PREFILL_TOKENS tokens (an engine's per-step token budget: vLLM's 8192 default,
    # SGLang's 16384 chunk)
    "serving": ((1, 8, 64), (512, 2048), (512, 4096)),
}
PREFILL_TOKENS = {"serving": 16384}  # B x T at most, for the grids that cap a prefill's tokens
# mixed steps (a continuous-batching engine's step under load): decode batches, their context S, prompt
# chunks T and the tokens C cached before a chunk (0: a prompt's first chunk)
MIXED = {"serving": ((8, 64), 1024, (512, 2048), (0, 2048))}


def default_base(device: str, name: str) -> str | None:
    """The catalog profile for this device: cpu-generic-2core on CPU; on CUDA the catalog
    name whose first word (h200, a100, l40s, ...) is a word of the device name."""
    cat = hardware_catalog()
    if not device.startswith("cuda"):
        return "cpu-generic-2core" if "cpu-generic-2core" in cat else None
    words = set("".join(c if c.isalnum() else " " for c in name.lower()).split())
    hits = sorted(n for n in cat if n.split("-")[0] in words)
    return hits[0] if hits else None


def grid(spec: ModelSpec, mode: str, dtypes) -> list[Point]:
    batches, prompts, contexts = GRIDS[mode]
    T = [t for t in prompts if t <= spec.max_context] or [max(1, spec.max_context // 2)]
    S = [s for s in contexts if s + 1 <= spec.max_context] or [max(1, spec.max_context // 2)]
    cap = PREFILL_TOKENS.get(mode)
    pts = []
    for d in dtypes:
        pts += [Point(d, "prefill", b, t) for b in batches for t in T if cap is None or b * t <= cap]
        pts += [Point(d, "decode", b, s) for b in batches for s in S]
        pts += mixed_points(spec, mode, d)
    return pts


def mixed_points(spec: ModelSpec, mode: str, dtype: str) -> list[Point]:
    """The grid's mixed steps the reference decoder can run for ``spec``: not MLA (its attention has no
    mixed step), and a chunk's C + T positions within the model's context and its sliding window."""
    if mode not in MIXED or spec.attention.kind == "mla":
        return []
    batches, S, chunks, cached = MIXED[mode]
    window = spec.attention.sliding_window if any(spec.sliding_layers) else None
    limit = min(spec.max_context, window or spec.max_context)
    return [Point(dtype, "mixed", b, S, t, c) for b in batches for t in chunks for c in cached
            if c + t <= limit and S + 1 <= spec.max_context]


def check_fits(spec: ModelSpec, dtypes, points: list[Point], device: str, available: float) -> None:
    """A model too large for the device at this depth is an input error, with a --layers hint."""
    from .reference import reduced

    widest = max(dtypes, key=lambda d: {"fp32": 4, "bf16": 2, "fp16": 2}.get(d, 2))
    kv = max(points, key=lambda p: p.batch * p.positions)  # the largest cache a point holds
    tokens = max(p.batch * p.size if p.phase == "prefill" else p.batch + p.chunk for p in points)
    act = 6 * tokens * max(spec.hidden_size, spec.mlp.intermediate_size or 0) * 4.0

    def need(s: ModelSpec) -> float:
        return float(s.weight_bytes(widest) + s.kv_cache_bytes(kv.positions, kv.batch, widest)) + act

    total = need(spec)
    if total <= 0.8 * available:
        return
    one = need(reduced(spec, 1)) if spec.num_layers > 1 else total
    per_layer = (total - one) / max(spec.num_layers - 1, 1)
    fit = int((0.8 * available - one) // per_layer) + 1 if per_layer > 0 and one <= 0.8 * available else 0
    if fit >= 1:
        hint = f"; try --layers {max(1, min(fit, spec.num_layers - 1))}"
    elif widest == "fp32" and one / 2 <= 0.8 * available:
        hint = "; try --layers 1 --dtype bf16 (one fp32 layer with its embedding and lm_head is too large)"
    else:
        hint = "; even --layers 1 does not fit (its embedding and lm_head alone are too large)"
    raise SpecError("--model", None, f"{spec.name} ({spec.num_layers} layers, {widest}) needs about "
                                     f"{total / GB:.1f} GB; {device} has {available / GB:.1f} GB available{hint}")
