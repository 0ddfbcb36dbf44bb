"""A replica of the model and its closed-form steady state under continuous batching.

One replica is TP GPUs running one copy of the model under continuous batching
(vLLM's scheduler, in its main knobs). Its KV pages are calc.serving.replica.kvbudget's, its
step time calc.serving.steps.stepmodel's; this module gives the closed-form steady state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from calc.core.errors import SpecError
from calc.core.units import MICRO
from calc.cost.dtypes import Dtypes
from calc.cost.efficiency import Efficiency, pass_options
from calc.cost.opcost import Pass
from calc.cost.operators import pass_ops
from calc.cost.parallel import Parallel, check, link
from calc.cost.roofline import bound_of
from calc.cost.speculative import Draft, SpecConfig, draft_efficiency, draft_of, expected_tokens
from calc.serving.replica.kvbudget import KVBudget, kv_budget
from calc.serving.replica.prefix import CachedPrefix
from calc.serving.steps.stepfit import step_model
from calc.serving.steps.stepmodel import StepModel
from calc.serving.steps.timer import PlainTimer, SpecTimer, StepTimer
from calc.spec.hardware import HardwareSpec, Interconnect
from calc.spec.model import ModelSpec
from calc.spec.workload import Serving

# --------------------------------------------------------------------------- a replica


@dataclass(frozen=True)
class Replica:
    """One copy of the model on ``tp`` GPUs of one kind, with the engine's knobs."""

    model: ModelSpec
    hw: HardwareSpec
    tp: int
    max_batch: int
    dt: Dtypes
    serving: Serving
    attention: str | None = None  # the attention kernel; None: the engine preset's (calc.cost.efficiency.pass_options)
    speculative: SpecConfig | None = None  # speculative decoding, when the replica runs it
    pp: int = 1  # pipeline stages (GPUs per replica: tp x pp)
    ep: int = 1  # expert parallelism over the TP GPUs (MoE)
    imbalance: float = 1.0  # MoE under EP: the busiest GPU's routed load over the mean (calc.cost.parallel)
    nodes: int = 1  # nodes the replica spans (> 1: ``hw``'s interconnect is the network between them)
    logits: int | None = None  # positions of a prompt chunk reaching lm_head; None: the preset's policy (1, or all)

    def __post_init__(self):
        if self.attention is None or self.logits is None:
            attention, logits = pass_options(self.model, self.hw, False, self.attention)
            object.__setattr__(self, "attention", attention)
            if self.logits is None:
                object.__setattr__(self, "logits", logits)

    @property
    def par(self) -> Parallel:
        return Parallel(tp=self.tp, pp=self.pp, ep=self.ep, imbalance=self.imbalance)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def engine_max_batch(self) -> int:
        """Running sequences one engine the simulator runs holds: the max batch, or under pipeline
        parallelism, where each of the PP micro-batches in flight is an engine of its own (1/PP of
        the load and of the KV pages), its share of it where the engine splits max_num_seqs between
        them (Serving.pp_seqs split: max_batch // PP, at least 1)."""
        if self.pp == 1 or self.serving.pp_seqs == "each":
            return self.max_batch
        return max(self.max_batch // self.pp, 1)

    def engines(self, replicas: int = 1) -> int:
        """The engines the simulator runs for ``replicas`` of it, a load split evenly between them
        (a rate divided, clients and requests dealt out in turn): each replica's PP micro-batch
        engines, one when PP is 1. A simulation of one engine stands for them all; a rate or
        count over the whole deployment is the engine's times this."""
        return replicas * self.pp

    @property
    def split(self) -> str:
        """"TP2", "TP4 PP2 (2 nodes)", "TP8 EP8"."""
        return (f"TP{self.tp}" + (f" PP{self.pp}" if self.pp > 1 else "") + (f" EP{self.ep}" if self.ep > 1 else "")
                + (f" ({self.nodes} nodes)" if self.nodes > 1 else ""))

    @cached_property
    def draft(self) -> Draft | None:
        return None if self.speculative is None else draft_of(self.model, self.speculative, self.dt, self.par)

    @cached_property
    def timer(self) -> StepTimer:
        """What a step costs and emits: one pass of the model, or a speculative step (calc.serving.steps.timer)."""
        d = self.draft
        if d is None:
            return PlainTimer(self.steps, self.logits)
        draft_sm = step_model(d.model, self.hw, d.dtypes, draft_efficiency(self.eff, self.speculative), self.attention,
                              d.parallel)
        return SpecTimer(self.steps, draft_sm, self.speculative.k, float(expected_tokens(self.speculative.acceptance, self.speculative.k)),
                         self.logits)

    @property
    def tokens_per_step(self) -> float:
        """Tokens a decoding sequence emits per step: 1, or the expected accepted tokens."""
        return self.timer.tokens_per_step

    @property
    def api_server_s(self) -> float:
        """What one API server spends on each request, in turn (Serving.api_servers: the preset's
        request overhead); 0 where none takes them in turn."""
        return self.eff.request_overhead_s if self.serving.api_servers else 0.0

    @cached_property
    def eff(self) -> Efficiency:
        return Efficiency.of(self.hw).with_serving(self.serving)

    @cached_property
    def kv(self) -> KVBudget:
        return kv_budget(self.model, self.hw, self.dt, self.par, self.serving, self.attention, self.draft)

    @cached_property
    def steps(self) -> StepModel:
        return step_model(self.model, self.hw, self.dt, self.eff, self.attention, self.par)

    @cached_property
    def kernels_per_step(self) -> float:
        """Kernels one forward pass launches (the engine's kernel set over the pass's operators)."""
        ops = pass_ops(self.model, Pass(np.float64(1.0), np.float64(1.0), np.float64(1.0), "decode"), self.dt,
                       self.attention, self.par)
        return self.eff.kernels_launched(ops)

    @cached_property
    def eager_step_s(self) -> float:
        """What a step launched eagerly pays (Serving.eager says which: past the engine's CUDA-graph
        cap, or with prefill under graphs of decode-only steps): its kernels x the eager launch cost."""
        return self.kernels_per_step * self.serving.eager_launch_us * MICRO

    @property
    def label(self) -> str:
        return f"{self.hw.name} {self.split} mb{self.max_batch}" + (" spec" if self.speculative else "")

    def with_max_batch(self, max_batch: int, launched: bool = False) -> Replica:
        """The same replica with another max batch, sharing the step model (it does not depend on
        it). ``launched``: the engine is launched with it as its max_num_seqs (a plan's trial), which
        the KV budget's dummy sampler runs over (Serving.sampler_bytes_per_logit); else the running
        cap alone changes (a benchmark's clients under the engine's own max_num_seqs) and the KV
        budget is shared too."""
        serving = self.serving.model_copy(update={"max_num_seqs": max_batch}) if launched else self.serving
        other = replace(self, max_batch=max_batch, serving=serving)
        keep = ["eff", "steps", "draft", "timer", "kernels_per_step", "eager_step_s"]
        if not launched or not serving.sampler_bytes_per_logit:
            keep.append("kv")
        for key in keep:
            if key in self.__dict__:
                other.__dict__[key] = self.__dict__[key]  # functools.cached_property's slot
        return other


def across_nodes(hw: HardwareSpec, cluster) -> HardwareSpec:
    """The profile as a replica spanning nodes sees it: every collective of the replica (TP
    all-reduces, PP stage hops, EP all-to-alls) runs over the network between nodes (the
    workload's ``cluster``), not the node's scale-up link: an upper bound when only PP hops cross.
    The profile's fitted collective costs (measured on its scale-up link) are dropped: each
    collective costs bytes / network bandwidth + hops x network latency."""
    net = Interconnect(name="network (across nodes)", bandwidth_gb_s_per_direction=cluster.network_gb_s,
                       latency_us=cluster.network_latency_us)
    return hw.model_copy(update={"interconnect": net, "collectives": None})


def validate_split(model: ModelSpec, hw: HardwareSpec, tp: int, pp: int = 1, ep: int = 1) -> str | None:
    """None if TP x PP GPUs of ``hw`` (EP over the TP ones) can split the model, else why not."""
    try:
        par = check(model, Parallel(tp=tp, pp=pp, ep=ep))
        link(hw, par)
    except SpecError as exc:
        return exc.problem
    return None


# --------------------------------------------------------------------------- closed form


def _page_sum(m, bs):
    """S(m) = sum_{x=1..m} ceil(x / bs) = bs q(q+1)/2 + r(q+1), q = m // bs, r = m % bs."""
    q, r = np.divmod(np.asarray(m, np.int64), bs)
    return bs * q * (q + 1) / 2 + r * (q + 1)


@dataclass(frozen=True)
class SteadyState:
    """Closed-form steady state of one replica at saturation (a queue always waiting),
    and at an offered load when one is given.

    Each request lives k_p + D steps in the running batch: k_p prefill steps (chunks of
    up to the token budget) and D = G - 1 decode steps. With N running, r = N / (k_p + D)
    requests finish per step; a share f = r k_p of steps carries a prefill chunk, the
    rest are pure decode steps of N sequences. (When f would exceed 1 every step carries
    prefill, and the token budget caps r at budget / (T + D).) N = min(max batch,
    KV pages / mean pages a running request holds). Means are over the sampled requests.
    """

    pages: int
    kv_sequences_longest: int  # sequences that fit at once, each at the longest request's final context
    kv_concurrency_full: float  # pages / mean pages at the final context (reserve-for-max)
    kv_concurrency: float  # pages / time-weighted mean pages held while running
    batch: float  # N
    limited_by: str  # "KV cache", "max batch", "clients" or "API servers"
    requests_per_step: float
    prefill_share: float  # f
    decode_step_s: float
    mixed_step_s: float
    step_s: float  # mean step time
    requests_per_s: float
    output_tokens_per_s: float
    decode_bound: str
    mixed_bound: str
    tokens_per_step: float = 1.0  # per decoding request (speculative decoding: the expected accepted tokens)

    @property
    def tpot_s(self) -> float:
        """Mean time between a decoding request's tokens: the mean step time over the tokens per step."""
        return self.step_s / self.tokens_per_step


@dataclass(frozen=True)
class _Means:
    T: float  # prompt tokens computed in prefill (the uncached part)
    cached: float  # prompt tokens found cached (prefix caching)
    D: float
    G: float
    kp: float
    chunk_new: np.ndarray  # per request, its mean chunk: n / k_p tokens ...
    chunk_past: np.ndarray  # ... after its mean cached positions c + n (k_p - 1) / (2 k_p)
    chunk_share: np.ndarray  # each request's share of all chunks, k_p / sum k_p
    decode_ctx: float  # time-weighted mean decode position (pairs per decode token)
    pages_life: float  # mean over requests of sum over its steps of pages held


def _means(rep: Replica, T, G, chunk: float, prefix: CachedPrefix | None = None, memo: dict | None = None) -> _Means:
    """Means over the requests; D counts decode steps (G - 1 tokens over the tokens per step).
    ``memo`` (steady_state's): the terms that do not depend on the chunk, and the means by the
    requests' chunk counts k_p (a nearby chunk size often splits every prompt alike)."""
    memo = {} if memo is None else memo
    if "requests" not in memo:
        T = np.asarray(T, np.int64)
        G = np.asarray(G, np.int64)
        D = G - 1
        E = rep.tokens_per_step
        bs = rep.kv.block_size
        c = np.zeros_like(T) if prefix is None else prefix.cached
        sp = 0 if prefix is None else prefix.shared_pages
        n = T - c  # computed in prefill, after c cached positions
        dctx = (D * T + D * (D + 1) / 2.0).sum() / max(D.sum(), 1)
        # pages held: k_p prefill steps at the prompt's pages, then the decode steps' (integers: exact in any order)
        per_prefill = np.ceil(T / bs) - sp
        decoding = _page_sum(T + D, bs) - _page_sum(T, bs) - D * sp
        final = None
        if rep.serving.preemption == "none":  # the engine reserves the final context's pages at admission
            final = np.ceil((T + D) / bs) - sp
        elif E != 1.0:  # a step emits E tokens: D / E decode steps, each holding the pages E tokens apart
            decoding = decoding / E
        D = D / E
        memo["requests"] = (n, c, per_prefill, decoding, final, D, n.mean(), c.mean(), D.mean(), G.mean(), dctx)
    n, c, per_prefill, decoding, final, D, n_mean, c_mean, D_mean, G_mean, dctx = memo["requests"]
    kp = np.ceil(n / chunk)
    key = ("kp", kp.tobytes())
    if key not in memo:
        held = (kp + D) * final if final is not None else kp * per_prefill + decoding
        memo[key] = _Means(n_mean, c_mean, D_mean, G_mean, kp.mean(), n / kp, c + n * (kp - 1) / (2 * kp),
                           kp / kp.sum(), dctx, held.mean())
    return memo[key]


def api_server_rate(rep: Replica) -> float:
    """Requests per second the replica's API servers can take; inf where the overheads overlap."""
    s = rep.api_server_s
    return rep.serving.api_servers / s if s > 0 else math.inf


def steady_state(rep: Replica, T, G, batch_cap: float | None = None, prefix: CachedPrefix | None = None,
                 memo: dict | None = None, api: bool = True) -> SteadyState:
    """Closed form at saturation (see _steady), or where the API servers take fewer requests per
    second than the engine would finish (api_server_rate), the state at that rate: the batch that
    finishes requests as fast as the servers pass them on, limited by "API servers". ``api``
    False: the requests come from another replica (disaggregated decode), not through them."""
    memo = {} if memo is None else memo
    st = _steady(rep, T, G, batch_cap, prefix, memo)
    cap = api_server_rate(rep) if api else math.inf
    if st.requests_per_s <= cap:
        return st
    return replace(_at_rate(rep, T, G, cap, st.batch, prefix, memo), limited_by="API servers")


def _steady(rep: Replica, T, G, batch_cap: float | None = None, prefix: CachedPrefix | None = None,
            memo: dict | None = None) -> SteadyState:
    """Closed form at saturation; ``batch_cap`` lowers N (a closed loop of fewer clients); ``prefix``:
    the cached prompt tokens (prefill computes the rest) and the pages the shared prefix pins.
    ``memo``: a dict kept across calls on the same (rep, T, G, prefix) (at_load's bisection), so the
    means over the requests are taken once per chunk size. It holds no step time: only what the
    lengths, the KV budget, the scheduler, the max batch and the timer's features give, so replicas
    that differ in their step model alone may share it."""
    kv = rep.kv
    budget = rep.serving.max_batched_tokens
    cap = rep.engine_max_batch
    N = float(cap)
    memo = {} if memo is None else memo
    if "final" not in memo:
        final = np.asarray(T) + np.asarray(G) - 1
        memo["final"] = kv.pages_for(final).mean(), kv.max_sequences(int(np.max(final)))
    final_pages, longest = memo["final"]
    for _ in range(3):  # the chunk depends on N, N on the pages a request holds
        chunk = max(budget - (N - 1), 1.0)
        mm = _means(rep, T, G, chunk, prefix, memo)
        kv_n = (kv.pages - (prefix.shared_pages if prefix else 0)) / (mm.pages_life / (mm.kp + mm.D))
        N = min(float(cap), kv_n, batch_cap or math.inf)
    limited = "max batch" if N >= cap else ("KV cache" if N >= kv_n - 1e-9 else "clients")
    timer = rep.timer
    life = mm.kp + mm.D
    r = N / life
    f = r * mm.kp
    if f > 1:
        r = min(r, budget / (mm.T + mm.D))
        f = 1.0
    nd = r * mm.D
    ctx = np.array([mm.decode_ctx - 1])
    t_d, s_d = timer.decode_run(ctx, 0.0, [max(N, 1.0)])
    # a step with a prefill chunk: nd (or N - 1) decodes plus the chunk(s) of r k_p (or 1) requests,
    # the requests' mean chunks weighted by their share of all chunks
    n_pf = r * mm.kp if f >= 1 else 1.0
    d_in_mixed = nd if f >= 1 else max(N - 1, 0.0)
    key = ("chunks", id(mm), n_pf)  # the chunks' features, kept while mm is (in memo)
    if key not in memo:
        memo[key] = timer.chunk_features(mm.chunk_new, mm.chunk_past, n_pf * mm.chunk_share)
    t_m, s_m = timer.step(ctx, mm.chunk_new, mm.chunk_past, [d_in_mixed], n_pf * mm.chunk_share, chunks=memo[key])
    t_d, t_m = float(t_d), float(t_m)
    # eager launches where the engine's CUDA graphs do not reach (Serving.eager), as the simulator charges them
    mixed_tokens = d_in_mixed + n_pf * float(np.sum(mm.chunk_new * mm.chunk_share))
    t_d += rep.eager_step_s if rep.serving.eager(max(N, 1.0), False, rep.kv.ranks) else 0.0
    t_m += rep.eager_step_s if rep.serving.eager(mixed_tokens, True, rep.kv.ranks) else 0.0
    step = f * t_m + (1 - f) * t_d
    return SteadyState(
        pages=kv.pages, kv_sequences_longest=longest,
        kv_concurrency_full=kv.pages / final_pages, kv_concurrency=kv_n, batch=N,
        limited_by=limited, requests_per_step=r, prefill_share=f, decode_step_s=t_d, mixed_step_s=t_m,
        step_s=step, requests_per_s=r / step, output_tokens_per_s=r * mm.G / step,
        decode_bound=str(bound_of(s_d)), mixed_bound=str(bound_of(s_m)),
        tokens_per_step=rep.tokens_per_step,
    )


def at_load(rep: Replica, T, G, rate_per_s: float, prefix: CachedPrefix | None = None) -> tuple[SteadyState, float]:
    """(steady state at an offered rate, utilisation = rate / saturation throughput).
    Below saturation N solves rate = throughput(N) (Little's law over the running batch);
    at or above it the state is the saturated one."""
    memo: dict = {}
    sat = steady_state(rep, T, G, prefix=prefix, memo=memo)
    util = rate_per_s / sat.requests_per_s
    if util >= 1:
        return sat, util
    return _at_rate(rep, T, G, rate_per_s, sat.batch, prefix, memo), util


def _at_rate(rep: Replica, T, G, rate_per_s: float, most: float, prefix, memo: dict) -> SteadyState:
    """The state whose batch (at most ``most``) finishes ``rate_per_s`` requests a second, by bisection
    (throughput grows with the batch)."""
    lo, hi = 0.0, most
    for _ in range(40):
        mid = (lo + hi) / 2
        if _steady(rep, T, G, batch_cap=max(mid, 1e-6), prefix=prefix, memo=memo).requests_per_s < rate_per_s:
            lo = mid
        else:
            hi = mid
    return _steady(rep, T, G, batch_cap=max(hi, 1e-6), prefix=prefix, memo=memo)
