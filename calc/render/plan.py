"""A capacity plan for people: terminal text, JSON, and DIR/report.md + DIR/report.html.

The report is built once as a list of blocks (headings, paragraphs, tables, bullet
lists, images) and rendered twice: markdown with the charts as PNG files beside it,
and one self-contained HTML file with the same charts embedded as base64. Every
file is written atomically (temp file in the folder, then os.replace). matplotlib
is imported inside the chart functions (Agg canvas, no pyplot state).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from calc.core import text as render
from calc.core.errors import SpecError
from calc.core.files import atomic_write
from calc.core.units import GB
from calc.cost.dtypes import Dtypes
from calc.plot.plan import kv_png, mean_step, pareto_png, roofline_png
from calc.render.doc import Doc
from calc.render.features import disagg_record, disagg_section, prefix_section
from calc.serving.plan import Plan, Trial
from calc.spec.workload import Target

# --------------------------------------------------------------------------- numbers


def _usd(v: float | None, digits: int = 2) -> str:
    return "unknown" if v is None else f"${v:,.{digits}f}"


def _dist_text(d) -> str:
    if d is None:
        return "-"
    args = {k: v for k, v in d.model_dump().items() if k not in ("dist", "min", "max")}
    body = ", ".join(f"{k} {v:g}" for k, v in args.items())
    clip = f"; clipped to [{d.min}, {d.max}]" if d.max is not None else (f"; at least {d.min}" if d.min > 1 else "")
    return f"{d.dist}({body}){clip}"


def _sample_text(x: np.ndarray) -> str:
    return f"mean {x.mean():,.0f}, p50 {np.percentile(x, 50):,.0f}, p99 {np.percentile(x, 99):,.0f}, max {x.max():,}"


def trial_record(t: Trial) -> dict:
    r = t.replica
    return {
        "config": t.label, "hardware": r.hw.name, "tp": r.tp, "max_batch": r.max_batch, "replicas": t.replicas,
        "gpus": t.gpus, "usd_per_hour": t.usd_per_hour, "usd_per_million_output_tokens": t.usd_per_million_output_tokens,
        "meets_slos": t.meets, "failures": t.why() if not t.meets else None, "bottleneck": t.bottleneck,
        "latency_s": t.stats, "goodput_requests_per_s": t.goodput_per_s, "output_tokens_per_s": t.output_tokens_per_s,
        "per_replica": {
            "offered_requests_per_s": t.sim.offered_per_s, "served_requests_per_s": t.sim.requests_per_s,
            "capacity_requests_per_s_closed_form": t.saturation.requests_per_s,
            "utilisation_closed_form": t.utilisation, "running_mean": t.sim.running_mean,
            "kv_used_mean": t.sim.kv_used_mean, "kv_pages": t.sim.pages,
            "kv_sequences_at_longest_context": t.saturation.kv_sequences_longest,
            "kv_bytes_per_gpu": t.replica.kv.kv_bytes, "weights_bytes_per_gpu": t.replica.kv.weights_bytes,
            "workspace_bytes_per_gpu": t.replica.kv.workspace_bytes, "preemptions": int(t.sim.preemptions.sum()),
            "bound_time_s": t.sim.bound_time_s,
        },
    }


def plan_record(plan: Plan) -> dict:
    """The plan as JSON-ready data: the chosen configuration, the ranking, the rejections."""
    wl = plan.workload
    chosen = plan.chosen
    return {
        "workload": wl.spec.name, "model": wl.model.name,
        "dtypes": {"weight": plan.dtypes.weight, "kv": plan.dtypes.kv, "compute": plan.dtypes.compute},
        "slo_s": wl.spec.slo.targets(), "arrival": wl.spec.arrival.model_dump(exclude_none=True),
        "chosen": trial_record(chosen) if chosen else None,
        "ranked": [trial_record(t) for t in plan.ranked],
        "closest": trial_record(plan.closest) if chosen is None and plan.closest else None,
        "rejected": [{"config": o.label, "kind": o.kind, "reason": o.reason} for o in plan.rejected],
        "simulations": plan.simulations, "requests_per_simulation": int(plan.requests),
        **({"disaggregated": disagg_record(plan)} if plan.disagg else {}),
    }


def verdict(plan: Plan) -> str:
    """One paragraph: the answer, or why there is none."""
    c = plan.chosen
    if c is not None:
        price = (f"{_usd(c.usd_per_hour)}/hour, {_usd(c.usd_per_million_output_tokens, 3)} per million output tokens"
                 if c.usd_per_hour is not None else "price unknown (ranked by GPU count)")
        unpriced = [t for t in plan.ranked if t.usd_per_hour is None]
        note = (f" ({len(unpriced)} configuration{'s' * (len(unpriced) > 1)} on hardware without a price "
                "follow the priced ones, by GPU count.)" if unpriced and c.usd_per_hour is not None else "")
        return (f"Cheapest configuration that meets the SLOs: {c.label} = {c.gpus} GPU{'s' * (c.gpus > 1)}, "
                f"{price}; bottleneck: {c.bottleneck}.{note}")
    if not plan.trials:
        kinds = {o.kind for o in plan.rejected}
        if kinds <= {"fit", "split", "gpus"}:
            return (f"{plan.workload.model.name} fits on no candidate: at every TP degree allowed "
                    f"({', '.join(map(str, sorted(set(plan.workload.spec.tp))))}; max_gpus "
                    f"{plan.workload.spec.max_gpus}) the weights leave no room for a KV cache, or the split is "
                    "impossible; see the rejections. Try larger or more GPUs, or quantised weights.")
        words = {"fit": "does not fit", "split": "cannot split", "kv": "a request exceeds the KV cache",
                 "ttft": "TTFT floor above the target", "tpot": "TPOT floor above the target",
                 "gpus": "needs more GPUs than allowed"}
        return ("No candidate can serve this workload; every (hardware, TP) was ruled out before simulating: "
                f"{'; '.join(sorted(words.get(k, k) for k in kinds))}. See the rejections.")
    t = plan.closest
    return (f"No configuration meets the SLOs within max_gpus = {plan.workload.spec.max_gpus}. Closest: {t.label} "
            f"({t.gpus} GPUs, {_usd(t.usd_per_hour)}/hour): {t.why()}.")


def _ranked_rows(plan: Plan, trials: list[Trial]) -> list[list[str]]:
    rows = []
    for i, t in enumerate(trials, 1):
        rows.append([str(i), t.label, str(t.gpus), _usd(t.usd_per_hour), _usd(t.usd_per_million_output_tokens, 3),
                     render.seconds(t.stats["ttft_p99"]), render.seconds(t.stats["tpot_p99"]), f"{t.goodput_per_s:.3g}", t.bottleneck])
    return rows


RANK_HEADERS = ["#", "configuration", "GPUs", "$/hour", "$/1M out tok", "TTFT p99", "TPOT p99", "goodput req/s",
                "bottleneck"]


def _rejected_rows(plan: Plan) -> tuple[list[list[str]], list]:
    rows, pruned = [], []
    for o in plan.rejected:
        if o.kind in ("pruned", "same"):
            pruned.append(o)
            continue
        rows.append([o.label, o.kind, o.reason or ""])
    return rows, pruned


def plan_text(plan: Plan) -> str:
    """What `roofline plan` prints."""
    wl = plan.workload
    out = [f"workload {wl.spec.name}: {wl.model.name}, {_arrival_text(plan)}, SLOs {_slo_text(plan)}", "",
           verdict(plan), ""]
    if plan.ranked:
        out += ["Configurations that meet the SLOs (cheapest first):",
                render.table(_ranked_rows(plan, plan.ranked), RANK_HEADERS, align="rlrrrrrrl"), ""]
    rows, pruned = _rejected_rows(plan)
    if rows:
        out += ["Rejected:", render.table(rows, ["configuration", "why", "detail"], align="lll")]
    if pruned:
        out.append(f"({len(pruned)} more left out: costlier than the ranked ones, or the same as a smaller max batch)")
    return "\n".join(out)


def _arrival_text(plan: Plan) -> str:
    a = plan.workload.spec.arrival
    if a.rate_per_s is not None:
        proc = "Poisson" if a.process == "poisson" else f"gamma arrivals (cv {a.cv:g})"
        return f"{a.rate_per_s:g} requests/s, {proc}"
    return f"{a.concurrency} concurrent clients (closed loop)"


def _slo_text(plan: Plan) -> str:
    t = plan.workload.spec.slo.targets()
    return ", ".join(f"{Target.of(k, v).label} <= {render.seconds(v)}" for k, v in t.items()) or "none"


# --------------------------------------------------------------------------- document


# --------------------------------------------------------------------------- the report


def _workload_rows(plan: Plan) -> list[list[str]]:
    wl, spec = plan.workload, plan.workload.spec
    dt = plan.dtypes
    src = (f"trace `{spec.trace}` ({wl.trace_rows:,} requests), resampled with replacement"
           if spec.trace else None)
    s = spec.serving
    rows = [
        ["model", f"{wl.model.name} ({render.count(wl.model.params_total)} parameters, "
                  f"{render.count(wl.model.params_active)} active)"],
        ["dtypes", f"weights {dt.weight}, KV cache {dt.kv}, compute {dt.compute}"],
        ["arrivals", _arrival_text(plan)],
        ["prompt tokens", src or _dist_text(spec.prompt_len)],
        ["  sampled", _sample_text(plan.prompt_len)],
        ["output tokens", src or _dist_text(spec.output_len)],
        ["  sampled", _sample_text(plan.output_len)],
        ["SLOs", _slo_text(plan)],
        ["candidates", f"{', '.join(h.name for h in wl.hardware)}; TP {', '.join(map(str, sorted(set(spec.tp))))}; "
                       f"max batch {', '.join(map(str, sorted(set(spec.max_batch))))}; up to {spec.max_gpus} GPUs"],
        ["engine", f"continuous batching, KV pages of {s.block_size} tokens, {s.gpu_memory_utilization:g} of device "
                   f"memory usable, chunked prefill of up to {s.max_batched_tokens:,} tokens per step, "
                   f"watermark {s.watermark:g}"],
        ["simulation", f"{int(plan.requests):,} requests per configuration, seed {spec.seed}"],
    ]
    return rows


def _latency_rows(t: Trial, targets: dict) -> list[list[str]]:
    rows = []
    for m in ("ttft", "tpot", "e2e"):
        slo = ", ".join(f"p{t.percentile} <= {render.seconds(t.limit_s)}" for t in (Target.of(k, v) for k, v in targets.items())
                        if t.metric == m)
        rows.append([m.upper() if m != "e2e" else "e2e", *(render.seconds(t.stats[f"{m}_p{q}"]) for q in (50, 90, 99)),
                     slo or "-"])
    return rows


def _replica_rows(t: Trial) -> list[list[str]]:
    s, sat, load = t.sim, t.saturation, t.load
    kv = t.replica.kv
    rows = [
        ["KV cache per GPU", f"{kv.usable_bytes / GB:.1f} GB usable - {kv.weights_bytes / GB:.1f} GB weights - "
                             f"{kv.workspace_bytes / GB:.2f} GB workspace = {kv.kv_bytes / GB:.1f} GB = "
                             f"{kv.pages:,} pages ({kv.pages * kv.block_size:,} tokens); "
                             f"{sat.kv_sequences_longest:,} sequences fit at once at the longest request's full "
                             f"context ({int(np.max(t.sim.prompt_len + t.sim.output_len - 1)):,} positions)"],
        ["capacity (closed form)", f"{sat.requests_per_s:.3g} req/s, {sat.output_tokens_per_s:,.0f} output tok/s at "
                                   f"batch {sat.batch:.0f} ({sat.limited_by} bound)"],
    ]
    if s.offered_per_s is not None:
        rows.append(["load per replica", f"{s.offered_per_s:.3g} req/s offered, {s.requests_per_s:.3g} served "
                                         f"(simulated); utilisation {t.utilisation:.0%} (closed form)"])
    rows += [
        ["running batch", f"{s.running_mean:.1f} mean (simulated); {load.batch:.1f} (closed form at this load)"],
        ["time per output token", f"{render.seconds(float(np.nanmean(s.metric('tpot'))))} mean (simulated); "
                                  f"{render.seconds(load.tpot_s)} (closed form at this load)"],
        ["KV pages in use", f"{s.kv_used_mean:.0%} mean; {int(s.preemptions.sum())} preemptions"],
        ["step time by bound", ", ".join(f"{k} {v / max(sum(s.bound_time_s.values()), 1e-30):.0%}"
                                         for k, v in s.bound_time_s.items() if v > 0)],
    ]
    return rows


def _changes(plan: Plan) -> list[str]:
    """What would change the answer, computed from the plan."""
    from calc.serving.capacity import Replica
    from calc.serving.kvbudget import kv_budget

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
    if plan.dtypes.kv in ("bf16", "fp16", "fp32"):
        dt8 = Dtypes(plan.dtypes.weight, "fp8", plan.dtypes.compute, plan.dtypes.group_size)
        kv8 = kv_budget(r.model, r.hw, dt8, r.par, spec.serving)
        out.append(f"**FP8 KV cache.** {r.kv.pages:,} -> {kv8.pages:,} pages per replica; this matters when the "
                   f"KV cache binds (here the bottleneck is {c.bottleneck}; mean KV use {c.sim.kv_used_mean:.0%}).")
    if plan.dtypes.weight in ("bf16", "fp16", "fp32"):
        fp8 = Replica(r.model, r.hw, r.tp, r.max_batch, Dtypes.resolve(r.model, "fp8", plan.dtypes.kv), spec.serving)
        a, _, _ = mean_step(c, False)
        from calc.cost.latency import mixed_step_cost

        n = max(int(round(c.sim.running_mean)), 1)
        ctx = float(np.mean(c.sim.prompt_len + (c.sim.output_len - 1) / 2.0))
        b = mixed_step_cost(r.model, r.hw, [1.0] * n, [ctx] * n, fp8.dt, fp8.eff, r.attention, r.par)
        out.append(f"**FP8 weights.** Weights per GPU {r.kv.weights_bytes / GB:.1f} -> {fp8.kv.weights_bytes / GB:.1f} "
                   f"GB, the mean decode step {render.seconds(float(a.time_s))} -> {render.seconds(float(b.time_s))} (quality permitting).")
    hw = r.hw
    bt = c.sim.bound_time_s
    total = max(sum(bt.values()), 1e-30)
    cal = "calibrated" if hw.calibration is not None else "not calibrated (data-sheet peaks x assumed efficiencies)"
    out.append(f"**Efficiencies.** The {hw.name} profile is {cal}: compute {hw.efficiency.compute:g}, memory "
               f"{hw.efficiency.memory:g}. {bt['memory'] / total:.0%} of step time is memory-bound and "
               f"{bt['compute'] / total:.0%} compute-bound, so a 10% lower memory efficiency stretches about "
               f"{bt['memory'] / total:.0%} of the time by 10%. `roofline calibrate` on the device narrows this.")
    out.append(f"**Chunked prefill.** Decoding requests share steps with prefill chunks of up to "
               f"{spec.serving.max_batched_tokens:,} tokens: a smaller budget shortens those stalls (TPOT) and "
               "lengthens prefills (TTFT).")
    return out


def _assumptions(plan: Plan) -> list[str]:
    c = plan.chosen or plan.closest
    out = [
        "Serving model: one replica = TP GPUs with one copy of the weights (PP = 1); replicas split the load "
        "evenly. Continuous batching as vLLM schedules it: running requests first, FCFS admission when the "
        "whole prompt's KV pages (plus the watermark) are free, chunked prefill within the token budget, "
        "preemption by recompute of the most recently admitted request when a page runs out.",
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
    if c is not None and plan.workload.model.attention.kind == "mla":
        out.append("MLA: a step that carries a prefill chunk is costed with the expanded (prefill) form for all "
                   "its tokens, which overstates mixed steps.")
    return out


def build_report(plan: Plan) -> Doc:
    wl = plan.workload
    d = Doc()
    d.h(1, f"Capacity plan: {wl.spec.name}")
    if wl.spec.description:
        d.p(wl.spec.description.strip())
    src = f"`roofline plan {wl.path}`" if wl.path else "`roofline plan`"
    d.p(f"Generated by {src}: {plan.simulations} simulations of {int(plan.requests):,} requests each.")
    d.h(2, "Answer")
    d.p(f"**{verdict(plan)}**")
    if plan.winner == "disaggregated":
        d.p(f"**Cheaper still, disaggregated: {plan.best_disagg.label}** (see Aggregated vs disaggregated).")
    d.h(2, "Workload")
    d.table(["", ""], _workload_rows(plan))
    if plan.ranked:
        d.h(2, "Configurations that meet the SLOs")
        d.p("Cheapest first (priced hardware by USD per hour, then unpriced by GPU count; ties: more headroom "
            "first). $/1M output tokens at the simulated throughput; goodput over all replicas.")
        d.table(RANK_HEADERS, _ranked_rows(plan, plan.ranked), "rlrrrrrrl")
    d.h(2, "Rejected configurations")
    rows, pruned = _rejected_rows(plan)
    if rows:
        d.table(["configuration", "why", "detail"], rows)
    if pruned:
        d.p(f"{len(pruned)} more were not simulated or not listed: their fewest replicas already cost more than the "
            f"ranked configurations, or a larger max batch changed nothing (the batch never reached the smaller cap).")
    t = plan.chosen or plan.closest
    if t is not None:
        d.h(2, ("Chosen configuration: " if plan.chosen else "Closest configuration: ") + t.label)
        d.table(["latency", "p50", "p90", "p99", "SLO"], _latency_rows(t, t.targets), "lrrrl")
        d.table(["one replica", ""], _replica_rows(t))
        d.h(2, "Charts")
        d.img("pareto.png", "Cost vs TTFT p99 and TPOT p99 of every simulated configuration", pareto_png(plan))
        d.img("kv.png", "KV cache pages in use, running batch and queue over the simulation (one replica)", kv_png(t))
        d.img("roofline.png", f"Roofline of {t.replica.hw.name} TP{t.replica.tp} with the replica's mean steps",
              roofline_png(t))
    if plan.prefix_effect is not None:
        prefix_section(d, plan.prefix_effect, plan.workload.spec.slo.targets())
    if plan.disagg:
        from calc.plot.front import front_png

        disagg_section(d, plan, front_png(plan))
    d.h(2, "Assumptions")
    d.ul(_assumptions(plan))
    d.h(2, "What would change the answer")
    d.ul(_changes(plan))
    return d


def check_out_dir(out) -> Path:
    """--out: a folder to create or reuse (its parent must exist)."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise SpecError("--out", None, f"{path} exists and is not a folder")
    if not path.parent.is_dir():
        raise SpecError("--out", None, f"{path}: the folder {path.parent} does not exist")
    return path


def write_report(plan: Plan, out) -> list[Path]:
    """DIR/report.md (+ its PNGs), DIR/report.html (self-contained) and DIR/plan.json."""
    folder = check_out_dir(out)
    try:
        folder.mkdir(exist_ok=True)
    except OSError as exc:
        raise SpecError("--out", None, f"{folder}: cannot create ({exc.strerror})") from None
    doc = build_report(plan)
    written = []
    for b in doc.blocks:
        if b[0] == "img":
            atomic_write(folder / b[1], b[3])
            written.append(folder / b[1])
    for name, text in (("report.md", doc.markdown()), ("report.html", doc.html(f"Capacity plan: "
                                                                              f"{plan.workload.spec.name}")),
                       ("plan.json", render.to_json(plan_record(plan)) + "\n")):
        atomic_write(folder / name, text.encode())
        written.append(folder / name)
    return written
