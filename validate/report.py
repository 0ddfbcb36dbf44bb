"""report.md, counts.json, the predicted-vs-measured scatter, and the printed summary.

The error table: per held-out model, dtype and phase, measured | predicted with the base
profile | predicted with the kernel profile | |error| median and p90. The target
(issue 12): on held-out models, median |error| <= 15% and p90 <= 30% for TTFT (prefill)
and TPOT (decode), with the kernel profile.
"""

from __future__ import annotations

import os
from pathlib import Path

from calc.core import text as render
from calc.spec.bands import MIN_ROWS

from .calibrate import fmt_pct

TARGET_MEDIAN, TARGET_P90 = 0.15, 0.30
PHASE = {"prefill": "TTFT (prefill)", "decode": "TPOT (decode)", "mixed": "mixed step (decodes + a chunk)"}


def _ms(x) -> str:
    return "-" if x is None else f"{x * 1e3:.3f}"


def _err(pred, meas) -> str:
    return "-" if pred is None or not meas else f"{100 * (pred / meas - 1):+.1f}%"


def meets(stats: dict) -> bool:
    return stats["n"] > 0 and stats["median"] <= TARGET_MEDIAN and stats["p90"] <= TARGET_P90


def verdict(stats: dict) -> str:
    if not stats["n"]:
        return "-"
    if meets(stats):
        return "met"
    over = [f"median {fmt_pct(stats['median'])} > 15%" if stats["median"] > TARGET_MEDIAN else "",
            f"p90 {fmt_pct(stats['p90'])} > 30%" if stats["p90"] > TARGET_P90 else ""]
    return "NOT met (" + ", ".join(o for o in over if o) + ")"


def error_lines(errors: dict) -> list[list[str]]:
    order = sorted(errors, key=lambda k: (k[0] == "all", k[0], k[1] == "all", k[1], k[2]))
    rows = []
    for model, dtype, phase in order:
        e = errors[(model, dtype, phase)]
        b, k = e["base"], e["kernel"]
        rows.append([model, dtype, PHASE[phase], str(k["n"]), fmt_pct(b["median"]), fmt_pct(b["p90"]),
                     fmt_pct(k["median"]), fmt_pct(k["p90"]), verdict(k)])
    return rows


ERROR_HEADERS = ["model", "dtype", "phase", "n", "median base", "p90 base", "median kernels", "p90 kernels",
                 "target (<=15% / <=30%)"]


def load_line() -> str:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "load average: unknown"
    return f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} (1 / 5 / 15 min) on {os.cpu_count()} logical CPUs"


def done_when(run) -> list[str]:
    """The issue's figures: TTFT and TPOT |error| on every held-out model, kernel profile."""
    out = []
    for phase in PHASE:
        e = run.errors.get(("all", "all", phase))
        if e:
            k = e["kernel"]
            f = e.get("kernel_fastest") or {"median": None, "p90": None}
            out.append(f"{PHASE[phase]} on held-out models, kernel profile: median |error| {fmt_pct(k['median'])}, "
                       f"p90 {fmt_pct(k['p90'])} (n={k['n']}; base profile: {fmt_pct(e['base']['median'])} / "
                       f"{fmt_pct(e['base']['p90'])}; against each point's fastest sample instead of its median: "
                       f"{fmt_pct(f['median'])} / {fmt_pct(f['p90'])}): {verdict(k)}")
    return out


DRIFT = 0.10  # the probes' speed around the passes against the profile's: a larger change is warned of


def drift_lines(run) -> list[str]:
    """The device's speed after the passes against just before them (probes.speed_check: 0.3 s on a
    CPU), and a warning when it moved by more than DRIFT: a shared host's other virtual machines can
    slow a whole run by 20%, which every held-out error then carries."""
    d = run.drift()
    if not d:
        return []
    first = run.speed[0][0]
    out = [f"device speed {'; '.join(f'{when}: matmul x{c:.2f}, memory x{m:.2f}' for when, c, m in d)} "
           f"(medians against {first}, when the kernel profile had just been measured)"]
    worst = max(abs(v - 1) for _, c, m in d for v in (c, m))
    if worst > DRIFT:
        out.append(f"warning: the device's speed changed by {100 * worst:.0f}% while the passes ran (more than "
                   f"{100 * DRIFT:.0f}%: other programs, or on a shared host other machines): the held-out errors "
                   "above carry that change. Run again when the machine is steady.")
    return out


