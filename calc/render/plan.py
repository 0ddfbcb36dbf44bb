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
from calc.core.files import atomic_write, out_folder
from calc.core.units import GB
from calc.plot.plan import kv_png, pareto_png, roofline_png
from calc.render.doc import Doc
from calc.render.features import disagg_record, disagg_section, prefix_section, spec_record, spec_section
from calc.render.launch import launch_records, launch_section, launch_text
from calc.render.plan_notes import _usd, assumptions, changes
from calc.serving.planner.plan import Plan, Trial
from calc.spec.workload import Target

# --------------------------------------------------------------------------- numbers


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
        "config": t.label, "hardware": r.hw.name, "tp": r.tp, **({"pp": r.pp} if r.pp > 1 else {}),
        **({"ep": r.ep} if r.ep > 1 else {}), **({"nodes": r.nodes} if r.nodes > 1 else {}),
        **({"speculative": True} if r.speculative is not None else {}), "max_batch": r.max_batch, "replicas": t.replicas,
        "gpus": t.gpus, "usd_per_hour": t.usd_per_hour, "usd_per_million_output_tokens": t.usd_per_million_output_tokens,
        "usd_per_million_total_tokens": t.usd_per_million_total_tokens,
        "meets_slos": t.meets, "failures": t.why(whole=True) if not t.meets else None, "bottleneck": t.bottleneck,
        "latency_s": t.stats, "goodput_requests_per_s": t.goodput_per_s, "output_tokens_per_s": t.output_tokens_per_s,
        "per_replica": {
            "offered_requests_per_s": t.sim.offered_per_s, "served_requests_per_s": t.sim.requests_per_s,
            "capacity_requests_per_s_closed_form": t.saturation.requests_per_s,
            "utilisation_closed_form": t.utilisation, "running_mean": t.sim.running_mean,
            "kv_used_mean": t.sim.kv_used_mean, "kv_pages": t.sim.pages,
            "kv_sequences_at_longest_context": t.saturation.kv_sequences_longest,
            "memory_kv_cache_bytes": t.replica.kv.kv_bytes, "memory_weights_bytes": t.replica.kv.weights_bytes,
            "memory_workspace_bytes": t.replica.kv.workspace_bytes, "preemptions": int(t.sim.preemptions.sum()),
            "bound_time_s": t.sim.bound_time_s,
        },
    }


def _brief(t) -> dict | None:
    """A deployment in a few numbers: aggregated or disaggregated, its label, GPUs and prices."""
    if t is None:
        return None
    return {"kind": _kind(t), "config": t.label, "gpus": t.gpus, "usd_per_hour": t.usd_per_hour,
            "usd_per_million_output_tokens": t.usd_per_million_output_tokens,
            "usd_per_million_total_tokens": t.usd_per_million_total_tokens}


def plan_record(plan: Plan, bands=None) -> dict:
    """The plan as JSON-ready data: the chosen configuration, the ranking, the rejections; with
    ``bands`` (calc.serving.planner.bands.PlanBands) each configuration at the edge too."""
    wl = plan.workload
    chosen = plan.chosen
    rec = {
        "workload": wl.spec.name, "model": wl.model.name,
        "dtypes": {"weight": plan.dtypes.weight, "kv": plan.dtypes.kv, "compute": plan.dtypes.compute},
        "slo_s": wl.spec.slo.targets(), "arrival": wl.spec.arrival.model_dump(exclude_none=True),
        "answer": _brief(plan.answer), "runner_up": _brief(plan.runner_up),
        "best_by_hardware": [{"hardware": hw.name, "config": t.label if t else None, "why_none": why,
                              **({k: v for k, v in _brief(t).items() if k != "config"} if t else {})}
                             for hw, t, why in plan.best_by_hardware()],
        "chosen": trial_record(chosen) if chosen else None,
        "ranked": [trial_record(t) for t in plan.ranked],
        "closest": trial_record(plan.closest) if chosen is None and plan.closest else None,
        "rejected": [{"config": o.label, "kind": o.kind, "reason": o.reason} for o in plan.rejected],
        "simulations": plan.simulations, "requests_per_simulation": int(plan.requests),
        # the engine scheduler the answer ran (after the workload's overrides), in ours and the engine's names
        **({"scheduler": plan.scheduler.model_dump(exclude_none=True), "engine_args": plan.engine_args} if plan.scheduler else {}),
        "launch": launch_records(plan),
        **({"phases": (chosen or plan.closest).sim.phases.record()} if (chosen or plan.closest) else {}),
        **({"disaggregated": disagg_record(plan)} if plan.disagg else {}),
        **({"speculative": spec_record(plan.spec_effect)} if plan.spec_effect else {}),
    }
    if bands is not None:
        from calc.render.plan_bands import add_to_record

        add_to_record(rec, plan, bands)
    return rec


