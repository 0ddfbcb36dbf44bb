"""reports/accuracy/: the table of measured vs predicted, the error figures, a plot."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from calc.accuracy.harness import FITTED, PUBLISHED, Result, run, stats
from calc.core import text as render
from calc.core.files import atomic_write

KINDS = (("ideal", "ideal roofline"), ("default", "presets (engines.yaml)"), ("fitted", "refitted now"))


def _pct(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{100 * x:+.0f}%"


def _summary_rows(results: list[Result]) -> list[list[str]]:
    rows = []
    groups = [("all rows", results)]
    groups += [(f"held-out, {m}", [r for r in results if r.row.half == "held-out" and r.row.metric == m])
               for m in sorted({r.row.metric for r in results})]
    for half in ("fit", "held-out"):
        groups.insert(1 if half == "fit" else 2, (f"{half} half", [r for r in results if r.row.half == half]))
    for label, sub in groups:
        cells = [label, str(len(sub))]
        for kind, _ in KINDS:
            s = stats([r.error(kind) for r in sub])
            cells.append(f"{100 * s['median']:.0f}% / {100 * s['p90']:.0f}%" if s["n"] else "-")
        rows.append(cells)
    return rows


def _plot(results: list[Result], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4.5), dpi=100)
    ax = fig.add_subplot()
    held = [r for r in results if r.row.half == "held-out"]
    for (kind, label), color in zip(KINDS, ("#999999", "#1f77b4", "#2ca02c"), strict=True):
        e = np.sort(np.abs([r.error(kind) for r in held if math.isfinite(r.error(kind))]))
        ax.step(100 * e, np.arange(1, e.size + 1) / e.size, where="post", color=color,
                label=f"{label}: median {100 * np.median(e):.0f}%")
    ax.axvline(25, color="k", ls=":", lw=1)
    ax.set_xscale("symlog", linthresh=10)
    ax.set_xlabel("absolute error of the prediction (%)")
    ax.set_ylabel("share of held-out rows")
    ax.set_title(f"Error on the {len(held)} held-out published measurements")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=9)
    fig.tight_layout()
    atomic_write(path, lambda fh: fig.savefig(fh, format="png"))


def write_accuracy_report(out: Path, fit: bool = True) -> str:
    """Predict every row, write out/README.md, out/predictions.csv, out/errors.png; return the summary."""
    results, skipped, fitted = run(fit=fit)
    out.mkdir(parents=True, exist_ok=True)
    pred_rows = [{"id": r.row.id, "half": r.row.half, "engine": r.row.engine, "preset": r.row.preset,
                  "model": r.row.model, "gpu": r.row.hardware, "tp": r.row.tp, "pp": r.row.pp,
                  "batch": r.row.batch, "concurrency": r.row.concurrency, "input_len": r.row.prompt_len,
                  "output_len": r.row.output_len, "metric": r.row.metric, "measured": r.row.value,
                  "ideal": r.ideal, "default": r.default, "fitted": r.fitted,
                  "ideal_error": r.error("ideal"), "default_error": r.error("default"),
                  "fitted_error": r.error("fitted")} for r in results]
    atomic_write(out / "predictions.csv", render.to_csv(pred_rows))
    _plot(results, out / "errors.png")
    summary = render.table(_summary_rows(results), ["rows", "n", *[f"{label}: median / p90" for _, label in KINDS]])
    params = render.table(
        [[name, *[f"{getattr(e, p):.3g}" for p in FITTED]] for name, e in fitted.items() if not e.ideal],
        ["preset", *FITTED])
    detail = render.table(
        [[r.row.id, r.row.half, r.row.metric, f"{r.row.value:.4g}", f"{r.ideal:.4g}", _pct(r.error("ideal")),
          f"{r.default:.4g}", _pct(r.error("default")), f"{r.fitted:.4g}", _pct(r.error("fitted"))]
         for r in results],
        ["row", "half", "metric", "measured", "ideal", "err", "presets", "err", "refit", "err"], align="lllrrrrrrr")
    held = stats([r.error("default") for r in results if r.row.half == "held-out"])
    text = f"""# How accurate is roofline?

Every row of [published.csv](published.csv) ({len(results)} measurements from public sources,
[SOURCES.md](SOURCES.md)) predicted by the calculator, three ways: the **ideal roofline**
(data-sheet peaks, no efficiencies or overheads), the **presets** committed in
`calc/data/engines.yaml` on top of the catalog hardware profiles (what `roofline estimate
--engine NAME` gives), and the presets' kernel-level parameters **refitted now** on the fit
half. Rows are split in half by a hash of their id; the presets were fitted on the fit half
only, so the held-out half measures them on data they never saw. No parameter is per row.

**Held-out median absolute error: {100 * held['median']:.0f}% with the presets (p90
{100 * held['p90']:.0f}%)**, against {100 * stats([r.error('ideal') for r in results if r.row.half == 'held-out'])['median']:.0f}%
for the ideal roofline. Regenerate with `roofline accuracy` (about 30 s).

![error distribution](errors.png)

## Summary (absolute error, median / p90)

```
{summary}
```

## The parameters (refitted on the fit half)

```
{params}
```

`attention`: share of the GEMM efficiency attention kernels reach; `gemm_m_half`: tokens at
which a matmul reaches half its large-M efficiency; `memory_half_mb`: transfer size at which a
kernel reaches half its streaming bandwidth; overheads per kernel and per step; scales multiply
the hardware profile's large-GEMM and streaming efficiencies (only engines with their own
matmul kernels get them); `request_overhead_us` is the serving stack's time per request,
added only to client-side TTFT and e2e (the calculator reports it beside TTFT, never in it).
Each parameter is kept within a physical range during the fit (`calc.accuracy.harness.BOUNDS`).
Copy these into `calc/data/engines.yaml` to adopt a refit.

## How a row is predicted

Lengths and batch from the row; `decode_tokens_per_s` = 1 / TPOT, `prefill_tokens_per_s` =
B T / TTFT, fixed-batch throughput = B G / e2e, and concurrency or max-load throughput from the
continuous-batching steady state (`calc.serving.capacity`, KV-limited, up to 2048 running requests),
times data-parallel replicas. llama.cpp's GGUF quantisation is counted as 32-weight groups;
rows split over GPUs without a TP degree are llama.cpp layer splits (pipeline).

Known gaps, left visible rather than tuned away: llama.cpp on data-center GPUs (A100, H100,
L40S prompt processing) runs far below what the same engine reaches on GeForce cards; two
llama.cpp F16 rows are flagged DOUBTFUL in the data set; vLLM on MI300X is slower than the
roofline with the profile's measured efficiencies; measured TTFTs include serving-stack time
the model does not see.

## Rows not predicted

{chr(10).join(f"- `{rid}`: {why}" for rid, why in skipped) or "- none"}

## Every row

```
{detail}
```
"""
    atomic_write(out / "README.md", text)
    return (f"{len(results)} rows predicted ({len(skipped)} skipped) from {PUBLISHED.name}\n\n{summary}\n\n"
            f"refitted parameters:\n{params}\n\nwrote {out / 'README.md'}, predictions.csv, errors.png")