def summary_lines(run) -> list[str]:
    if run.counts:
        ok = all(c.ok for _, c in run.counts)
        out = [f"counts: {'ok' if ok else 'MISMATCH'} ({sum(len(c.flops) for _, c in run.counts)} FLOP checks, "
               f"{sum(len(c.kv) for _, c in run.counts)} KV checks)"]
    else:
        out = ["counts: not run (--impl hf)"]
    if run.errors:
        out.append("held-out |relative error|, base profile vs kernel profile:")
        out += render.table(error_lines(run.errors), ERROR_HEADERS).splitlines()
        out += done_when(run)
        out += drift_lines(run)
    slow = sum(r.status.startswith("skipped") for r in run.rows)
    oom = sum(r.status == "oom" for r in run.rows)
    if slow:
        out.append(f"{slow} grid points skipped as too slow at this depth (one call over the cap): "
                   "fewer --layers measures them")
    if oom:
        out.append(f"{oom} grid points skipped: out of memory")
    out.append(load_line())
    if run.where_the_passes_went():
        out.append(run.where_the_passes_went())
    out += run.notes
    return out


def counts_json(run) -> str:
    ok = all(c.ok for _, c in run.counts) if run.counts else None  # null: none ran (--impl hf)
    return render.to_json({"models": [s.name for s in run.specs], "device": run.opts.device, "ok": ok,
                           "checks": [{"model": m, **c.to_dict()} for m, c in run.counts]})


