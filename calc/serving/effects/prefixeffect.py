"""What prefix caching buys the chosen configuration: the same replicas at the same load,
simulated with every prompt computed in full, beside the plan's own run.

Prefill FLOPs are the whole model's (no split), for the mean request: its uncached tokens
after its cached ones, against the whole prompt from position 0 (calc.cost.latency.prefill_cost).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from calc.cost.efficiency import Efficiency
from calc.cost.latency import prefill_cost
from calc.serving.replica.prefix import CachedPrefix
from calc.serving.sim.simulate import SimResult, simulate


@dataclass(frozen=True)
class PrefixEffect:
    shared_tokens: int  # of the shared prefix that is cached (whole pages)
    shared_pages: int  # pinned once per replica
    pages: int  # KV pages of one replica
    page_bytes: float  # per GPU
    prefill_tokens_cached: float  # mean prompt tokens computed per request, with caching
    prefill_tokens_full: float  # without
    prefill_flops_cached: float  # mean request, whole model
    prefill_flops_full: float
    request_pages_cached: float  # mean pages a request holds of its own at its final context
    request_pages_full: float
    with_cache: SimResult
    without_cache: SimResult

    @property
    def shared_bytes(self) -> float:
        return self.shared_pages * self.page_bytes


def prefix_effect(rep, replicas: int, T, G, prefix: CachedPrefix, sim: SimResult, *, rate_per_s=None,
                  concurrency=None, gaps=None, seed: int = 0) -> PrefixEffect:
    """``sim`` is the plan's run with caching; the one without is simulated here at the same load."""
    full = simulate(rep, T, G, rate_per_s=rate_per_s, concurrency=concurrency, gaps=gaps, seed=seed)
    n_mean, c_mean = float(np.mean(T - prefix.cached)), float(np.mean(prefix.cached))
    eff = Efficiency.of(rep.hw)
    cached_flops = prefill_cost(rep.model, rep.hw, 1, round(n_mean), rep.dt, eff, rep.attention,
                                past=round(c_mean))[0].flops
    full_flops = prefill_cost(rep.model, rep.hw, 1, round(float(np.mean(T))), rep.dt, eff, rep.attention)[0].flops
    final = np.asarray(T) + np.asarray(G) - 1
    return PrefixEffect(
        shared_tokens=prefix.shared_tokens, shared_pages=prefix.shared_pages, pages=rep.kv.pages,
        page_bytes=rep.kv.page_bytes, prefill_tokens_cached=n_mean, prefill_tokens_full=float(np.mean(T)),
        prefill_flops_cached=float(cached_flops), prefill_flops_full=float(full_flops),
        request_pages_cached=float(prefix.own_pages(final).mean()),
        request_pages_full=float(np.ceil(final / prefix.block_size).mean()),
        with_cache=sim, without_cache=full,
    )
