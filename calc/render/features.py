"""Report sections for the serving features a workload may declare: prefix caching, disaggregation."""

from __future__ import annotations

import numpy as np

from calc.core import text as render
from calc.render.doc import Doc
from calc.serving.effects.prefixeffect import PrefixEffect
from calc.serving.planner.trial import cost_key


def prefix_section(d: Doc, e: PrefixEffect, targets: dict) -> None:
    """TTFT, prefill work and KV pages of the chosen configuration with and without prefix caching."""
    d.h(2, "Prefix caching")
    d.p(f"The shared prefix's {e.shared_tokens:,} tokens (whole KV pages) are cached once per replica and pin "
        f"{e.shared_pages:,} of its {e.pages:,} pages ({render.percent(e.shared_pages / e.pages)}, "
        f"{render.nbytes(e.shared_bytes)} per GPU). Prefill computes only the uncached suffix; its attention still "
        f"reads the cached positions. The same replicas at the same load, simulated with every prompt computed "
        f"in full:")
    on, off = e.with_cache, e.without_cache
    rows = [
        ["prompt tokens computed per request (mean)", f"{e.prefill_tokens_cached:,.0f}", f"{e.prefill_tokens_full:,.0f}"],
        ["prefill FLOPs, mean request (whole model)", render.si(e.prefill_flops_cached, "FLOP"),
         render.si(e.prefill_flops_full, "FLOP")],
        ["KV pages a request holds of its own at the end (mean)", f"{e.request_pages_cached:,.1f}",
         f"{e.request_pages_full:,.1f}"],
        ["KV pages pinned by the shared prefix", f"{e.shared_pages:,}", "0"],
    ]
    for m in ("ttft", "tpot"):
        for q in (50, 99):
            rows.append([f"{m.upper()} p{q}", render.seconds(on.percentile(m, q)), render.seconds(off.percentile(m, q))])
    rows.append(["KV pages in use (time-weighted mean)", render.percent(on.kv_used_mean), render.percent(off.kv_used_mean)])
    rows.append(["preemptions", str(int(on.preemptions.sum())), str(int(off.preemptions.sum()))])
    rows.append(["queue growth (share of arrivals)", render.percent(max(on.backlog_growth(), 0.0)),
                 render.percent(max(off.backlog_growth(), 0.0))])
    d.table(["per replica", "with prefix caching", "without"], rows, "lrr")


def _cost_text(t) -> str:
    return f"${t.usd_per_hour:,.2f}/h" if t.usd_per_hour is not None else f"{t.gpus} GPUs (unpriced)"


def _tx(t) -> str:
    return (f"{render.seconds(float(np.median(t.transfer_s)))} (median; over {t.link.name}, "
            + ("overlapped per layer)" if t.overlap else "sent after the prefill)"))


def disagg_why(plan) -> str:
    """Why the winner wins, in numbers."""
    a, d = plan.chosen, plan.best_disagg
    if d is None:
        tried = plan.disagg
        closest = min(tried, key=lambda t: max([v / g for _, v, g in t.misses] or [1.0])) if tried else None
        more = f"; the closest, {closest.label}: {closest.why()}" if closest else ""
        return f"Aggregated wins: no disaggregated deployment tried meets the SLOs within max_gpus{more}."
    if a is None:
        return (f"Disaggregated wins: no aggregated configuration meets the SLOs, while {d.label} does "
                f"(TPOT p99 {render.seconds(d.stats['tpot_p99'])}, TTFT p99 {render.seconds(d.stats['ttft_p99'])}).")
    per = lambda t: t.output_tokens_per_s / t.gpus  # noqa: E731
    if plan.winner == "disaggregated":
        return (f"Disaggregated wins: {d.label} costs {_cost_text(d)} against {_cost_text(a)} for {a.label}. Prefill chunks no "
                f"longer share steps with decoding, so the decode pool holds TPOT p99 at "
                f"{render.seconds(d.stats['tpot_p99'])} on {d.decode_replicas * d.decode.tp} GPUs, where aggregated "
                f"replicas need {a.gpus} GPUs to hold it at {render.seconds(a.stats['tpot_p99'])}: {per(d):,.0f} "
                f"against {per(a):,.0f} output tokens/s per GPU. The KV transfer adds {_tx(d)} to TTFT.")
    return (f"Aggregated wins: {a.label} costs {_cost_text(a)} against {_cost_text(d)} for the best disaggregated deployment, "
            f"{d.label}. One pool shares every GPU between prompts and decoding ({per(a):,.0f} against "
            f"{per(d):,.0f} output tokens/s per GPU), while the split pools each need headroom of their own "
            f"and the KV transfer adds {_tx(d)} to TTFT; interference from prefill chunks costs less here "
            f"(aggregated TPOT p99 {render.seconds(a.stats['tpot_p99'])}, disaggregated "
            f"{render.seconds(d.stats['tpot_p99'])}).")


