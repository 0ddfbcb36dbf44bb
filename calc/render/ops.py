"""The ops and intensity commands' text tables (calc.cost.breakdown computes the records)."""

from __future__ import annotations

from calc.core import text as render
from calc.spec.model import ModelSpec


def ops_text(recs: list[dict], s: dict) -> str:
    what = f"prefill of {s['seq_len']} tokens" if s["phase"] == "prefill" else f"decode step at context {s['seq_len']}"
    head = (f"{s['model']} on {s['hardware']}: {what}, batch {s['batch']} "
            f"(weights {s['weight_dtype']}, KV {s['kv_dtype']}, compute {s['compute_dtype']})")
    rows = [[r["op"] + (" (overlappable)" if r["overlappable"] else ""), r["kind"], r["layers"],
             render.si(r["flops"], "FLOP"), render.nbytes(r["bytes"] or r["comm_bytes"]),
             f"{r['intensity']:.3g}", render.seconds(r["time_s"]), render.seconds(r["total_time_s"]),
             render.percent(r["share"]), r["bound"]] for r in recs]
    rows.append(["total", "", "", render.si(s["flops"], "FLOP"), render.nbytes(s["bytes"]), f"{s['intensity']:.3g}",
                 "", render.seconds(s["time_s"]), "100.0%", s["bound"]])
    table = render.table(rows, ["operator", "kind", "x", "FLOPs/layer", "bytes/layer", "FLOP/B", "time/layer",
                                "total", "share", "bound"], align="llrrrrrrrl")
    note = "; comm rows show bytes sent per GPU" if s["comm_bytes"] else ""
    return f"{head}\n\n{table}\n(ridge point {s['ridge_point']:.0f} FLOP/B; x = layers the operator runs in{note})"


def intensity_text(model: ModelSpec, recs: list[dict]) -> str:
    rows = [[r["seq_len"], f"{r['first_order_prefill']:.1f}", f"{r['operator_prefill']:.1f}",
             f"{r['first_order_decode']:.2f}", f"{r['operator_decode']:.2f}",
             render.percent(r["prefill_attention_flops_share"])] for r in recs]
    table = render.table(rows, ["S", "prefill 1st-order", "prefill operators", "decode 1st-order",
                                "decode operators", "attn FLOP share"])
    return (f"{model.name}: whole-pass arithmetic intensity (FLOP/byte), batch 1\n\n{table}\n\n"
            "1st-order: 2NS/(Nb + kS) and 2N/(Nb + kS). The operator model adds attention FLOPs,\n"
            "runs lm_head for the last position only and reads B*n embedding rows, not the table,\n"
            "and counts activation traffic between operators.")
