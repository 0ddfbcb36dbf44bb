"""Experts a pass touches: the mean over GPUs, and the busiest GPU's under expert parallelism.

Routing model: each of t tokens picks k distinct experts of E, uniformly and independently.

  mean over GPUs   E (1 - (1 - k/E)^t) / E'        (expected distinct experts hit, spread evenly)

The step is as slow as its busiest GPU, which holds m = E / E' experts. Its expected count is

  E[max_g X_g] = sum_a P(|hit| = a) E[max_g X_g | a]

* |hit|, the distinct experts hit after t tokens, is a Markov chain: a token adding j new experts
  to a already hit has probability C(E - a, j) C(a, k - j) / C(E, k) (hypergeometric), so
  P(|hit| = a) after t tokens is the chain's distribution after t steps from 0.
* Given |hit| = a, the hit set is a uniformly random a-subset of the E experts (routing is
  exchangeable), so the counts per GPU are multivariate hypergeometric and
  P(max_g X_g <= x | a) = [z^a] (sum_{j<=x} C(m, j) z^j)^E' / C(E, a).

Exact at whole t (tabulated until the busiest GPU's expectation is within 1e-12 of its mean count;
fractional t, as the closed form's weighted steps have, interpolates linearly between whole t).
Mixtral (E 8, k 2) at EP2, one token: E[max] = (2 * 12 + 1 * 16) / 28 = 1.43 experts, mean 1.

A skewed router (``imbalance`` rho >= 1, the busiest GPU's routed load over the mean) makes each of
the busiest GPU's experts rho times as likely to be picked, min(1, rho k / E) per token, so it holds
at least m (1 - (1 - min(1, rho k / E))^t); it holds the larger of that and the uniform E[max].
"""

from __future__ import annotations

from functools import lru_cache
from math import comb

import numpy as np

TAIL = 1e-12  # the table ends where E[max] is within TAIL * m of the mean count
MAX_TABLE_EXPERTS = 1024  # binomials of larger E overflow float64: the mean count stands in (stated)


def experts_touched(num_experts, experts_per_token, routed_tokens):
    """Expected distinct experts hit by ``routed_tokens`` tokens, each choosing k of E:
    E * (1 - (1 - k/E)^tokens), under uniform, independent routing."""
    E, k = float(num_experts), float(experts_per_token)
    return E * (1.0 - np.power(1.0 - k / E, np.asarray(routed_tokens, dtype=float)))


def _max_given_hits(E: int, groups: int) -> np.ndarray:
    """E[max over groups of the hits per group | a experts hit], a = 0..E (multivariate hypergeometric)."""
    m = E // groups
    row = np.array([comb(m, j) for j in range(m + 1)], float)
    total = np.array([comb(E, a) for a in range(E + 1)], float)
    below = np.zeros((m + 1, E + 1))  # P(max <= x | a)
    for x in range(m + 1):
        poly = np.array([1.0])
        for _ in range(groups):
            poly = np.convolve(poly, row[:x + 1])
        below[x, :poly.size] = poly[:E + 1]
    below /= total[None, :]
    return (1.0 - below[:-1]).sum(axis=0)  # E[max] = sum_{x=0}^{m-1} P(max > x)


@lru_cache(maxsize=64)
def busiest_table(E: int, k: int, groups: int) -> np.ndarray:
    """E[max over the ``groups`` GPUs of the experts hit on each] at t = 0, 1, 2, ... tokens, until it
    is within TAIL * m of the mean count E (1 - (1 - k/E)^t) / groups."""
    given = _max_given_hits(E, groups)
    a = np.arange(E + 1)
    j = np.arange(k + 1)
    step = np.array([[comb(E - ai, jj) * comb(ai, k - jj) for jj in j] for ai in a], float) / comb(E, k)
    q = np.zeros(E + 1)
    q[0] = 1.0
    m = E / groups
    out = [0.0]
    while True:
        nxt = np.zeros(E + 1)
        for jj in j:  # a -> a + jj
            nxt[jj:] += q[:E + 1 - jj] * step[:E + 1 - jj, jj]
        q = nxt
        out.append(float(q @ given))
        t = len(out) - 1
        if out[-1] - experts_touched(E, k, t) / groups <= TAIL * m or t > 1_000_000:
            return np.asarray(out)


def busiest_experts(num_experts: int, experts_per_token: int, ep: int, tokens, imbalance: float = 1.0):
    """Expected experts hit on the busiest of ``ep`` GPUs by ``tokens`` tokens (see the module
    docstring); ep = 1: every GPU holds every expert (the mean count)."""
    E, k = int(num_experts), int(experts_per_token)
    if isinstance(tokens, float):  # one step (the scheduler's path): the same arithmetic in scalars
        return _busiest_one(E, k, ep, tokens, imbalance)
    t = np.asarray(tokens, dtype=float)
    m = E / ep
    mean = experts_touched(E, k, t) / ep
    if ep > 1 and E <= MAX_TABLE_EXPERTS:
        table = busiest_table(E, k, ep)
        uniform = np.where(t < table.size - 1, np.interp(t, np.arange(table.size), table), mean)
    else:
        uniform = mean
    if imbalance == 1.0:
        return uniform
    p = min(1.0, imbalance * k / E)
    return np.maximum(uniform, m * (1.0 - np.power(1.0 - p, t)))


@lru_cache(maxsize=1 << 16)
def _busiest_one(E: int, k: int, ep: int, t: float, imbalance: float) -> float:
    """busiest_experts at one token count, in scalars: the same arithmetic as the array path (np.power,
    not math.pow, which differs in the last bit; np.interp on the table's whole-number grid). Kept
    per arguments: every replica of a model under the same EP asks for the same step token counts."""
    m, t0 = E / ep, np.asarray(t, dtype=float)
    mean = E * (1.0 - float(np.power(1.0 - k / E, t0))) / ep
    uniform = mean
    if ep > 1 and E <= MAX_TABLE_EXPERTS:
        table = busiest_table(E, k, ep)
        if t < table.size - 1:
            j = int(t)  # np.interp on the whole-number grid: the entry, or the line to the next
            uniform = float(table[j]) if t == j else float((table[j + 1] - table[j]) * (t - j) + table[j])
    if imbalance == 1.0:
        return uniform
    p = min(1.0, imbalance * k / E)
    return max(uniform, m * (1.0 - float(np.power(1.0 - p, t0))))
