"""The plan report's closing lists: what would change the answer, and the assumptions made."""

from __future__ import annotations

from calc.core import text as render
from calc.core.units import GB
from calc.serving.planner.plan import Plan
from calc.spec.workload import Target


def _usd(v: float | None, digits: int = 2) -> str:
    return "unknown" if v is None else f"${v:,.{digits}f}"


def changes(plan: Plan) -> list[str]:
    """What would change the answer, computed from the plan."""
    c = plan.chosen
    out = []
    spec = plan.workload.spec
    if c is None:
        return ["Looser SLOs, a larger max_gpus, or faster hardware: see the closest configuration above."]
    r = c.replica
    opt = next(o for o in plan.options if c in o.trials)
    fewer = [t for t in opt.trials if t.replicas == c.replicas - 1]
    if spec.arrival.rate_per_s is not None:
        rate = spec.arrival.rate_per_s
        if fewer:
            out.append(f"**Load.** With {c.replicas - 1} replica{'s' * (c.replicas > 2)} this configuration misses "
                       f"({fewer[0].why()}), so the plan holds up to somewhere below "
                       f"{rate * c.replicas / (c.replicas - 1):.3g} req/s; beyond that add a replica.")
        else:
            out.append(f"**Load.** Each replica saturates at about {c.saturation.requests_per_s:.3g} req/s (closed "
                       f"form); at {rate:g} req/s over {c.replicas} replica{'s' * (c.replicas > 1)} it runs at "
                       f"{c.utilisation:.0%} of that, and fewer replicas could not keep up.")
    ratios = sorted(((v / c.targets[k], k, v) for k, v in c.stats.items() if k in c.targets), reverse=True)
    if ratios:
        q, k, v = ratios[0]
        out.append(f"**SLOs.** The tightest is {Target.of(k, c.targets[k]).label}: {render.seconds(v)} against {render.seconds(c.targets[k])} ({q:.0%} of it); "
                   "a target below that needs more replicas, a smaller max batch or faster hardware.")
    others = [t for t in plan.ranked if t is not c]
    if others:
        o = others[0]
        if o.usd_per_hour is not None and c.usd_per_hour is not None:
            same = abs(o.usd_per_hour - c.usd_per_hour) < 1e-9
            line = (f"**Runner-up.** {o.label} costs {_usd(o.usd_per_hour)}/hour "
                    + ("too (ranked second on headroom: its worst SLO is at "
                       f"{o.miss_ratio:.0%} of its target, the chosen one's at {c.miss_ratio:.0%})" if same else
                       f"({(o.usd_per_hour / c.usd_per_hour - 1):+.0%})"))
            if o.replica.hw.name != r.hw.name and not same:
                line += (f"; it would win if {o.replica.hw.name} cost under "
                         f"{_usd(c.usd_per_hour / o.gpus)}/GPU-hour (now {_usd(o.price_per_gpu_hour)})")
            out.append(line + ".")
    w = plan.what_if
    if w.fp8_kv_pages is not None:
        out.append(f"**FP8 KV cache.** {r.kv.pages:,} -> {w.fp8_kv_pages:,} pages per replica; this matters when the "
                   f"KV cache binds (here the bottleneck is {c.bottleneck}; mean KV use {c.sim.kv_used_mean:.0%}).")
    if w.fp8_weights_bytes is not None:
        a, b = w.steps.decode, w.fp8_decode_step
        out.append(f"**FP8 weights.** Weights per GPU {r.kv.weights_bytes / GB:.1f} -> {w.fp8_weights_bytes / GB:.1f} "
                   f"GB, the mean decode step {render.seconds(float(a.time_s))} -> {render.seconds(float(b.time_s))} (quality permitting).")
    hw = r.hw
    bt = c.sim.bound_time_s
    total = max(sum(bt.values()), 1e-30)
    if hw.calibration is not None:
        cal = f"calibrated: compute {hw.efficiency.compute:g}, memory {hw.efficiency.memory:g}"
    elif hw.efficiency.kernels is not None:
        cal = ("not calibrated; its kernels are timed by curves fitted to public per-kernel measurements "
               "(reports/kernels)")
    else:
        cal = (f"not calibrated (data-sheet peaks x assumed efficiencies): compute {hw.efficiency.compute:g}, "
               f"memory {hw.efficiency.memory:g}")
    out.append(f"**Efficiencies.** The {hw.name} profile is {cal}. {bt['memory'] / total:.0%} of step time is "
               f"memory-bound and "
               f"{bt['compute'] / total:.0%} compute-bound, so a 10% lower memory efficiency stretches about "
               f"{bt['memory'] / total:.0%} of the time by 10%. `roofline calibrate` on the device narrows this.")
    out.append(f"**Chunked prefill.** Decoding requests share steps with prefill chunks of up to "
               f"{(plan.scheduler or plan.workload.serving_for(plan.workload.hardware[0])).max_batched_tokens:,} "
               "tokens: a smaller budget shortens those stalls (TPOT) and "
               "lengthens prefills (TTFT).")
    return out


