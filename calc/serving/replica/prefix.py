"""Prefix caching: prompt tokens whose KV is found in the cache are not recomputed.

A request of prompt T (the shared prefix included) arrives with c cached tokens:

    shared    P = floor(shared_tokens / block) * block   (only full pages are shared, as vLLM hashes them)
    cached    c = P + floor(hit_rate * (T - P)),  at most T - 1 (the last prompt token is always
              computed: its logits sample the first output token)

Prefill computes the T - c uncached tokens, whose attention still reads the c cached
positions (calc.cost.latency.prefill_cost's ``past``). The shared pages are held once for
all requests (pinned while any request uses them, i.e. always under load); a request's own
pages are ceil(positions / block) - P / block. Cached history from a request's own earlier
turns is counted in its own pages (it is its KV, computed before).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from calc.spec.workload import PrefixCache


@dataclass(frozen=True)
class CachedPrefix:
    """Per request, the prompt tokens found cached; and the pages the shared prefix pins."""

    cached: np.ndarray  # [n] tokens, 0 <= cached < prompt
    shared_pages: int  # pinned once, for every request
    block_size: int

    @property
    def shared_tokens(self) -> int:
        return self.shared_pages * self.block_size

    def own_pages(self, positions) -> np.ndarray:
        """Pages a request holds of its own at ``positions`` cached tokens: ceil(positions / block) - shared."""
        return np.ceil(np.asarray(positions, float) / self.block_size) - self.shared_pages


def cached_prefix(spec: PrefixCache | None, T, block_size: int) -> CachedPrefix:
    """The cached tokens of requests with prompts T under ``spec`` (None or disabled: nothing cached)."""
    T = np.asarray(T, np.int64)
    if spec is None or not spec.enabled:
        return CachedPrefix(np.zeros_like(T), 0, block_size)
    shared_pages = spec.shared_tokens // block_size
    P = shared_pages * block_size
    cached = P + np.floor(spec.hit_rate * (T - P)).astype(np.int64)
    return CachedPrefix(np.minimum(cached, T - 1), shared_pages, block_size)