def disagg_section(d: Doc, plan, front_png: bytes) -> None:
    """The aggregated-vs-disaggregated comparison: the best of each, the chart, every disaggregated trial."""
    d.h(2, "Aggregated vs disaggregated")
    d.p(disagg_why(plan))
    rows = []
    for kind, t in (("aggregated", plan.chosen), ("disaggregated", plan.best_disagg)):
        if t is None:
            rows.append([kind, "none meets the SLOs", "", "", "", "", ""])
            continue
        rows.append([kind, t.label, str(t.gpus), _cost_text(t), f"{t.output_tokens_per_s / t.gpus:,.0f}",
                     f"{1 / t.stats['tpot_p50']:,.1f}", f"{render.seconds(t.stats['ttft_p99'])} / "
                     f"{render.seconds(t.stats['tpot_p99'])}"])
    d.table(["", "best", "GPUs", "cost", "out tok/s per GPU", "tok/s per user", "TTFT / TPOT p99"], rows, "llrrrrr")
    d.img("front.png", "Output tokens/s per GPU against tokens/s per user of every simulated deployment, "
                       "aggregated and disaggregated, with each kind's Pareto front", front_png)
    d.table(["disaggregated deployment", "KV transfer", "result"],
            [[t.label, _tx(t), t.why()] for t in plan.disagg])
    d.p("KV transfer: the prompt's KV at the KV dtype, bytes / (link bandwidth per GPU x min(TP prefill, TP decode)) "
        "+ link latency; NVLink when both pools fit in one node of the same GPU type, else the network. TTFT = queue "
        "+ prefill + transfer; TPOT from the decode pool's simulation at its batch.")


def _disagg_trial(t) -> dict:
    return {"config": t.label, "prefill": {"hardware": t.prefill.hw.name, "tp": t.prefill.tp,
                                           "replicas": t.prefill_replicas},
            "decode": {"hardware": t.decode.hw.name, "tp": t.decode.tp, "max_batch": t.decode.max_batch,
                       "replicas": t.decode_replicas},
            "gpus": t.gpus, "usd_per_hour": t.usd_per_hour, "meets_slos": t.meets,
            "failures": None if t.meets else t.why(), "latency_s": t.stats,
            "output_tokens_per_s": t.output_tokens_per_s, "output_tokens_per_s_per_gpu": t.output_tokens_per_s / t.gpus,
            "kv_transfer": {"link": t.link.name, "overlapped": t.overlap,
                            "median_s": float(np.median(t.transfer_s))}}


def disagg_record(plan) -> dict:
    from calc.serving.planner.disagg_search import front_points, pareto

    pts = front_points([t for t in plan.trials if t.same_as is None], plan.disagg)
    return {"winner": plan.winner, "why": disagg_why(plan),
            "best": _disagg_trial(plan.best_disagg) if plan.best_disagg else None,
            "trials": [_disagg_trial(t) for t in plan.disagg],
            "front": [{"config": p.label, "kind": p.kind, "tokens_per_s_per_user": p.tokens_per_s_per_user,
                       "output_tokens_per_s_per_gpu": p.tokens_per_s_per_gpu, "meets_slos": p.meets}
                      for p in pareto(pts)]}


def _best_text(t) -> str:
    if t is None:
        return "none meets the SLOs"
    return (f"{t.label}: {_cost_text(t)}, TPOT p99 {render.seconds(t.stats['tpot_p99'])}, "
            f"TTFT p99 {render.seconds(t.stats['ttft_p99'])}")


def spec_record(e) -> dict:
    return {
        "what": e.what, "tokens_per_step": e.tokens_per_step, "rows_for": e.config, "max_batch": e.max_batch, "decode_context": e.context,
        "best_with": e.best_with.label if e.best_with else None,
        "best_without": e.best_without.label if e.best_without else None,
        "crossover_batch": e.crossover_batch,
        "by_batch": [{"batch": r.batch, "plain_tpot_s": r.plain_tpot_s, "speculative_tpot_s": r.spec_tpot_s,
                      "speedup": r.speedup} for r in e.rows],
    }


def spec_section(d: Doc, e, targets: dict) -> None:
    """Where speculative decoding helps under the SLOs, and where it stops helping as batch grows."""
    d.h(2, "Speculative decoding")
    d.p(f"Searched with and without speculative decoding ({e.what}): a step emits "
        f"{e.tokens_per_step:.2f} tokens per request on average, (1 - a^(k+1)) / (1 - a), and costs the draft's "
        f"k decode steps plus one target pass verifying k + 1 positions; the draft's weights and KV are in each "
        f"GPU's memory (fewer KV pages).")
    w, wo = e.best_with, e.best_without
    d.ul([f"Cheapest with speculation: {_best_text(w)}.", f"Cheapest without: {_best_text(wo)}."])
    if w is not None and (wo is None or cost_key(w) < cost_key(wo)):
        d.p("**Speculation helps here**: it meets the SLOs on less hardware.")
    elif w is not None and wo is not None:
        d.p("Speculation does not lower the cost here: plain decoding meets the SLOs on as little hardware.")
    tpot = targets.get("tpot_p99") or targets.get("tpot_p50")
    cross = e.crossover_batch
    d.p(f"Pure decode steps on {e.config} at the requests' mean decode context ({e.context:,.0f} positions), "
        f"as the batch grows (past the chosen max batch {e.max_batch} too, for the trend): "
        + (f"speculation stops lowering TPOT at batch {cross} (the verification's k + 1 positions per sequence "
           f"and the draft's steps outweigh the weight reads they save)." if cross else
           "speculation lowers TPOT at every batch up to the max batch."))
    rows = [[f"{r.batch}" + (" (max batch)" if r.batch == e.max_batch else ""), render.seconds(r.plain_tpot_s), render.seconds(r.spec_tpot_s), f"{r.speedup:.2f}x"]
            + ([("yes" if r.spec_tpot_s <= tpot else "no") + " / " + ("yes" if r.plain_tpot_s <= tpot else "no")]
               if tpot else []) for r in e.rows]
    d.table(["batch", "plain TPOT", "speculative TPOT", "speedup"] + (["within TPOT target (spec / plain)"]
                                                                     if tpot else []), rows, "rrrrl")