def _price_text(t) -> str:
    if t.usd_per_hour is None:
        return "price unknown (ranked by GPU count)"
    return (f"{_usd(t.usd_per_hour)}/hour, {_usd(t.usd_per_million_output_tokens, 3)} per million output tokens "
            f"({_usd(t.usd_per_million_total_tokens, 3)} per million prompt + output tokens)")


def _kind(t) -> str:
    return "aggregated" if isinstance(t, Trial) else "disaggregated"


def verdict(plan: Plan) -> str:
    """One paragraph: the answer (aggregated or disaggregated) and its runner-up, or why there is none."""
    c = plan.answer
    if c is not None:
        unpriced = [t for t in plan.ranked if t.usd_per_hour is None]
        note = (f" ({len(unpriced)} configuration{'s' * (len(unpriced) > 1)} on hardware without a price "
                "follow the priced ones, by GPU count.)" if unpriced and c.usd_per_hour is not None else "")
        kind = f" ({_kind(c)})" if plan.disagg else ""
        neck = f"; bottleneck: {c.bottleneck}" if isinstance(c, Trial) else ""
        text = (f"Cheapest configuration that meets the SLOs{kind}: {c.label} = {c.gpus} GPU{'s' * (c.gpus > 1)}, "
                f"{_price_text(c)}{neck}.{note}")
        r = plan.runner_up
        if r is not None:
            more = (f", {r.usd_per_hour / c.usd_per_hour - 1:+.0%}" if r.usd_per_hour and c.usd_per_hour else "")
            which = f"the best {_kind(r)}" if _kind(r) != _kind(c) else "next"
            text += (f" Runner-up ({which}): {r.label} = {r.gpus} GPUs, "
                     f"{_usd(r.usd_per_hour) + '/hour' if r.usd_per_hour is not None else 'unpriced'}{more}.")
        return text
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
            f"({t.gpus} GPUs, {_usd(t.usd_per_hour)}/hour): {t.why(whole=True)}.")


def _ranked_rows(plan: Plan, trials: list[Trial]) -> list[list[str]]:
    rows = []
    for i, t in enumerate(trials, 1):
        rows.append([str(i), t.label, str(t.gpus), _usd(t.usd_per_hour), _usd(t.usd_per_million_output_tokens, 3),
                     _usd(t.usd_per_million_total_tokens, 3), render.seconds(t.stats["ttft_p99"]),
                     render.seconds(t.stats["tpot_p99"]), f"{t.goodput_per_s:.3g}", t.bottleneck])
    return rows


RANK_HEADERS = ["#", "configuration", "GPUs", "$/hour", "$/1M out tok", "$/1M total tok", "TTFT p99", "TPOT p99",
                "goodput req/s", "bottleneck"]
HW_HEADERS = ["GPU type", "its best configuration", "GPUs", "$/hour", "$/1M out tok", "$/1M total tok",
              "TTFT p99", "TPOT p99"]


def _hardware_rows(plan: Plan) -> list[list[str]]:
    """One row per GPU type: its cheapest configuration that meets the SLOs, or why none does."""
    rows = []
    for hw, t, why in plan.best_by_hardware():
        if t is None:
            rows.append([hw.name, f"none: {why}", "-", "-", "-", "-", "-", "-"])
            continue
        rows.append([hw.name, t.label, str(t.gpus), _usd(t.usd_per_hour), _usd(t.usd_per_million_output_tokens, 3),
                     _usd(t.usd_per_million_total_tokens, 3), render.seconds(t.stats["ttft_p99"]),
                     render.seconds(t.stats["tpot_p99"])])
    return rows


def _rejected_rows(plan: Plan) -> tuple[list[list[str]], list]:
    rows, pruned = [], []
    for o in plan.rejected:
        if o.kind in ("pruned", "same"):
            pruned.append(o)
            continue
        rows.append([o.label, o.kind, o.reason or ""])
    return rows, pruned


