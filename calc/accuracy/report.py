"""reports/accuracy/: the figures, the fitted parameters, every row, a plot."""

from __future__ import annotations

import csv
import math
import tempfile
from pathlib import Path

import numpy as np

from calc.accuracy import kvlogs, underload
from calc.accuracy.band_report import done_when as band_done_when
from calc.accuracy.band_report import make_bands, write_bands_file
from calc.accuracy.band_report import section as band_section
from calc.accuracy.fit import FIT_FILE
from calc.accuracy.harness import MODELS, PREVIOUS, PUBLISHED, Run, run
from calc.accuracy.loadrows import UNDER_LOAD, level, open_loop_in_flight, runs
from calc.accuracy.summary import GROUPINGS, done_when, figures, grouped_table, overall_table
from calc.core import text as render
from calc.core.files import atomic_write, check_writable, out_folder
from calc.core.progress import Progress, silent
from calc.spec.bands import BANDS_FILE
from calc.spec.engine import engines

MODEL_PATHS = ("calc/cost", "calc/serving", "calc/spec", "calc/data/engines.yaml", "hardware_profiles", "model_configs")
LOAD_PREDICTIONS = "under_load_predictions.csv"  # the load rows' held-out predictions, beside predictions.csv
WHICH = ("ideal", "previous", "presets", "current")  # every prediction predictions.csv keeps


def _pct(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{100 * x:+.0f}%"


def rows_in_file(path: Path = PUBLISHED) -> int:
    with open(path, newline="") as fh:
        return sum(1 for _ in csv.DictReader(fh))


def _plot(r: Run, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4.5), dpi=100)
    ax = fig.add_subplot()
    for (which, label), color in zip(MODELS, ("#999999", "#1f77b4", "#2ca02c"), strict=True):
        e = np.sort(np.abs([x.error(which) for x in r.results if math.isfinite(x.error(which))]))
        ax.step(100 * e, np.arange(1, e.size + 1) / e.size, where="post", color=color,
                label=f"{label}: median {100 * np.median(e):.0f}%")
    ax.axvline(25, color="k", ls=":", lw=1)
    ax.set_xscale("symlog", linthresh=10)
    ax.set_xlabel("absolute error of the prediction (%)")
    ax.set_ylabel("share of published rows")
    ax.set_title(f"Error on {len(r.results)} published measurements")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=9)
    fig.tight_layout()
    atomic_write(path, lambda fh: fig.savefig(fh, format="png"))


def _previous_note(r: Run) -> str:
    n = sum(1 for x in r.results if math.isfinite(x.previous))
    if not n:
        return "no record: `roofline accuracy --record-previous` writes one"
    with open(PREVIOUS, newline="") as fh:
        commits = sorted({row["commit"] for row in csv.DictReader(fh)})
    return (f"recorded in [{PREVIOUS.name}]({PREVIOUS.name}) with the model as of commit {', '.join(commits)}, "
            f"{n} of {len(r.results)} rows")


def _params_table(r: Run) -> str:
    fields = list(r.spec.fitted)
    rows = []
    for name, p in r.fitted_all.items():
        if p.ideal:
            continue
        cells = [name]
        for f in fields:
            spread = [getattr(fold[name], f) for fold in r.folds.values()]
            rng = f" ({min(spread):.3g}-{max(spread):.3g})" if spread and min(spread) != max(spread) else ""
            cells.append(f"{getattr(p, f):.3g}{rng}")
        rows.append(cells)
    return render.table(rows, ["preset", *fields])


def record_previous(path: Path = PREVIOUS) -> str:
    """Record the presets as committed now as the "previous presets" column: their
    prediction of every row, with the commit that made it. Run before the presets change."""
    import subprocess

    from calc.accuracy.predict import predict
    from calc.accuracy.rows import load_rows

    try:
        # the last commit that changed the model (not the harness): stable across rebases
        commit = subprocess.run(["git", "log", "-1", "--format=%h", "--", *MODEL_PATHS], capture_output=True,
                                text=True, cwd=PUBLISHED.parents[2], check=True).stdout.strip() or "unknown"
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    presets = engines()
    rows = load_rows()[0]
    atomic_write(path, render.to_csv([{"id": r.id, "predicted": predict(r, presets[r.preset]), "commit": commit}
                                      for r in rows]))
    return f"recorded the presets' predictions of {len(rows)} rows (commit {commit}) in {path}"