def scatter(run, path: Path) -> Path | None:
    """Predicted vs measured, log-log: base profile (hollow) and kernel profile (filled), by phase and dtype."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in run.rows if r.status == "ok"]
    if not ok:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 5.6))
    colors = {"prefill": "tab:blue", "decode": "tab:orange", "mixed": "tab:green"}
    markers = {"fp32": "o", "bf16": "s", "fp16": "^"}
    for (phase, dtype) in sorted({(r.point.phase, r.point.dtype) for r in ok}):
        sel = [r for r in ok if r.point.phase == phase and r.point.dtype == dtype]
        x = [r.measured_s * 1e3 for r in sel]
        ax.scatter(x, [r.predicted_default_s * 1e3 for r in sel], facecolors="none",
                   edgecolors=colors[phase], marker=markers.get(dtype, "o"), label=f"{phase} {dtype} base")
        ax.scatter(x, [r.predicted_calibrated_s * 1e3 for r in sel], color=colors[phase],
                   marker=markers.get(dtype, "o"), label=f"{phase} {dtype} kernels")
    vals = [v for r in ok for v in (r.measured_s, r.predicted_default_s, r.predicted_calibrated_s) if v]
    lo, hi = min(vals) * 1e3 / 1.5, max(vals) * 1e3 * 1.5
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
    ax.fill_between([lo, hi], [lo * 0.7, hi * 0.7], [lo * 1.3, hi * 1.3], color="0.9", zorder=0, label="+-30%")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured (ms)",
           ylabel="predicted (ms)", title=f"held-out models on {run.device_name[:40]}")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    from calc.core.files import atomic_write

    atomic_write(path, lambda fh: fig.savefig(fh, format="png", dpi=110))
    plt.close(fig)
    return path


def _profile_lines(hw) -> list[str]:
    e = hw.efficiency
    lines = [f"- peaks {', '.join(f'{d} {v * 1e3:.4g} GFLOP/s' for d, v in hw.peak_tflops.items())}; "
             f"bandwidth {hw.memory_bandwidth_tb_s * 1e3:.4g} GB/s (the best measured: probes, matmul tables, streams >= 32 MB)",
             f"- fitted to the tables: compute {e.compute:g}, memory {e.memory:g}, attention {e.attention:g}, "
             f"gemm M half {e.gemm_m_half:g}, kernel overhead {e.kernel_overhead_us:g} us"
             + "".join(f"; {d}: " + ", ".join(f"{k} {v:g}" for k, v in o.model_dump(exclude_none=True).items())
                       for d, o in e.by_dtype.items()),
             f"- tables: {', '.join(hw.kernel_tables)}"]
    lines += [f"- {n}" for n in (hw.calibration or {}).get("notes", [])]
    lines += [f"- table {t.kernel}{'/' + t.op if t.op else ''} {t.dtype}: {t.provenance.notes}"
              for t in hw.kernel_set.tables if t.provenance.notes]
    return lines


def markdown(run, plot: Path | None) -> str:
    import torch

    o = run.opts
    L = [f"# Validation on held-out models: {', '.join(s.name for s in run.specs)} on {o.device}", "",
         f"- device: {run.device_name}; torch {torch.__version__}"
         + (f"; {run.threads} threads (torch's default unless --threads)" if run.threads else ""),
         f"- models: real widths, random weights, {', '.join(f'{s.name}' for s in run.specs)}; implementation: "
         f"{'transformers LlamaForCausalLM' if o.impl == 'hf' else 'validate/reference.py'}",
         f"- grid: {o.grid_name}; dtypes {', '.join(dict.fromkeys(r.point.dtype for r in run.rows))}; "
         f"wall time {run.wall_s:.0f} s ({run.where_the_time_went()}); {load_line()}",
         *([f"- {run.where_the_passes_went()}"] if run.where_the_passes_went() else []),
         f"- base profile: {run.base.name}; kernel profile: calibrated.yaml beside kernels/ "
         f"(`roofline estimate --hardware {Path(o.out) / 'calibrated.yaml'}`); the kernel profile never "
         "saw these models: its shapes are the other catalog models' widths", ""]
    if run.kernel is not None:
        L += ["## Kernel profile", "", *_profile_lines(run.kernel), ""]
    if run.errors:
        L += ["## Held-out error: base profile vs kernel profile (nothing fitted to these passes)", "",
              render.markdown_table(ERROR_HEADERS, error_lines(run.errors)), "",
              *[f"- {x}" for x in done_when(run) + drift_lines(run)], ""]
    if run.kernel is not None and run.kernel.bands is not None:
        c = run.band_coverage
        L += ["## Prediction bands (written into calibrated.yaml)", "",
              "`estimate --hardware calibrated.yaml` brackets each time and rate with these: the 10% and 90% "
              "quantiles of log(predicted / measured) over the held-out points above, grouped and with the "
              "fallback of `roofline accuracy` (README, \"Prediction bands\").", "",
              (f"- coverage of the 80% band, each model's points against bands built without that model: "
               f"{fmt_pct(c.get('coverage'))} of {c.get('banded', 0)} points; median half-width "
               f"{fmt_pct(c.get('half_width'))}") if c.get("banded") else
              f"- coverage of the 80% band unchecked: without any one model, fewer than the {MIN_ROWS} points a "
              "band needs are left", "",
              render.markdown_table(["group", "rows", "models", "measured / predicted time"],
                                    [[g, b.rows, b.sources, "{:.2f}-{:.2f}".format(*map(float, b.interval(1.0, False)))]
                                     for g, b in run.kernel.bands.groups.items()]), ""]
    if run.counts:
        L += ["## Count checks (FlopCounterMode and cache nbytes vs the calculator)", "", "```"]
        for m, c in run.counts:
            L += [f"{m} {c.dtype}: {'ok' if c.ok else 'MISMATCH'}", *c.lines()]
        L += ["```", ""]
    if plot:
        L += [f"![predicted vs measured]({plot.name})", ""]
    L += ["## Every grid point", "",
          render.markdown_table(["model", "dtype", "phase", "B", "T/S", "measured ms", "predicted base ms", "predicted kernels ms",
                     "error base", "error kernels", "flags"],
                    [[r.model, r.point.dtype, r.point.phase, r.point.batch,
                      f"{r.point.size} +{r.point.chunk}@{r.point.cached}" if r.point.phase == "mixed" else r.point.size,
                      _ms(r.measured_s) if r.status == "ok" else r.status, _ms(r.predicted_default_s),
                      _ms(r.predicted_calibrated_s), _err(r.predicted_default_s, r.measured_s),
                      _err(r.predicted_calibrated_s, r.measured_s), r.flags] for r in run.rows]), ""]
    if run.probes is not None:
        L += ["## Device probes", "", "```", *run.probes.lines(), "```", ""]
    if run.notes or any(r.flags for r in run.rows):
        L += ["## Notes", ""] + [f"- {n}" for n in run.notes]
        if any(r.flags for r in run.rows):
            from .timing import ADVICE

            L.append(f"- {sum(bool(r.flags) for r in run.rows)} points flagged; {ADVICE}")
    return "\n".join(L) + "\n"


def write_all(run) -> list[Path]:
    """counts.json, scatter.png, report.md into the run's output folder (calibrated.yaml and the CSV exist)."""
    from calc.core.files import atomic_write as write_atomic

    out = Path(run.opts.out)
    written = [write_atomic(out / "counts.json", counts_json(run))]
    plot = scatter(run, out / "scatter.png")
    if plot:
        written.append(plot)
    written.append(write_atomic(out / "report.md", markdown(run, plot)))
    return written
