"""plan and accuracy: capacity plans for workloads, and the published-accuracy report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from calc.cli.base import Format, FormatOpt, command
from calc.cli.options import QuietOpt
from calc.core import text as render


@command("plan")
def plan_cmd(
    workload: Annotated[Path, typer.Argument(help="Workload YAML: arrival rate or concurrency, length distributions or a CSV trace, SLOs (seconds), candidate hardware, max GPUs.")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Folder to write report.md, report.html (self-contained), plan.json and the charts into.")] = None,
    requests: Annotated[int | None, typer.Option("--requests", min=10, help="Requests simulated per configuration (default: the workload's `requests`).")] = None,
    table: Annotated[Path | None, typer.Option("--table", help="Write the ranked configurations as .csv, .parquet or .jsonl (JSON lines), by suffix; columns carry units.")] = None,
    fmt: FormatOpt = Format.table,
    quiet: QuietOpt = False,
) -> None:
    """Capacity plan: the cheapest hardware x TP x replicas x max batch that meets the workload's SLOs at its load.

    Closed-form steady state, then a discrete-event simulation of continuous batching
    (chunked prefill, KV pages, preemption) per configuration. Prices in USD per GPU-hour.
    No configuration meeting the SLOs is an answer (exit 0: the closest and why).
    """
    import time

    from calc.core.progress import bar
    from calc.render.frames import check_table_path, flat_record, write_frame
    from calc.render.plan import plan_record, plan_text, trial_record, write_report
    from calc.serving.plan import plan
    from calc.spec.workload import load_workload

    t0 = time.perf_counter()
    if table is not None:
        check_table_path(table, "--table")
    wl = load_workload(workload, requests)
    with bar("planning", quiet) as progress:
        result = plan(wl, progress=progress)
    if fmt is Format.json:
        typer.echo(render.to_json(plan_record(result)))
    elif fmt is Format.csv:
        typer.echo(render.to_csv(flat_record(trial_record(t)) for t in result.ranked), nl=False)
    else:
        typer.echo(plan_text(result))
    if table is not None:
        import pandas as pd

        shown = result.ranked or [t for t in (result.closest,) if t is not None]  # none meets: the closest
        write_frame(pd.DataFrame([flat_record(trial_record(t)) for t in shown]), table, "--table")
        typer.echo(f"wrote {table} ({len(shown)} configurations)", err=True)
    if out is not None:
        files = write_report(result, out)
        typer.echo(f"wrote {', '.join(str(f) for f in files if f.suffix != '.png')} and "
                   f"{sum(f.suffix == '.png' for f in files)} charts", err=True)
    typer.echo(f"planned in {time.perf_counter() - t0:.1f} s ({result.simulations} simulations of "
               f"{result.requests:,} requests)", err=True)


@command("accuracy")
def accuracy_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for README.md, predictions.csv and errors.png.")] = Path("reports/accuracy"),
    fit: Annotated[bool, typer.Option("--fit/--no-fit", help="Refit the fitted preset fields leave-one-source-out (a minute or two); --no-fit: presets as committed.")] = True,
    bands_out: Annotated[Path | None, typer.Option("--bands-out", help="Where the prediction bands go (default: calc/data/bands.yaml, the ones estimate, sweep, compare and plan read).")] = None,
    record_previous: Annotated[bool, typer.Option("--record-previous", help="Only record the committed presets' predictions as the 'previous presets' column (reports/accuracy/previous_presets.csv); run before the presets change.")] = False,
    quiet: QuietOpt = False,
) -> None:
    """Predict every published measurement (reports/accuracy/published.csv): ideal roofline, previous presets, current model held out by source; errors in %."""
    from calc.accuracy import report
    from calc.core.progress import bar
    from calc.spec.bands import BANDS_FILE

    if record_previous:
        typer.echo(report.record_previous())
        return
    with bar("accuracy", quiet) as progress:
        summary = report.write_accuracy_report(Path(out), fit=fit, progress=progress, bands_out=bands_out or BANDS_FILE)
    typer.echo(summary)