def plan_text(plan: Plan, bands=None) -> str:
    """What `roofline plan` prints (with ``bands``: each shown configuration at the edge too)."""
    wl = plan.workload
    out = [f"workload {wl.spec.name}: {wl.model.name}, {_arrival_text(plan)}, SLOs {_slo_text(plan)}", "",
           verdict(plan), ""]
    if len(wl.hardware) > 1 or plan.answer is None:
        out += ["Best per GPU type:", render.table(_hardware_rows(plan), HW_HEADERS, align="llrrrrrr"), ""]
    if plan.ranked:
        out += ["Configurations that meet the SLOs (cheapest first):",
                render.table(_ranked_rows(plan, plan.ranked), RANK_HEADERS, align="rlrrrrrrrl"), ""]
    out += launch_text(plan)
    rows, pruned = _rejected_rows(plan)
    if rows:
        out += ["Rejected:", render.table(rows, ["configuration", "why", "detail"], align="lll")]
    if pruned:
        out.append(f"({len(pruned)} more left out: costlier than the ranked ones, or the same as a smaller max batch)")
    if bands is not None:
        from calc.render.plan_bands import text_lines

        out += text_lines(plan, bands)
    return "\n".join(out)


def _arrival_text(plan: Plan) -> str:
    a = plan.workload.spec.arrival
    if a.rate_per_s is not None:
        proc = "Poisson" if a.process == "poisson" else f"gamma arrivals (cv {a.cv:g})"
        return f"{a.rate_per_s:g} requests/s, {proc}"
    if a.kind == "burst":
        return f"a burst: all {plan.requests:,} requests at t = 0"
    return f"{a.concurrency} concurrent clients (closed loop)"


def _slo_text(plan: Plan) -> str:
    t = plan.workload.spec.slo.targets()
    return ", ".join(f"{Target.of(k, v).label} <= {render.seconds(v)}" for k, v in t.items()) or "none"


# --------------------------------------------------------------------------- document


# --------------------------------------------------------------------------- the report


_POLICY = {"mixed": "prefill chunks mixed with every decode", "prefill_first": "prefill steps first (decodes wait)",
           "one_at_a_time": "one prompt per prefill step (decodes wait)",
           "batched": "each iteration prefills the waiting prompts but their last tokens, then one decode step "
                      "takes those and samples the first tokens"}


def _engine_text(name: str, s) -> str:
    """The scheduler the plan ran, in words (calc.spec.scheduler.Serving)."""
    share = {"total": "of device memory", "static": "of device memory for weights + KV", "free":
             "of the memory left after weights and workspace"}[s.kv_share_of]
    graphs = ("" if s.graph_max_batch is None else
              f", CUDA graphs up to {s.graph_max_batch:,} tokens per step (eager launches beyond)")
    return (f"{name}: continuous batching, KV pages of {s.block_size} tokens, {s.gpu_memory_utilization:g} {share}, "
            f"{_POLICY[s.policy]}, {'chunked' if s.chunked_prefill else 'whole'} prompts within "
            f"{s.max_batched_tokens:,} tokens per step, "
            f"{'preemption by recompute' if s.preemption == 'recompute' else 'KV reserved to completion'}"
            f"{graphs}, watermark {s.watermark:g}")


def _choices_text(spec) -> str:
    return "; ".join(", ".join(f"{k} {v}" for k, v in c.model_dump(exclude_none=True).items()) or "the model's"
                     for c in spec.dtype_choices)


