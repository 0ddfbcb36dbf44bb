"""Disaggregated serving: a prefill pool and a decode pool, the KV cache sent between them.

x prefill replicas (GPU type, TP) compute prompts; each finished prompt's KV moves to
one of y decode replicas (GPU type, TP, max batch), which generates the rest:

    KV transfer bytes = KV of the T prompt positions at the KV dtype (whole model;
                        sliding-window layers send at most W positions)
    transfer time     = bytes / (link bandwidth per GPU * lanes) + link latency
                        lanes = min(TP_prefill, TP_decode): each GPU sends its shard on its own link
    link              = NVLink (the profile's scale-up link) when both pools share a node
                        (same GPU type, x TP_p + y TP_d <= gpus_per_node), else the network
    overlapped        = sent layer by layer while the prefill runs (``overlap_layers``): only the
                        part not hidden behind the remaining layers' compute is exposed,
                        max(t / L, t - prefill (L - 1) / L), prefill the prompt's own compute
                        (its chunks alone on the replica, queueing left out); otherwise all of
                        it, after the prefill

TTFT = queue + prefill (the prefill pool's simulation) + transfer; TPOT = (finish - first
token) / (G - 1) from the decode pool's simulation, which receives each request with its
prompt's KV already written (its prefill is one token: the first decode step). The load
splits evenly over each pool: the prefill pool sees rate / x per replica; the decode
replica sees the prefill pool's completions (plus transfer) with their gaps scaled to
rate / y.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from calc.core import text as render
from calc.serving.planner.trial import BACKLOG_LIMIT, Priced
from calc.serving.replica.capacity import Replica
from calc.serving.replica.floors import floors
from calc.serving.replica.prefix import CachedPrefix
from calc.serving.sim.simresult import latency_percentile
from calc.serving.sim.simulate import SimResult, simulate
from calc.spec.workload import Target


@dataclass(frozen=True)
class KVLink:
    name: str
    bandwidth_bytes_per_s: float  # per GPU, one direction
    latency_s: float


def kv_transfer_bytes(model, kv_dtype: str, T) -> np.ndarray:
    """KV of the T prompt positions of one request, whole model, at the KV dtype."""
    return model.kv_cache_bytes(np.asarray(T, float), 1, kv_dtype)


def kv_transfer_s(nbytes, link: KVLink, lanes: int, prefill_s=0.0, layers: int = 1, overlap: bool = False):
    """Exposed transfer time: bytes / (bandwidth * lanes) + latency; layer-wise overlap hides
    what the remaining layers' prefill compute covers."""
    t = np.asarray(nbytes, float) / (link.bandwidth_bytes_per_s * lanes) + link.latency_s
    if not overlap:
        return t
    return np.maximum(t / layers, t - np.asarray(prefill_s, float) * (layers - 1) / layers)


def pick_link(p: Replica, x: int, d: Replica, y: int, gpus_per_node: int, network: KVLink) -> KVLink:
    """NVLink inside one node (same GPU type, both pools within gpus_per_node), else the network."""
    ic = p.hw.interconnect
    if p.hw.name == d.hw.name and ic is not None and x * p.tp + y * d.tp <= gpus_per_node:
        return KVLink(ic.name, ic.bandwidth_bytes_per_s, ic.latency_s)
    return network


