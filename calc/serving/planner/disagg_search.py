"""The planner's search over disaggregated deployments (xP + yD), beside the aggregated one.

For every prefill candidate (GPU type, TP) and decode candidate (GPU type, TP, max batch)
the closed form (calc.serving.replica.capacity.steady_state: prompts only for the prefill pool; one
token of prefill and G - 1 decode steps for the decode pool) gives each pool's capacity and
so a first guess of x and y at GUESS_UTIL. Pairs are simulated cheapest guess first: a
missed TTFT or a growing prefill queue adds a prefill replica, a missed TPOT or a growing
decode queue a decode replica, until the SLOs are met or max_gpus is reached.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from calc.core import text
from calc.core.errors import SpecError
from calc.serving.planner.disagg import DisaggTrial, KVLink, pick_link, simulate_disagg
from calc.serving.planner.trial import GUESS_UTIL, cost_key
from calc.serving.replica.capacity import Replica, steady_state, validate_split
from calc.serving.replica.prefix import CachedPrefix
from calc.spec.hardware import Interconnect

PAIRS_SIMULATED = 4  # cheapest (prefill, decode) pairs simulated
STEPS_PER_PAIR = 6  # replica additions tried per pair


@dataclass(frozen=True)
class _Pool:
    rep: Replica
    price: float | None
    requests_per_s: float  # closed-form capacity of one replica


def _hardware(wl, names):
    refs = names or wl.spec.hardware
    return [h for ref, h in zip(wl.spec.hardware, wl.hardware, strict=True) if ref in refs]


def _candidates(wl, dt, T, G, prefix):
    spec, dg, model = wl.spec, wl.spec.disaggregation, wl.model

    def serving_p(hw):
        sv = wl.serving_for(hw)
        return sv if dg.prefill_max_batched_tokens is None else \
            sv.model_copy(update={"max_batched_tokens": dg.prefill_max_batched_tokens})
    prefills, decodes, kv_short = [], [], []
    ones = np.ones_like(G)
    for hw in _hardware(wl, dg.prefill.hardware):
        for tp in sorted(set(dg.prefill.tp or spec.tp)):
            if tp > spec.max_gpus or validate_split(model, hw, tp):
                continue
            mb = max(dg.prefill.max_batch or spec.max_batch)
            rep = Replica(model, hw, tp, mb, dt, serving_p(hw).model_copy(update={"max_num_seqs": mb}))
            if not rep.kv.admits(int(T.max()), rep.serving.watermark):
                continue
            prefills.append(_Pool(rep, wl.price_per_gpu_hour(hw), steady_state(rep, T, ones, prefix=prefix)
                                  .requests_per_s))
    longest = int((T + G - 1).max())
    Gd = np.maximum(G - 1, 1)
    for hw in _hardware(wl, dg.decode.hardware):
        for tp in sorted(set(dg.decode.tp or spec.tp)):
            if tp > spec.max_gpus or validate_split(model, hw, tp):
                continue
            top = max(dg.decode.max_batch or spec.max_batch)
            base = Replica(model, hw, tp, top, dt, wl.serving_for(hw).model_copy(update={"max_num_seqs": top}))
            if not base.kv.admits(longest, base.serving.watermark):  # the watermark's pages kept free
                room = max(base.kv.admissible_pages(base.serving.watermark), 0) * base.kv.block_size
                kv_short.append(f"{hw.name} TP{tp} ({room:,} positions past the watermark)")
                continue
            held = CachedPrefix(T - 1, 0, base.kv.block_size)
            for mb in sorted(set(dg.decode.max_batch or spec.max_batch)):
                rep = base.with_max_batch(mb, launched=True)
                decodes.append(_Pool(rep, wl.price_per_gpu_hour(hw),
                                     steady_state(rep, T, Gd, prefix=held, api=False).requests_per_s))
    if kv_short and not decodes:
        per_pos = model.kv_bytes_per_token(dt.kv)
        raise SpecError(wl.path or "workload", "disaggregation.decode",
                        f"no decode pool can hold one request's KV: the longest request holds {longest:,} positions "
                        f"({text.nbytes(longest * per_pos)}); {', '.join(kv_short)} hold less")
    return prefills, decodes


def _cost(p: _Pool, x: int, d: _Pool, y: int) -> tuple:
    if p.price is None or d.price is None:
        return (1, x * p.rep.tp + y * d.rep.tp)
    return (0, x * p.rep.tp * p.price + y * d.rep.tp * d.price)


def search_disagg(wl, dt, T, G, gaps, targets: dict, prefix: CachedPrefix | None) -> list[DisaggTrial]:
    """Every disaggregated trial simulated (met or not), in the order run."""
    spec, dg = wl.spec, wl.spec.disaggregation
    if dg is None or spec.arrival.rate_per_s is None:
        return []
    rate = spec.arrival.rate_per_s
    prefills, decodes = _candidates(wl, dt, T, G, prefix)
    cl = spec.cluster
    net_gb_s = dg.network_gb_s if dg.network_gb_s is not None else cl.network_gb_s
    net_us = dg.network_latency_us if dg.network_latency_us is not None else cl.network_latency_us
    node = dg.gpus_per_node if dg.gpus_per_node is not None else cl.gpus_per_node
    net = Interconnect(name="network", bandwidth_gb_s_per_direction=net_gb_s, latency_us=net_us)
    network = KVLink("network", net.bandwidth_bytes_per_s, net.latency_s)
    pairs = []
    for p in prefills:
        x = max(1, math.ceil(rate / (GUESS_UTIL * p.requests_per_s)))
        for d in decodes:
            y = max(1, math.ceil(rate / (GUESS_UTIL * d.requests_per_s)))
            if x * p.rep.tp + y * d.rep.tp <= spec.max_gpus:
                pairs.append((_cost(p, x, d, y), x, y, p, d))
    pairs.sort(key=lambda c: c[0])
    trials: list[DisaggTrial] = []
    seen: set = set()
    for _, x, y, p, d in pairs:
        key = (p.rep.hw.name, p.rep.tp, d.rep.hw.name, d.rep.tp)
        if key in seen:  # one max batch per pool pair: the cheapest guess
            continue
        seen.add(key)
        if len(seen) > PAIRS_SIMULATED:
            break
        for _ in range(STEPS_PER_PAIR):
            t = simulate_disagg(p.rep, x, d.rep, y, T, G, rate_per_s=rate, gaps=gaps, seed=spec.seed,
                                targets=targets, link=pick_link(p.rep, x, d.rep, y, node, network),
                                overlap=dg.overlap_layers, prefix=prefix, prices=(p.price, d.price))
            trials.append(t)
            if t.meets:
                break
            slow = {k.split("_p")[0] for k, _, _ in t.misses}
            more_p = t.falls_behind == "prefill" or "ttft" in slow
            more_d = t.falls_behind == "decode" or "tpot" in slow or "e2e" in slow
            x, y = x + more_p, y + (more_d or not more_p)
            if x * p.rep.tp + y * d.rep.tp > spec.max_gpus:
                break
    return trials


def best_disagg(trials: list[DisaggTrial]) -> DisaggTrial | None:
    ok = [t for t in trials if t.meets]
    return min(ok, key=cost_key) if ok else None



@dataclass(frozen=True)
class FrontPoint:
    """One simulated deployment on the agg-vs-disagg chart."""

    label: str
    kind: str  # "aggregated" or "disaggregated"
    tokens_per_s_per_user: float  # 1 / TPOT p50
    tokens_per_s_per_gpu: float  # output tokens/s of the deployment / its GPUs
    meets: bool


def front_points(agg_trials, disagg_trials) -> list[FrontPoint]:
    out = []
    for kind, trials in (("aggregated", agg_trials), ("disaggregated", disagg_trials)):
        for t in trials:
            tpot = t.stats["tpot_p50"]
            if tpot > 0 and t.output_tokens_per_s > 0:
                out.append(FrontPoint(t.label, kind, 1.0 / tpot, t.output_tokens_per_s / t.gpus, t.meets))
    return out


def pareto(points: list[FrontPoint]) -> list[FrontPoint]:
    """Points no other beats on both tokens/s per user and tokens/s per GPU, by tokens/s per user."""
    out, best = [], -math.inf
    for p in sorted(points, key=lambda p: (-p.tokens_per_s_per_user, -p.tokens_per_s_per_gpu)):
        if p.tokens_per_s_per_gpu > best:
            out.append(p)
            best = p.tokens_per_s_per_gpu
    return out[::-1]
