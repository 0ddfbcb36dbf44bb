"""`roofline compare` output: measured | predicted | error per metric and run, a summary
line, JSON/CSV records and the --out report. Reads results (calc.accuracy.compare's
RunResult values) and never recomputes a prediction."""

from __future__ import annotations

import math

import numpy as np

from calc.core import text
from calc.render.doc import Doc

# metric name -> display label, passed in by the caller (calc.accuracy.benchmarks.LABELS)


def value_text(metric: str, v: float) -> str:
    if v is None or not math.isfinite(v):
        return "-"
    if metric.endswith("_s") and not metric.endswith("_per_s"):
        return text.seconds(v)
    return f"{v:,.4g}/s" if metric == "requests_per_s" else f"{v:,.4g} tok/s"


def error_text(e: float) -> str:
    return "-" if e is None or not math.isfinite(e) else f"{100 * e:+.1f}%"


def records(results) -> list[dict]:
    """One flat record per (run, metric): the CSV rows, and the metric list of the JSON."""
    out = []
    for r in results:
        sc = r.scenario
        for m in r.metrics:
            out.append({"file": sc.run.file, "run": sc.run.label, "format": sc.run.format, "load": sc.run.load,
                        "model": sc.model, "hardware": sc.hardware, "tp": sc.tp, "engine": r.preset,
                        "metric": m.metric, "measured": m.measured, "predicted": m.predicted,
                        "error": m.error if math.isfinite(m.error) else None, **_band_fields(m, flat=True)})
    return out


def _band_fields(m, flat: bool = False) -> dict:
    """The metric's band and whether the measurement fell inside it (None: no band)."""
    lo, hi = m.band if m.band else (None, None)
    band = {"band_lo": lo, "band_hi": hi} if flat else {"band": list(m.band) if m.band else None}
    return {**band, "inside": m.inside, "band_group": m.band_group, "band_rows": m.band_rows}


def band_text(m) -> tuple[str, str]:
    """("5.9 ms-7.6 ms", "yes"/"NO"), or ("-", "-") without a band."""
    if m.band is None or m.inside is None:
        return "-", "-"
    return f"{value_text(m.metric, m.band[0])}-{value_text(m.metric, m.band[1])}", "yes" if m.inside else "NO"


def summary(results, failures) -> dict:
    errs = [(abs(m.error), m, r) for r in results for m in r.metrics if math.isfinite(m.error)]
    a = np.asarray([e for e, _, _ in errs])
    worst = max(errs, key=lambda t: t[0]) if errs else None
    files = {r.scenario.run.file for r in results}
    inside = [m.inside for r in results for m in r.metrics if m.inside is not None]
    return {"files": len(files), "runs": len(results), "metrics": int(a.size),
            "banded": len(inside), "inside_band": sum(inside) / len(inside) if inside else None,
            "median_abs_error": float(np.median(a)) if a.size else None,
            "p90_abs_error": float(np.percentile(a, 90)) if a.size else None,
            "worst": None if worst is None else {"run": worst[2].scenario.run.name, "metric": worst[1].metric,
                                                 "error": worst[1].error},
            "failed_files": len(failures)}


def summary_line(s: dict) -> str:
    if not s["metrics"]:
        line = f"{s['runs']} runs in {s['files']} files: no metric predicted"
    else:
        w = s["worst"]
        line = (f"{s['runs']} runs in {s['files']} files, {s['metrics']} metrics: median |error| "
                f"{100 * s['median_abs_error']:.1f}%, p90 {100 * s['p90_abs_error']:.1f}%; worst "
                f"{w['metric']} of {w['run']} ({100 * w['error']:+.1f}%)")
    if s.get("banded"):
        line += f"; {100 * s['inside_band']:.0f}% of {s['banded']} inside their 80% band"
    if s["failed_files"]:
        line += f"; {s['failed_files']} file(s) not read (exit 2)"
    return line


