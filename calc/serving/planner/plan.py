"""The planner: the cheapest configuration that meets a workload's SLOs at its load.

Search space: hardware x split per replica (TP x PP GPUs, EP over the TP GPUs for MoE) x max
batch x replicas (data parallel; the load splits evenly: a Poisson stream of rate L over R
replicas is R Poisson streams of rate L / R, a closed loop of C clients gives each replica C / R).
A PP replica runs PP engines, each one micro-batch in flight through all the stages (vLLM's
virtual engines): it is simulated as one engine at 1/PP of the replica's load and KV pages,
its step the whole pass (every stage plus the PP - 1 sends). A replica of more GPUs than a node
holds (the workload's ``cluster``) spans nodes; its collectives run over the network
(calc.serving.replica.capacity.across_nodes).

For each (hardware, TP) the planner first rules out what cannot work, without
simulating: a split the model does not allow, weights that do not fit, a request
longer than the KV cache, a TTFT or TPOT target below what one request alone gets
(its prefill; a decode step at batch 1). For each max batch the closed form
(calc.serving.replica.capacity.steady_state) gives the fewest replicas that can keep up; candidates
are then simulated cheapest lower bound first, and for each the fewest replicas that
meet the SLOs is found by simulation (more replicas only lower each one's load). A trial's
simulation stops once its measured requests miss an SLO for certain (calc.serving.sim.slowatch:
enough of them already past the target for its percentile to be); a report that reads such a
trial's figures runs the rest (the same result as a run never stopped), and the nearest miss is
found running stopped runs on only as far as ranking them needs (calc.serving.planner.trial.nearest_miss).
The search stops once ``RUNNERS_UP + 1`` configurations meet the SLOs, every GPU type has
one that does (or has none left to try), and every remaining candidate's lower bound costs
more than they do.

Cost: replicas x TP x USD per GPU-hour (the workload's override, else the profile's);
hardware without a price is ranked by GPU count after the priced configurations.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

from calc.core.progress import Progress, silent
from calc.cost.dtypes import Dtypes
from calc.serving.effects.prefixeffect import prefix_effect
from calc.serving.effects.speceffect import SpecEffect, spec_effect, spec_note
from calc.serving.effects.whatif import what_if
from calc.serving.planner.disagg_search import search_disagg
from calc.serving.planner.planresult import Option, Plan
from calc.serving.planner.search import Search
from calc.serving.planner.trial import RUNNERS_UP, Trial, cost_key
from calc.serving.replica.capacity import Replica, across_nodes, steady_state, validate_split
from calc.serving.replica.floors import floor_reason, floors
from calc.spec.workload import LoadedWorkload


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


# --------------------------------------------------------------------------- search


def plan(wl: LoadedWorkload, requests: int | None = None, time_budget_s: float | None = None,
         progress: Progress = silent) -> Plan:
    """Search the configurations (see the module docstring); ``requests`` simulated per trial
    (default: the workload's); ``time_budget_s`` stops starting new candidates after that long;
    ``progress(done, total, label)`` after each candidate."""
    t0 = time.perf_counter()
    spec, model = wl.spec, wl.model
    d = spec.dtype_choices[0]  # the first dtypes: disaggregation and the bands are searched at them
    dt0 = Dtypes.resolve(model, d.weight, d.kv, d.compute)
    search = Search(wl, requests, dt0)
    T, G = search.T, search.G
    options: list[Option] = []
    candidates = []
    longest = int((T + G - 1).max())
    splits = [(tp, pp, ep) for tp in sorted(set(spec.tp)) for pp in sorted(set(spec.pp)) for ep in sorted(set(spec.ep))
              if ep == 1 or (model.moe is not None and tp % ep == 0)]
    for dt, spec_cfg, tag, hw0 in search.choices():
        price = wl.price_per_gpu_hour(hw0)
        serving0 = wl.serving_for(hw0)  # the engine's scheduler on this GPU, with the workload's overrides
        chunks = sorted(set(spec.chunk_tokens or [serving0.max_batched_tokens]))
        # max batch is searched (vLLM's max_num_seqs); a cap the workload sets itself is the only one tried
        batches = [serving0.max_num_seqs] if "max_num_seqs" in wl.user_scheduler_keys(hw0) else spec.max_batch
        prefix = search.prefix_for(serving0.block_size)
        for tp, pp, ep in splits:
            gpus, nodes, hw = tp * pp, -(-tp * pp // spec.cluster.gpus_per_node), hw0
            if nodes > 1:
                hw = across_nodes(hw0, spec.cluster)
            opt = Option(hw, tp, None, price, pp, ep, nodes, note=tag)
            if gpus > spec.max_gpus:
                opt.reason, opt.kind = f"{gpus} GPUs per replica exceed max_gpus ({spec.max_gpus})", "gpus"
                options.append(opt)
                continue
            why = validate_split(model, hw, tp, pp, ep)
            if why:
                opt.reason, opt.kind = f"cannot split: {why}", "split"
                options.append(opt)
                continue
            for chunk, sp in ((c, v) for c in chunks for v in ([None, spec_cfg] if spec_cfg else [None])):
                serving = serving0 if chunk == serving0.max_batched_tokens else \
                    serving0.model_copy(update={"max_batched_tokens": chunk})
                note = tag + (f", chunk {chunk:,}" if len(chunks) > 1 else "") + (", speculative" if sp else "")
                opt = Option(hw, tp, None, price, pp, ep, nodes, note=note)
                # launched with the largest max batch tried as its max_num_seqs (the KV budget's least)
                launch = serving.model_copy(update={"max_num_seqs": max(batches)})
                base = Replica(model, hw, tp, max(batches), dt, launch, speculative=sp, pp=pp, ep=ep, nodes=nodes)
                kv = base.kv
                if not kv.fits:
                    opt.reason = f"does not fit: {kv.no_room(hw.memory_gb)}"
                    opt.kind = "fit"
                    options.append(opt)
                    continue
                if not kv.admits(longest, serving.watermark):
                    opt.reason = (f"KV cache: the longest request holds {longest:,} positions; the replica's "
                                  f"{kv.pages:,} pages hold {kv.pages * kv.block_size:,}")
                    opt.kind = "kv"
                    options.append(opt)
                    continue
                floor = floor_reason(floors(base, T, G, prefix), search.targets)
                if floor:
                    opt.kind, opt.reason = floor
                    options.append(opt)
                    continue
                r_max = spec.max_gpus // gpus
                for mb in sorted(set(batches)):
                    rep = base.with_max_batch(mb, launched=True)
                    o = Option(hw, tp, mb, price, pp, ep, nodes, note=note)
                    sat = steady_state(rep, T, G, prefix=prefix)
                    if spec.arrival.rate_per_s is not None:
                        lo = max(1, math.ceil(spec.arrival.rate_per_s / (sat.requests_per_s * rep.engines()) * (1 + 1e-9)))
                    else:
                        lo = 1
                    o.lower_bound_replicas = lo
                    options.append(o)
                    if lo > r_max:
                        o.reason = (f"falls behind: keeping up needs >= {_n(lo, 'replica')} ({lo * gpus} GPUs; closed-form "
                                    f"capacity {sat.requests_per_s:.3g} req/s each), max_gpus {spec.max_gpus}")
                        o.kind = "gpus"
                        continue
                    bound = lo * gpus * (price if price is not None else 1.0)
                    candidates.append((price is None, bound, lo * gpus, o, rep, sat, lo, r_max))
    candidates.sort(key=lambda c: c[:3])
    met: list[Trial] = []
    for i, (unpriced, bound, gpus, o, rep, sat, lo, r_max) in enumerate(candidates):
        progress(i, len(candidates), f"{o.label} ({search.sims} simulations)")
        # pruned once RUNNERS_UP + 1 cheaper ones meet the SLOs, unless its GPU type has none yet
        # (the plan shows each type's best)
        if len(met) > RUNNERS_UP and any(t.replica.hw.name == o.hw.name for t in met):
            worst = sorted(met, key=cost_key)[RUNNERS_UP]
            if (unpriced, bound if not unpriced else gpus) > cost_key(worst)[:2]:
                o.reason = (f"not simulated: at least {_n(lo, 'replica')}, which costs more than the "
                            f"{RUNNERS_UP + 1} cheapest that meet the SLOs")
                o.kind = "pruned"
                continue
        if time_budget_s is not None and time.perf_counter() - t0 > time_budget_s:
            o.reason, o.kind = "not simulated: the time budget ran out", "pruned"
            continue
        search.fewest_replicas(o, rep, sat, lo, r_max)
        if o.best is not None and o.best.same_as is not None:
            o.reason = (f"same as max batch {o.best.same_as}: the running batch never reached "
                        f"{o.best.same_as}, so a larger cap changes nothing")
            o.kind = "same"
        elif o.best is not None:
            met.append(o.best)
        else:
            last = o.most_replicas
            o.reason = (f"misses the SLOs even with {_n(last.replicas, 'replica')} ({_n(last.gpus, 'GPU')}): "
                        f"{last.why()}")
            o.kind = "slo"
    progress(len(candidates), len(candidates), f"{search.sims} simulations")
    disagg = search_disagg(wl, dt0, T, G, search.gaps, search.targets,
                           search.prefix if search.prefix.cached.any() else None)
    result = Plan(wl, options, time.perf_counter() - t0, search.sims + 2 * len(disagg), dt0, T, G, disagg=tuple(disagg))
    chosen = result.chosen
    if chosen is not None and search.prefix.cached.any():
        a, k = spec.arrival, chosen.replica.engines(chosen.replicas)
        effect = prefix_effect(
            chosen.replica, chosen.replicas, T, G, search.prefix_for(chosen.replica.serving.block_size), chosen.sim, seed=spec.seed, gaps=search.gaps,
            rate_per_s=None if a.rate_per_s is None else a.rate_per_s / k,
            concurrency=None if a.concurrency is None else math.ceil(a.concurrency / k))
        result = replace(result, prefix_effect=effect, wall_s=time.perf_counter() - t0)
    shown = result.chosen or result.closest
    if shown is not None:  # the dtypes of what it shows (one of the choices searched)
        result = replace(result, dtypes=shown.replica.dt, what_if=what_if(shown, shown.replica.dt),
                         wall_s=time.perf_counter() - t0)
    if search.speculative is not None:
        result = replace(result, spec_effect=_spec_effect(wl, result), wall_s=time.perf_counter() - t0)
    return result


def _spec_effect(wl: LoadedWorkload, result: Plan) -> SpecEffect | None:
    """Best with and without speculation, and the batch rows for the speculating replica nearest the answer."""
    ranked = result.ranked
    with_ = next((t for t in ranked if t.replica.speculative is not None), None)
    without = next((t for t in ranked if t.replica.speculative is None), None)
    ref = with_ or next((o for o in result.options if o.trials and o.trials[0].replica.speculative is not None), None)
    rep = ref.replica if with_ is not None else (ref.trials[0].replica if ref is not None else None)
    if rep is None:
        return None
    return spec_effect(spec_note(wl), rep, result.prompt_len, result.output_len, with_, without)