def assumptions(plan: Plan) -> list[str]:
    c = plan.chosen or plan.closest
    out = [
        "Serving model: one replica = TP x PP GPUs with one copy of the weights; replicas split the load "
        "evenly. A PP replica runs PP engines, one micro-batch each in flight through every stage (vLLM's virtual "
        "engines): each engine gets 1/PP of the replica's load and KV pages, and its step is the whole pass "
        "(all stages plus the PP - 1 activation sends). Continuous batching as the engine preset's scheduler states "
        "it (calc/data/engines.yaml; the workload's serving: and engine_args: override it): running requests first, "
        "FCFS admission when the prompt's KV pages (or, for engines that reserve, the whole request's) plus the "
        "watermark are free, its prefill policy within the token budget, preemption by recompute of the most "
        "recently admitted request when a page runs out (where the engine preempts), eager kernel launches for "
        "steps past its CUDA-graph cap.",
        "Step time = `calc.cost.latency.mixed_step_cost` of the step's ragged batch (weights read once per step), "
        "through a step model fitted per configuration (max relative error "
        f"{max((t.replica.steps.max_fit_error for t in plan.trials), default=0.0):.1g} on its fit steps).",
        "TTFT counts queueing from arrival; TPOT is each request's (e2e - TTFT) / (G - 1); percentiles leave "
        "out the first and last 5% of arrivals (warm-up, drain). Goodput = completed requests per second x the "
        "share meeting every SLO bound. Tokenisation, network and sampling beyond argmax are not modelled.",
    ]
    for hw in plan.workload.hardware:
        price = plan.workload.price_per_gpu_hour(hw)
        if price is None:
            p = "price unknown (ranked by GPU count)"
        elif hw.name in plan.workload.spec.prices:
            p = f"{_usd(price)}/GPU-hour (workload override)"
        else:
            p = f"{_usd(price)}/GPU-hour ({hw.price.source})"
        e = hw.efficiency
        cal = "calibrated" if hw.calibration is not None else "uncalibrated"
        out.append(f"{hw.name}: {hw.memory_gb:g} GB, {hw.memory_bandwidth_tb_s:g} TB/s; efficiencies compute "
                   f"{e.compute:g}, memory {e.memory:g} ({cal}); {p}.")
    if plan.spec_effect is not None:
        out.append("Speculative decoding: every decoding request emits the expected accepted tokens per step through a "
                   "replica-wide clock (step j emits floor(E (j+1)) - floor(E j)), so the spread of accepted runs "
                   "between requests is left out; a verification takes k + 1 slots of the token budget; in steps "
                   "that also carry a prefill chunk the verified positions beyond the first are not charged lm_head.")
    cl = plan.workload.spec.cluster
    spans = sorted({o.label.split(",")[0] for o in plan.options if o.nodes > 1})
    if spans:
        out.append(f"Across nodes ({cl.gpus_per_node} GPUs per node): {', '.join(spans)} span nodes. Every collective "
                   f"of such a replica (TP all-reduces, PP stage sends, EP all-to-alls) is priced over the network, "
                   f"{cl.network_gb_s:g} GB/s per GPU per direction after {cl.network_latency_us:g} us per hop (bytes / "
                   "bandwidth + hops x latency; the profile's collective fits are for its scale-up link), instead "
                   "of the node's scale-up link: an upper bound where only the PP sends cross nodes.")
    if c is not None and plan.workload.model.attention.kind == "mla":
        out.append("MLA: a step that carries a prefill chunk is costed with the expanded (prefill) form for all "
                   "its tokens, which overstates mixed steps.")
    return out
