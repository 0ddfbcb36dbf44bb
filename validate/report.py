"""report.md, counts.json, the predicted-vs-measured scatter, and the printed summary.

The error table follows llm-analysis's best one: measured | predicted with default
efficiencies | predicted calibrated | error %. The target (issue 4): after
calibration, held-out median |error| <= 15% and p90 <= 30% per (dtype, phase).
"""

from __future__ import annotations

import json
from pathlib import Path

from calc.core import text as render
from validate.calibrate import fmt_pct

TARGET_MEDIAN, TARGET_P90 = 0.15, 0.30


def _ms(x) -> str:
    return "-" if x is None else f"{x * 1e3:.3f}"


def _err(pred, meas) -> str:
    return "-" if pred is None or not meas else f"{100 * (pred / meas - 1):+.1f}%"


def meets(stats: dict) -> bool:
    return stats["n"] > 0 and stats["median"] <= TARGET_MEDIAN and stats["p90"] <= TARGET_P90


def error_lines(errors: dict) -> list[list[str]]:
    rows = []
    for (dtype, phase), e in errors.items():
        b, a = e["before"], e["after"]
        verdict = "met" if meets(a) else "NOT met"
        rows.append([dtype, "TTFT (prefill)" if phase == "prefill" else "TPOT (decode)", str(a["n"]),
                     fmt_pct(b["median"]), fmt_pct(b["p90"]), fmt_pct(a["median"]), fmt_pct(a["p90"]), verdict])
    return rows


ERROR_HEADERS = ["dtype", "phase", "held-out n", "median before", "p90 before", "median after", "p90 after",
                 "target (<=15% / <=30%)"]


def summary_lines(run) -> list[str]:
    out = [f"counts: {'ok' if all(c.ok for c in run.counts) else 'MISMATCH'} "
           f"({sum(len(c.flops) for c in run.counts)} FLOP checks, {sum(len(c.kv) for c in run.counts)} KV checks)"
           if run.counts else "counts: not run (--impl hf)"]
    if run.errors:
        out.append("held-out |relative error| before -> after calibration:")
        out += render.table(error_lines(run.errors), ERROR_HEADERS).splitlines()
    slow = sum(r.status.startswith("skipped") for r in run.rows)
    oom = sum(r.status == "oom" for r in run.rows)
    if slow:
        out.append(f"{slow} grid points skipped as too slow at this depth (one call over the cap): "
                   "fewer --layers measures them")
    if oom:
        out.append(f"{oom} grid points skipped: out of memory")
    out += run.notes
    return out


def counts_json(run) -> str:
    """The FLOP/KV checks; ``ok`` is null when none ran (``--impl hf`` times a model it cannot count)."""
    ok = all(c.ok for c in run.counts) if run.counts else None
    return render.to_json({"model": run.spec.name, "layers": run.spec.num_layers, "device": run.opts.device,
                           "ok": ok, "checks": [c.to_dict() for c in run.counts]})