def _workload_rows(plan: Plan) -> list[list[str]]:
    wl, spec = plan.workload, plan.workload.spec
    dt = plan.dtypes
    src = (f"trace `{spec.trace}` ({wl.trace_rows:,} requests), resampled with replacement"
           if spec.trace else None)
    s = plan.scheduler or wl.serving_for(wl.hardware[0])
    preset = (plan.chosen or plan.closest).replica.hw.preset if (plan.chosen or plan.closest) else wl.hardware[0].preset
    rows = [
        ["model", f"{wl.model.name} ({render.count(wl.model.params_total)} parameters, "
                  f"{render.count(wl.model.params_active)} active)"],
        ["dtypes", f"weights {dt.weight}, KV cache {dt.kv}, compute {dt.compute}"
                   + (f" (the answer's; searched: {_choices_text(spec)})" if len(spec.dtype_choices) > 1 else "")],
        ["arrivals", _arrival_text(plan)],
        ["prompt tokens", src or _dist_text(spec.prompt_len)],
        ["  sampled", _sample_text(plan.prompt_len)],
        ["output tokens", src or _dist_text(spec.output_len)],
        ["  sampled", _sample_text(plan.output_len)],
        ["SLOs", _slo_text(plan)],
        ["candidates", f"{', '.join(h.name for h in wl.hardware)}; TP {', '.join(map(str, sorted(set(spec.tp))))}; "
                       + (f"PP {', '.join(map(str, sorted(set(spec.pp))))}; " if spec.pp != [1] else "")
                       + (f"EP {', '.join(map(str, sorted(set(spec.ep))))}; " if spec.ep != [1] else "")
                       + (f"{spec.cluster.gpus_per_node} GPUs per node; " if max(spec.tp) * max(spec.pp)
                          > spec.cluster.gpus_per_node else "") +
                       f"max batch {', '.join(map(str, sorted(set(spec.max_batch))))}; up to {spec.max_gpus} GPUs"],
        ["engine", _engine_text(preset.name if preset else "default", s)
                   + (f" (the answer's; searched: {', '.join(e.name if e else 'default' for e in wl.engines)})"
                      if len(wl.engines) > 1 else "")],
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


def build_report(plan: Plan, bands=None) -> Doc:
    wl = plan.workload
    d = Doc()
    d.h(1, f"Capacity plan: {wl.spec.name}")
    if wl.spec.description:
        d.p(wl.spec.description.strip())
    src = f"`roofline plan {wl.path}`" if wl.path else "`roofline plan`"
    d.p(f"Generated by {src}: {plan.simulations} simulations of {int(plan.requests):,} requests each.")
    d.h(2, "Answer")
    d.p(f"**{verdict(plan)}**")
    d.table(HW_HEADERS, _hardware_rows(plan), "llrrrrrr")
    d.h(2, "Workload")
    d.table(["workload", "as planned"], _workload_rows(plan))
    if plan.ranked:
        d.h(2, "Configurations that meet the SLOs")
        d.p("Cheapest first (priced hardware by USD per hour, then unpriced by GPU count; ties: more headroom "
            "first). $/1M output tokens at the simulated throughput; goodput over all replicas.")
        d.table(RANK_HEADERS, _ranked_rows(plan, plan.ranked), "rlrrrrrrrl")
    d.h(2, "Rejected configurations")
    rows, pruned = _rejected_rows(plan)
    if rows:
        d.table(["configuration", "why", "detail"], rows)
    if pruned:
        d.p(f"{len(pruned)} more were not simulated or not listed: their fewest replicas already cost more than the "
            f"ranked configurations, or a larger max batch changed nothing (the batch never reached the smaller cap).")
    if any(t.stopped for t in plan.trials):
        d.p("A simulation stops once enough measured requests are past a target that its percentile misses "
            "whatever comes after; such a miss states what its statistics were at least then (the pareto chart "
            "draws it there too, as a triangle).")
    t = plan.chosen or plan.closest
    if t is not None:
        d.h(2, ("Chosen configuration: " if plan.chosen else "Closest configuration: ") + t.label)
        d.table(["latency", "p50", "p90", "p99", "SLO"], _latency_rows(t, t.targets), "lrrrl")
        d.table(["one replica", ""], _replica_rows(t))
        d.h(2, "Charts")
        d.img("pareto.png", "Cost vs TTFT p99 and TPOT p99 of every simulated configuration", pareto_png(plan))
        d.img("kv.png", "KV cache pages in use, running batch and queue over the simulation (one replica)", kv_png(t))
        d.img("roofline.png", f"Roofline of {t.replica.hw.name} {t.replica.split} with the replica's mean steps",
              roofline_png(t, plan.what_if.steps))
    if plan.prefix_effect is not None:
        prefix_section(d, plan.prefix_effect, plan.workload.spec.slo.targets())
    if plan.spec_effect is not None:
        spec_section(d, plan.spec_effect, plan.workload.spec.slo.targets())
    if plan.disagg:
        from calc.plot.front import front_png

        disagg_section(d, plan, front_png(plan))
    if bands is not None:
        from calc.render.plan_bands import section

        section(d, plan, bands)
    launch_section(d, plan)
    d.h(2, "Assumptions")
    d.ul(assumptions(plan))
    d.h(2, "What would change the answer")
    d.ul(changes(plan))
    return d


def write_report(plan: Plan, out, bands=None) -> list[Path]:
    """DIR/report.md (+ its PNGs), DIR/report.html (self-contained) and DIR/plan.json."""
    folder = out_folder(out)
    doc = build_report(plan, bands)
    written = []
    for b in doc.blocks:
        if b[0] == "img":
            atomic_write(folder / b[1], b[3])
            written.append(folder / b[1])
    for name, text in (("report.md", doc.markdown()), ("report.html", doc.html(f"Capacity plan: "
                                                                              f"{plan.workload.spec.name}")),
                       ("plan.json", render.to_json(plan_record(plan, bands)) + "\n")):
        atomic_write(folder / name, text.encode())
        written.append(folder / name)
    return written
