"""Report sections for the serving features a workload may declare: prefix caching."""

from __future__ import annotations

from calc.core import text as render
from calc.render.doc import Doc
from calc.serving.prefixeffect import PrefixEffect


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