def _under_load(r: Run, out: Path):
    """The load rows scored with each publisher's held-out presets (calc.accuracy.underload);
    their predictions written to out/under_load_predictions.csv (a temporary folder when the
    command writes no folder), laid out as predictions.csv (``current``: the held-out prediction),
    so that the bands read them too."""
    lr = underload.score(lambda publisher: underload.held_out(publisher, r.folds, r.fitted_all))
    flight = {name: rs[0].in_flight or open_loop_in_flight(rs) for name, rs in runs([x.row for x in lr.results]).items()}
    atomic_write(out / LOAD_PREDICTIONS, render.to_csv([
        {"id": x.row.id, "run": x.row.run, "publisher": x.row.publisher, "engine": x.row.engine, "preset": x.preset,
         "model": x.row.model, "gpu": x.row.hardware, "tp": x.row.tp, "weight_dtype": x.row.weight_dtype,
         "compute_dtype": x.row.compute_dtype or "", "load": x.row.load, "in_flight": flight[x.row.run] or "",
         "level": level(x.row), "metric": x.row.metric, "statistic": x.row.statistic, "measured": x.row.value,
         "current": x.predicted, "current_error": x.error} for x in lr.results]))
    return lr


def write_accuracy_report(out: Path | None, fit: bool = True, progress: Progress = silent,
                          bands_out: Path | None = BANDS_FILE) -> str:
    """Predict every row; with ``out``, write out/README.md, out/predictions.csv, out/under_load_predictions.csv, out/errors.png
    (None: none of them); and (held out, so only with ``fit``) the prediction bands to
    ``bands_out``; return the figures."""
    if out is not None:
        out = out_folder(out, parents=True)  # before the minute of fitting: a bad --out fails at once
    if fit and bands_out is not None:
        check_writable(Path(bands_out), "--bands-out")
    r = run(fit_rows=fit, progress=progress)
    with tempfile.TemporaryDirectory() as scratch:
        lr = _under_load(r, out if out is not None else Path(scratch))
        bands = make_bands(r.results, ((out if out is not None else Path(scratch)) / LOAD_PREDICTIONS,)) \
            if fit else None
    if bands is not None and bands_out is not None:
        write_bands_file(bands, bands_out)
    n_file = rows_in_file()
    wrote = f", {bands_out}" if bands is not None and bands_out is not None else ""
    if out is None:
        return (f"{_summary(r, n_file, fit, bands, lr)}\n\nnothing written to a folder: --out DIR writes README.md, "
                f"predictions.csv and errors.png (the committed copy: --out reports/accuracy){wrote and '; wrote ' + wrote[2:]}")
    pred_rows = [{"id": x.row.id, "publisher": x.row.publisher, "engine": x.row.engine, "preset": x.row.preset,
                  "model": x.row.model, "gpu": x.row.hardware, "tp": x.row.tp, "pp": x.row.pp,
                  "batch": x.row.batch, "concurrency": x.row.concurrency, "input_len": x.row.prompt_len,
                  "output_len": x.row.output_len, "metric": x.row.metric, "measured": x.row.value,
                  **{w: getattr(x, w) for w in WHICH}, **{f"{w}_error": x.error(w) for w in WHICH}}
                 for x in r.results]
    atomic_write(out / "predictions.csv", render.to_csv(pred_rows))
    _plot(r, out / "errors.png")
    shipped = underload.score(lambda publisher: engines()) if fit else None  # as `roofline compare` runs them
    groups = "\n\n".join(f"### By {title}\n\n```\n{grouped_table(r.results, title, key)}\n```"
                         for title, key in GROUPINGS)
    detail = render.table(
        [[x.row.id, x.row.publisher, x.row.metric, f"{x.row.value:.4g}",
          *[c for w, _ in MODELS for c in (f"{getattr(x, w):.4g}", _pct(x.error(w)))]] for x in r.results],
        ["row", "publisher", "metric", "measured", "ideal", "err", "previous", "err", "current", "err"],
        align="llllrrrrrr")
    fit_note = "" if fit else "\n**Written with --no-fit: the current model is the presets as committed.**\n"
    text = f"""# How accurate is roofline?

Every row of [published.csv](published.csv) ({n_file} measurements from public sources,
{len({x.row.publisher for x in r.results})} publishers; [SOURCES.md](SOURCES.md)) predicted by three models side by
side: the **ideal roofline** (data-sheet peaks, no efficiencies or overheads); the **previous
presets**, the engine presets as they were before their kernel-level fields came from kernel
measurements ({_previous_note(r)}; they were fitted on a hash half of these rows, so this column is
*not* held out); and the **current model, leave-one-source-out** (LOSO): whatever the catalog
profiles and `calc/data/engines.yaml` hold now, with the preset fields listed in
`calc/data/accuracy_fit.yaml` refitted, within stated physical bounds and from stated priors, on
every other publisher's rows, then scored on the publisher left out. No LOSO fit sees the rows it
is scored on; no parameter is per row. One committed kernel constant is fitted on published rows
outside the LOSO folds: llama.cpp MMQ's FLOPs per INT32 op, on three GeForce rows of the llama.cpp
#15013 scoreboard (`reports/kernels/llamacpp_mmq.py`), so that publisher's rows are not wholly held
out from it. The presets as committed now, without refit, are in the first
table and in `predictions.csv`. Regenerate with `roofline accuracy --out reports/accuracy`.
{fit_note}
## Targets (issue 13), as measured

```
{chr(10).join(done_when(r.results, n_file, fit))}
```

The previous presets were fitted on a hash half of these very rows, so their figures flatter
them; the LOSO column is the one measured on data its parameters never saw. Bias is the median
predicted / measured *time* (measured / predicted for a rate): above 1 the model is pessimistic. TTFT covers `ttft_s` and `prefill_tokens_per_s` rows, decode covers
`tpot_s` and `decode_tokens_per_s`.

![error distribution](errors.png)

## The three models (absolute error over every predicted row)

```
{overall_table(r.results)}
```

{groups}

{band_section(bands) if bands else "## Prediction bands" + chr(10) + chr(10) + "Not built: --no-fit predictions are not held out."}

## The fitted parameters

Fitted on every row (what to adopt into `calc/data/engines.yaml`); in brackets the range over
the LOSO folds. Fields, scopes, bounds and priors: [`{FIT_FILE.name}`](../../calc/data/{FIT_FILE.name}).

```
{_params_table(r)}
```

## How a row is predicted

Lengths and batch from the row; `decode_tokens_per_s` = 1 / TPOT, `prefill_tokens_per_s` =
B T / TTFT, fixed-batch throughput = B G / e2e, and concurrency or max-load throughput from the
continuous-batching steady state (`calc.serving.replica.capacity`, KV-limited, up to 2048 running requests,
the KV cache sized and filled as the row's engine does: its memory share, of what, and whether a
request reserves its final context), times data-parallel replicas; `output_tokens_per_s_per_gpu`
divides by the row's GPUs. A row's KV dtype is the one it states, else fp8 for checkpoints
quantised to fp8 or fp4 after training (ModelOpt quantises their KV cache to fp8 by default).
Client-side TTFT and e2e add the preset's per-request serving time. llama.cpp's GGUF quantisation
is counted as 32-weight groups; rows split over GPUs without a TP degree are llama.cpp layer splits
(pipeline). NVFP4 rows (Blackwell, fp4 activations) run the fp4 GEMM class (block-scaled W4A4 at
the fp4 peak, the curve fitted to aiconfigurator's nvfp4 GEMM tables); weight-only int8/int4 rows
pay their engine's dequantisation (`weight_only` in `calc/data/engines.yaml`: measured kernels, or
llama.cpp's MMQ at its integer rate and, for builds before b3216 by the row's `engine_version`,
its dequantised copy). "By
mechanism" groups rows by the kernels they test: llama.cpp's own, fp4 matmuls, weight-only
quantised matmuls, and the rest (16-bit and fp8).

## Rows not predicted

{chr(10).join(f"- `{rid}`: {why}" for rid, why in r.skipped) or "- none"}

{underload.section(lr, rows_in_file(UNDER_LOAD), fit, shipped)}

{kvlogs.section()}

## Every row

```
{detail}
```
"""
    atomic_write(out / "README.md", text)
    return (f"{_summary(r, n_file, fit, bands, lr)}\n\nwrote {out / 'README.md'}, predictions.csv, "
            f"{LOAD_PREDICTIONS}, errors.png{wrote}")


def _summary(r: Run, n_file: int, fit: bool, bands=None, lr=None) -> str:
    """The figures, the bands' lines and the parameters, saying how the latter differ from `roofline engines`."""
    band_lines = "\n".join(band_done_when(bands)) + "\n\n" if bands else ""
    why = ("parameters fitted on all rows (a proposal: `roofline engines` shows the presets committed in "
           "calc/data/engines.yaml, which every other command uses, until these are adopted there):"
           if fit else "parameters: the presets as committed (`roofline engines`), not refitted (--no-fit):")
    return (f"{len(r.results)} rows predicted ({len(r.skipped)} skipped) from {PUBLISHED.name}\n\n"
            f"{figures(r.results, n_file, fit)}\n\n{band_lines}{why}\n{_params_table(r)}"
            + ("" if lr is None else
               f"\n\nserving under load ({len(lr.results)} rows, held out by source, {lr.seconds:.1f} s, "
               f"{lr.cpu_s:.1f} s CPU):\n{chr(10).join(underload.summary_lines(lr.results) + underload.target_lines(lr.results))}"))