def describe(r) -> str:
    sc, run = r.scenario, r.scenario.run
    if run.load == "batch":
        load = f"batch {sc.batch}"
    elif run.load == "concurrency":
        load = f"{run.concurrency} concurrent"
    elif run.ramp_up is not None:
        load = f"{run.ramp_up[0]} ramp {run.ramp_up[1]:g} -> {run.ramp_up[2]:g} req/s"
    elif run.load == "rate":
        load = f"{run.rate_per_s:g} req/s" + (f" (burstiness {run.burstiness:g})" if run.burstiness != 1 else "")
    else:
        load = f"burst: {run.num_requests} at t = 0, " + (f"up to {sc.max_num_seqs} running" if sc.max_num_seqs
                                                           else "running bound by KV pages")
    lengths = (f"{sc.prompt_lens.mean():.0f}/{sc.output_lens.mean():.0f} tokens" if sc.prompt_lens.size == 1 else
               f"{sc.prompt_lens.size} requests, mean {sc.prompt_lens.mean():.0f}/{sc.output_lens.mean():.0f} tokens")
    if run.format == "llama-bench":
        load, lengths = f"n_prompt {int(run.prompt_len)}, n_gen {int(run.output_len)}", f"depth {run.depth}"
    split = f" TP{sc.tp}" + (f" PP{sc.pp}" if sc.pp > 1 else "") + (f" EP{sc.ep}" if sc.ep > 1 else "")
    return f"{run.name} [{run.format}] {sc.model} on {sc.hardware}{split}, {r.preset}; {load}; {lengths}"


def table_text(results, labels: dict[str, str], failures) -> str:
    blocks = []
    for r in results:
        rows = [[labels.get(m.metric, m.metric), value_text(m.metric, m.measured),
                 value_text(m.metric, m.predicted), error_text(m.error), *band_text(m)] for m in r.metrics]
        lines = [describe(r)]
        if r.scenario.assumed:
            lines.append("  assumed: " + "; ".join(r.scenario.assumed))
        lines += [f"  note: {n}" for n in (*r.scenario.notes, *r.notes)]
        groups = sorted({f"{m.band_group} ({m.band_rows} rows)" for m in r.metrics if m.band_group})
        if groups:
            lines.append("  80% band (where 80% of held-out measurements fell): " + "; ".join(groups))
        lines.append(text.table(rows, ["metric", "measured", "predicted", "error", "80% band", "inside"],
                                align="lrrrrl"))
        blocks.append("\n".join(lines))
    blocks.append(summary_line(summary(results, failures)))
    return "\n\n".join(blocks)


def json_record(results, failures, refits=None) -> dict:
    runs = []
    for r in results:
        sc, run = r.scenario, r.scenario.run
        runs.append({"file": run.file, "run": run.label, "format": run.format, "tool_version": run.tool_version,
                     "load": run.load, "concurrency": run.concurrency, "rate_per_s": run.rate_per_s,
                     "burstiness": run.burstiness, "ramp_up": list(run.ramp_up) if run.ramp_up else None,
                     "batch": sc.batch, "requests": run.num_requests,
                     "model": sc.model, "hardware": sc.hardware, "tp": sc.tp, "pp": sc.pp, "ep": sc.ep, "gpus": sc.gpus,
                     "weight_dtype": sc.weight_dtype, "kv_dtype": sc.kv_dtype, "engine": r.preset,
                     "prompt_len_mean": float(sc.prompt_lens.mean()), "output_len_mean": float(sc.output_lens.mean()),
                     "sidecar": sc.sidecar, "origin": sc.origin, "assumed": list(sc.assumed),
                     "notes": [*sc.notes, *r.notes],
                     "metrics": [{"metric": m.metric, "measured": m.measured,
                                  "predicted": m.predicted if math.isfinite(m.predicted) else None,
                                  "error": m.error if math.isfinite(m.error) else None, **_band_fields(m)}
                                 for m in r.metrics]})
    out = {"runs": runs, "summary": summary(results, failures),
           "errors": [{"file": f, "error": e} for f, e in failures]}
    if refits:
        out["fit"] = refits
    return out