def scatter(run, path: Path) -> Path | None:
    """Predicted vs measured, log-log: default (hollow) and calibrated (filled), by phase and dtype."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in run.rows if r.status == "ok"]
    if not ok:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 5.6))
    colors = {"prefill": "tab:blue", "decode": "tab:orange"}
    markers = {"fp32": "o", "bf16": "s", "fp16": "^"}
    for (phase, dtype) in sorted({(r.point.phase, r.point.dtype) for r in ok}):
        sel = [r for r in ok if r.point.phase == phase and r.point.dtype == dtype]
        x = [r.measured_s * 1e3 for r in sel]
        ax.scatter(x, [r.predicted_default_s * 1e3 for r in sel], facecolors="none",
                   edgecolors=colors[phase], marker=markers.get(dtype, "o"), label=f"{phase} {dtype} default")
        if all(r.predicted_calibrated_s for r in sel):
            ax.scatter(x, [r.predicted_calibrated_s * 1e3 for r in sel], color=colors[phase],
                       marker=markers.get(dtype, "o"), label=f"{phase} {dtype} calibrated")
    vals = [v for r in ok for v in (r.measured_s, r.predicted_default_s, r.predicted_calibrated_s) if v]
    lo, hi = min(vals) * 1e3 / 1.5, max(vals) * 1e3 * 1.5
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
    ax.fill_between([lo, hi], [lo * 0.7, hi * 0.7], [lo * 1.3, hi * 1.3], color="0.9", zorder=0, label="+-30%")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured (ms)",
           ylabel="predicted (ms)", title=f"{run.spec.name} on {run.device_name[:40]}")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def markdown(run, plot: Path | None) -> str:
    import torch

    o = run.opts
    L = [f"# Validation: {run.spec.name} on {o.device}", "",
         f"- device: {run.device_name}; torch {torch.__version__}; {run.threads} threads",
         f"- model: {run.spec.name}, {run.spec.num_layers} layers (widths as the catalog spec), random weights; "
         f"implementation: {'transformers LlamaForCausalLM' if o.impl == 'hf' else 'validate/reference.py'}",
         f"- grid: {o.mode}; dtypes {', '.join(dict.fromkeys(r.point.dtype for r in run.rows))}; "
         f"wall time {run.wall_s:.0f} s",
         f"- base profile (\"default\" predictions): {run.base.name}; calibrated profile: calibrated.yaml "
         f"(`roofline estimate --hardware {Path(o.out) / 'calibrated.yaml'}`)", ""]
    L += ["## Count checks (FlopCounterMode and cache nbytes vs the calculator)", "",
          "Attention: the SDPA math backend multiplies the whole T x T score matrix in a causal prefill "
          "(\"computed\"); our convention counts the visible pairs, T(T+1)/2 per sequence (or the window's). "
          "\"visible\" is the counter's number times the visible share of the mask the pass used. Decode "
          "attends S + 1 keys (or W): both agree exactly.", "", "```"]
    for c in run.counts:
        L += [f"{c.dtype}: {'ok' if c.ok else 'MISMATCH'}", *c.lines()]
    L += ["```", ""]
    if run.errors:
        L += ["## Held-out error before and after calibration", "",
              render.markdown_table(ERROR_HEADERS, error_lines(run.errors)), ""]
    if run.fits:
        L += ["## Fitted efficiencies (relative to the base profile's peaks)", "",
              render.markdown_table(["dtype", "compute", "memory", "attention share", "kernel overhead us", "step overhead us"],
                        [[d, f"{f.compute:.3g}", f"{f.memory:.3g}", f"{f.attention:.3g}",
                          f"{f.kernel_overhead_s * 1e6:.3g}" + ("" if f.kernel_overhead_fitted else " (prior)"),
                          f"{f.step_overhead_s * 1e6:.3g}"] for d, f in run.fits.items()]), ""]
    if run.requests:
        L += ["## Whole request (the seed experiment's shape: prompt [2, 128], 16 tokens)", "",
              render.markdown_table(["dtype", "metric", "measured ms", "predicted default ms", "predicted calibrated ms"],
                        _request_rows(run.requests)), ""]
        L += [f"Final KV (layer 0 K): {r['measured']['kv_shape']}; generated {r['measured']['generated_shape']}"
              for r in run.requests[:1]] + [""]
    if plot:
        L += [f"![predicted vs measured]({plot.name})", ""]
    L += ["## Every grid point", "",
          render.markdown_table(["dtype", "phase", "B", "T/S", "split", "measured ms", "predicted default ms",
                     "predicted calibrated ms", "error default", "error calibrated", "flags"],
                    [[r.point.dtype, r.point.phase, r.point.batch, r.point.size, r.split,
                      _ms(r.measured_s) if r.status == "ok" else r.status, _ms(r.predicted_default_s),
                      _ms(r.predicted_calibrated_s), _err(r.predicted_default_s, r.measured_s),
                      _err(r.predicted_calibrated_s, r.measured_s), r.flags] for r in run.rows]), ""]
    if run.probes is not None:
        L += ["## Device probes", "", "```", *run.probes.lines(), "```", ""]
    if run.notes or any(r.flags for r in run.rows):
        L += ["## Notes", ""] + [f"- {n}" for n in run.notes]
        if any(r.flags for r in run.rows):
            from validate.timing import ADVICE

            L.append(f"- {sum(bool(r.flags) for r in run.rows)} points flagged; {ADVICE}")
    return "\n".join(L) + "\n"


def _request_rows(requests) -> list[list[str]]:
    rows = []
    for r in requests:
        m, d, c = r["measured"], r["predicted_default"], r.get("predicted_calibrated") or {}
        for label, mk, pk in (("TTFT", "ttft_s", "ttft_s"), ("first decode step", "first_decode_s", "first_decode_s"),
                              ("TPOT (median step; predicted: mean)", "tpot_median_s", "tpot_s")):
            rows.append([r["dtype"], label, _ms(m[mk]), _ms(d[pk]), _ms(c.get(pk))])
    return rows


def write_all(run) -> list[Path]:
    """counts.json, scatter.png, report.md into the run's output folder (calibrated.yaml and the CSV exist)."""
    from calc.core.files import atomic_write as write_atomic

    out = Path(run.opts.out)
    written = [write_atomic(out / "counts.json", counts_json(run))]
    plot = scatter(run, out / "scatter.png")
    if plot:
        written.append(plot)
    written.append(write_atomic(out / "report.md", markdown(run, plot)))
    (out / "requests.json").write_text(json.dumps(run.requests, indent=2))
    return written
