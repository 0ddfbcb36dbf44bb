"""The planner's search over replica counts for one option: its trials, simulated or reused (a
run whose batch never reached its cap is the same run under any larger cap), and the fewest
replicas that meet the SLOs by bisection (calc.serving.planner.plan describes the whole search)."""

from __future__ import annotations

import math
from dataclasses import replace
from functools import cache, partial
from typing import TYPE_CHECKING

from calc.cost.dtypes import Dtypes
from calc.serving.effects.speceffect import speculative_config
from calc.serving.planner.trial import GUESS_UTIL, Trial
from calc.serving.replica.capacity import Replica, SteadyState, at_load, steady_state
from calc.serving.replica.prefix import cached_prefix
from calc.serving.sim.simulate import arrival_gaps, simulate
from calc.spec.workload import LoadedWorkload

if TYPE_CHECKING:
    from calc.serving.planner.planresult import Option


class Search:
    def __init__(self, wl: LoadedWorkload, requests: int | None, dt: Dtypes):
        self.wl = wl
        spec = wl.spec
        n = requests or wl.n
        self.T, self.G = wl.prompt_len[:n], wl.output_len[:n]
        self.targets = spec.slo.targets()
        self.arrival = spec.arrival
        self.gaps = arrival_gaps(self.T.size, spec.arrival.process, spec.arrival.cv, spec.seed)
        self.dt = dt
        self._prefixes: dict[int, object] = {}
        self.prefix = self.prefix_for(wl.serving_for(wl.hardware[0]).block_size)
        self.sims = 0
        self.done: dict[tuple, list[Trial]] = {}  # (hardware, TP, chunk, speculating, replicas) -> trials
        self.fewest: dict[tuple, int | None] = {}  # the same but for EP -> the last max batch's fewest R (None: none met)
        self.missed: dict[tuple, bool] = {}  # (hardware, engine preset) -> whether the last option searched on it missed
        self.speculative = speculative_config(wl, dt)

    def choices(self):
        """(dtypes, speculative config, label note, hardware under an engine) for every dtype
        choice x hardware x engine preset the workload searches (the note names the dtypes and
        engine when the workload lists several)."""
        wl, model = self.wl, self.wl.model
        picks = wl.spec.dtype_choices
        for d in picks:
            dt = Dtypes.resolve(model, d.weight, d.kv, d.compute)
            sp = self.speculative if dt == self.dt else speculative_config(wl, dt)
            dnote = f", {dt.weight} weights, {dt.kv} KV" if len(picks) > 1 else ""
            for hw in wl.hardware:
                for h in wl.under_each_engine(hw):
                    enote = f", {h.preset.name if h.preset else 'default'}" if len(wl.engines) > 1 else ""
                    yield dt, sp, enote + dnote, h

    def prefix_for(self, block_size: int):
        """The cached prompt tokens and the shared prefix's pages, at a KV page size."""
        if block_size not in self._prefixes:
            self._prefixes[block_size] = cached_prefix(self.wl.spec.prefix_cache, self.T, block_size)
        return self._prefixes[block_size]

    def reuse(self, opt: Option, rep: Replica, sat: SteadyState, R: int, keep: bool = True) -> Trial | None:
        """The trial at R replicas when it needs no simulation: already run for this option, or the
        same run under another max batch (its batch never reached either cap; ``keep``: added to the
        option's trials)."""
        for t in opt.trials:
            if t.replicas == R:
                return t
        budget = max(rep.serving.max_batched_tokens, rep.engine_max_batch)
        for t in self.done.get(_key(rep, R), []):
            # a run whose batch never reached its cap is the same run under any larger cap
            same_budget = max(t.replica.serving.max_batched_tokens, t.replica.engine_max_batch) == budget
            # (of a stopped run, the part run: the same part under the larger cap, so it misses there
            # too; its whole run, when read, is t's if that never reached the cap either)
            cap = min(rep.engine_max_batch, t.replica.engine_max_batch)
            if same_budget and t.same_as is None and t.run.timeline["running"].max() < cap:
                trial = Trial(rep, R, opt.price_per_gpu_hour, t.run, sat, t.closed_form, self.targets,
                              note=opt.note, same_as=t.replica.max_batch,
                              rerun=partial(self._whole, t, rep, R, cap) if t.stopped else None)
                if keep:
                    opt.trials.append(trial)
                return trial
        return None

    def _whole(self, t: Trial, rep: Replica, R: int, cap: int):
        """The whole run of ``rep`` at R replicas that reused stopped trial t's part: t's whole run
        when its batch never reached ``cap`` there either, else its own."""
        return t.sim if t.sim.timeline["running"].max() < cap else self.simulate(rep, R)[0]

    def simulate(self, rep: Replica, R: int, stop: bool = False):
        """One replica's run at R replicas' share of the load (``stop``: until the SLOs are missed
        for certain), and its closed form at that load (a callable)."""
        a = self.arrival
        prefix = self.prefix_for(rep.serving.block_size)
        seed, targets = self.wl.spec.seed, self.targets if stop else None
        if a.rate_per_s is not None:
            rate = a.rate_per_s / rep.engines(R)  # a PP replica runs PP engines (micro-batches) in flight
            sim = simulate(rep, self.T, self.G, rate_per_s=rate, gaps=self.gaps, seed=seed, prefix=prefix,
                           stop_on_miss=targets)
            return sim, partial(at_load, rep, self.T, self.G, rate, prefix)
        if a.kind == "burst":
            # every request at t = 0, split evenly: each engine gets ceil(n / (R x PP)) of them
            n = math.ceil(self.T.size / rep.engines(R))
            sub = replace(prefix, cached=prefix.cached[:n])
            sim = simulate(rep, self.T[:n], self.G[:n], burst=True, seed=seed, prefix=sub, stop_on_miss=targets)
            return sim, partial(_unloaded, rep, self.T[:n], self.G[:n], n, sub)
        clients = math.ceil(a.concurrency / rep.engines(R))
        sim = simulate(rep, self.T, self.G, concurrency=clients, seed=seed, prefix=prefix, stop_on_miss=targets)
        return sim, partial(_unloaded, rep, self.T, self.G, clients, prefix)

    def trial(self, opt: Option, rep: Replica, sat: SteadyState, R: int) -> Trial:
        t = self.reuse(opt, rep, sat, R)
        if t is not None:
            return t
        sim, closed = self.simulate(rep, R, stop=True)
        self.sims += 1
        # the closed form at this load (at_load: a 40-step bisection) waits until a report reads it,
        # once for every trial that shares this run; so does the rest of a stopped run (SimResult.rest)
        t = Trial(rep, R, opt.price_per_gpu_hour, sim, sat, cache(closed), self.targets, note=opt.note)
        opt.trials.append(t)
        self.done.setdefault(_key(rep, R), []).append(t)
        return t

    def fewest_replicas(self, opt: Option, rep: Replica, sat: SteadyState, lo: int, hi: int) -> None:
        """The fewest R in [lo, hi] that meet the SLOs (bisection; below lo cannot keep up; more
        replicas only lower each one's load). When another max batch's run already stands for this
        option's at hi replicas and misses, fewer replicas miss too: nothing is simulated.

        Only the order of the runs is a guess, never the answer: first the closed-form guess (the
        fewest replicas at GUESS_UTIL), then hi, then bisection. When another max batch or EP degree
        of the same replica has been searched, its outcome leads: its fewest R (within [lo, hi]) and
        the counts either side of it (the same replica under another cap usually needs about as
        many), or hi first when it missed even there, or when the last option searched on the same
        GPU did (a hopeless option then costs one run, not two)."""
        guess = lo
        if self.arrival.rate_per_s is not None:
            need = self.arrival.rate_per_s / (GUESS_UTIL * sat.requests_per_s * rep.engines())
            guess = min(max(lo, math.ceil(need)), hi)
        key = _key(rep, 0)
        sibling, gpu = key[:5] + key[6:], key[:2]  # the same replica but for its max batch and EP
        if guess < hi:
            top = self.reuse(opt, rep, sat, hi, keep=False)
            if top is not None and not top.meets:
                if all(t is not top for t in opt.trials):
                    opt.trials.append(top)
                self.fewest[sibling], self.missed[gpu] = None, True
                return  # the most replicas allowed miss already (another max batch's run): fewer miss too
        if sibling in self.fewest and (before := self.fewest[sibling]) is not None:
            b = min(max(before, lo), hi)
            first = [b, b - 1, b + 1]
        elif sibling in self.fewest or self.missed.get(gpu, False):
            first = [hi, guess]
        else:
            first = [guess]
        fail, ok = lo - 1, None  # the most replicas known to miss, the fewest known to meet
        while ok is None or ok - fail > 1:
            top = hi if ok is None else ok - 1
            first = [r for r in first if fail < r <= top]
            r = first.pop(0) if first else hi if ok is None else (ok + fail) // 2
            if self.trial(opt, rep, sat, r).meets:
                ok = r
            elif r == hi:
                break
            else:
                fail = r
        self.fewest[sibling], self.missed[gpu] = ok, ok is None


def _unloaded(rep: Replica, T, G, cap: int, prefix) -> tuple[SteadyState, None]:
    """A closed loop's or a burst's closed form: the steady state of at most ``cap`` requests at once."""
    return steady_state(rep, T, G, batch_cap=cap, prefix=prefix), None


def _key(rep: Replica, R: int) -> tuple:
    preset = rep.hw.preset.name if rep.hw.preset else None
    return rep.hw.name, preset, rep.dt, rep.tp, rep.pp, rep.ep, rep.serving.max_batched_tokens, rep.speculative is not None, R