def metric_kind(metric: str) -> str:
    """The chart panel a metric goes in: ttft, tpot (TPOT and ITL: time per output token), e2e, rate."""
    if metric.endswith("_per_s") or not metric.endswith("_s"):
        return "rate"
    return {"ttft": "ttft", "tpot": "tpot", "itl": "tpot"}.get(metric.split("_")[0], "e2e")


def build_report(results, labels, failures, chart: tuple[str, bytes] | None, fit_text: str | None = None) -> Doc:
    """The --out report as blocks: markdown (README.md) and self-contained HTML (report.html)."""
    rows = [[r.scenario.run.name, labels.get(m.metric, m.metric), value_text(m.metric, m.measured),
             value_text(m.metric, m.predicted), error_text(m.error), *band_text(m)] for r in results for m in r.metrics]
    d = Doc()
    d.h(1, "roofline compare")
    d.p(summary_line(summary(results, failures)))
    if chart:
        d.img(chart[0], "predicted vs measured", chart[1])
        d.p("One panel per kind of metric: TTFT, TPOT and ITL (time per output token after the first), "
            "e2e request latency, throughputs; the diagonal is a perfect prediction, dotted lines +-25%.")
    d.h(2, "Runs")
    d.ul([f"{describe(r)}" + (f" (assumed: {'; '.join(r.scenario.assumed)})" if r.scenario.assumed else "")
          for r in results])
    d.h(2, "Every metric")
    d.table(["run", "metric", "measured", "predicted", "error", "80% band", "inside"], rows, "llrrrrl")
    if fit_text:
        d.h(2, "Refit (held out by run)")
        d.pre(fit_text)
    if failures:
        d.h(2, "Files not read")
        d.ul([f"`{f}`: {e}" for f, e in failures])
    return d


def report_markdown(results, labels, failures, chart: str | None, fit_text: str | None = None) -> str:
    """README.md's text (``chart``: the PNG's file name beside it, or None)."""
    return build_report(results, labels, failures, (chart, b"") if chart else None, fit_text).markdown()


def fit_table(refits) -> str:
    """Before/after on held-out runs, and the refitted parameters, per preset."""
    rows = []
    for r in refits:
        changed = ", ".join(f"{p} {getattr(r.base, p):.3g} -> {getattr(r.fitted, p):.3g}" for p in r.free)
        rows.append([r.base.name, str(len(r.runs)), str(len(r.folds)), f"{100 * r.held_out_before:.1f}%",
                     f"{100 * r.held_out_after:.1f}%", changed])
    return text.table(rows, ["preset", "runs", "folds", "held-out before", "after", "parameters (all runs)"],
                      align="lrrrrl")


def fit_records(refits) -> list[dict]:
    return [{"preset": r.base.name, "runs": list(r.runs), "folds": len(r.folds),
             "held_out_median_error_before": r.held_out_before, "held_out_median_error_after": r.held_out_after,
             "parameters": {p: {"before": getattr(r.base, p), "after": getattr(r.fitted, p)} for p in r.free}}
            for r in refits]


def write_report(results, labels, failures, out, fit_text: str | None = None) -> list:
    """out/README.md, report.html (the same, self-contained), compare.csv, compare.json and
    compare.png (predicted vs measured, one panel per kind of metric)."""
    from calc.core.files import atomic_write, out_folder
    from calc.plot.compare import compare_chart

    out = out_folder(out, "--out", parents=True)
    written = [atomic_write(out / "compare.csv", text.to_csv(records(results))),
               atomic_write(out / "compare.json", text.to_json(json_record(results, failures)))]
    points = [(r.scenario.run.name, metric_kind(m.metric), m.measured, m.predicted)
              for r in results for m in r.metrics]
    chart = None
    if any(math.isfinite(p) for *_, p in points):
        png = compare_chart(points, out / "compare.png")
        chart = ("compare.png", png)
        written.append(out / "compare.png")
    doc = build_report(results, labels, failures, chart, fit_text)
    written.append(atomic_write(out / "README.md", doc.markdown()))
    written.append(atomic_write(out / "report.html", doc.html("roofline compare")))
    return written