@dataclass(frozen=True)
class DisaggTrial(Priced):
    """x prefill replicas + y decode replicas, simulated at the workload's load."""

    prefill: Replica
    prefill_replicas: int
    decode: Replica
    decode_replicas: int
    link: KVLink
    overlap: bool
    prefill_sim: SimResult
    decode_sim: SimResult
    transfer_s: np.ndarray  # per request (prefill order)
    ttft: np.ndarray  # per measured request
    tpot: np.ndarray  # per measured request with G > 1
    e2e: np.ndarray
    output_len: np.ndarray
    targets: dict
    price_prefill: float | None
    price_decode: float | None

    @property
    def gpus(self) -> int:
        return self.prefill_replicas * self.prefill.tp + self.decode_replicas * self.decode.tp

    @property
    def usd_per_hour(self) -> float | None:
        if self.price_prefill is None or self.price_decode is None:
            return None
        return (self.prefill_replicas * self.prefill.tp * self.price_prefill
                + self.decode_replicas * self.decode.tp * self.price_decode)

    @property
    def label(self) -> str:
        p, d = self.prefill, self.decode
        return (f"{self.prefill_replicas}P x {p.hw.name} TP{p.tp} + {self.decode_replicas}D x {d.hw.name} "
                f"TP{d.tp}, max batch {d.max_batch}")

    @cached_property
    def stats(self) -> dict[str, float]:
        out = {}
        for m, v in (("ttft", self.ttft), ("tpot", self.tpot), ("e2e", self.e2e)):
            for q in (50, 90, 99):
                out[f"{m}_p{q}"] = latency_percentile(v, q)
        return out

    @property
    def falls_behind(self) -> str | None:
        """Which pool's queue grows, if one does."""
        if self.prefill_sim.backlog_growth() > BACKLOG_LIMIT:
            return "prefill"
        if self.decode_sim.backlog_growth() > BACKLOG_LIMIT:
            return "decode"
        return None

    @cached_property
    def misses(self) -> list[tuple[str, float, float]]:
        return [(k, self.stats[k], t) for k, t in self.targets.items() if k in self.stats
                and not self.stats[k] <= t]

    @property
    def meets(self) -> bool:
        return not self.misses and self.falls_behind is None

    def why(self) -> str:
        parts = [f"the {self.falls_behind} pool falls behind"] if self.falls_behind else []
        parts += [f"{Target.of(k, t).label} {render.seconds(v)} > {render.seconds(t)}" for k, v, t in self.misses]
        return "; ".join(parts) or "meets the SLOs"

    @property
    def prompt_share(self) -> float:
        # the prefill pool's requests generate one token each: the output lengths are the workload's
        return float(self.prefill_sim.prompt_len.sum()) / max(float(self.output_len.sum()), 1.0)

    @property
    def output_tokens_per_s(self) -> float:
        """Output tokens per second of the whole deployment: requests served times mean G."""
        served = min(self.prefill_replicas * self.prefill_sim.requests_per_s,
                     self.decode_replicas * self.decode_sim.requests_per_s)
        return served * float(np.mean(self.output_len))


def simulate_disagg(p: Replica, x: int, d: Replica, y: int, T, G, *, rate_per_s: float, gaps, seed: int,
                    targets: dict, link: KVLink, overlap: bool, prefix: CachedPrefix | None,
                    prices: tuple) -> DisaggTrial:
    """Both pools at the workload's open-loop rate (see the module docstring)."""
    T = np.asarray(T, np.int64)
    G = np.asarray(G, np.int64)
    ones = np.ones_like(G)
    ps = simulate(p, T, ones, rate_per_s=rate_per_s / x, gaps=gaps, seed=seed, prefix=prefix)
    prefill_s = ps.first_token_s - ps.arrive_s  # queueing included: the TTFT before the transfer
    # what hides a layer-wise transfer is the prefill's own compute, not its wait in the queue
    # (its chunks alone on the replica: calc.serving.replica.floors; shared steps only take longer)
    compute_s = floors(p, T, ones, prefix)["ttft"]
    tx = kv_transfer_s(kv_transfer_bytes(p.model, p.dt.kv, T), link, min(p.tp, d.tp), compute_s,
                       p.model.num_layers, overlap)
    ready = ps.first_token_s + tx
    order = np.argsort(ready, kind="stable")
    gaps_d = np.diff(np.concatenate([[0.0], ready[order]])) * (y / x)  # one prefill replica feeds rate / x; a decode replica gets rate / y
    Td, Gd = T[order], np.maximum(G[order] - 1, 1)
    # the prompt's KV arrives written: the decode replica "prefills" one token (the first decode step)
    ds = simulate(d, Td, Gd, rate_per_s=1.0, gaps=gaps_d, seed=seed,
                  prefix=CachedPrefix(Td - 1, 0, d.kv.block_size), api=False)  # handed over, not sent again
    inv = np.empty_like(order)
    inv[order] = np.arange(order.size)
    start_d, finish_d = ds.arrive_s[inv], ds.finish_s[inv]
    ttft = prefill_s + tx
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(G > 1, (finish_d - start_d) / np.maximum(G - 1, 1), np.nan)
    e2e = ttft + np.where(G > 1, finish_d - start_d, 0.0)
    m = ps.measured
    return DisaggTrial(p, x, d, y, link, overlap, ps, ds, tx, ttft[m], tpot[m & (G > 1)], e2e[m], G, targets,
                       *prices)
