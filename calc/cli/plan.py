"""plan and accuracy: capacity plans for workloads, and the published-accuracy report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from calc.cli.base import Format, FormatOpt, command, one_line
from calc.cli.options import BandsOpt, QuietOpt
from calc.core import text as render


@command("plan")
def plan_cmd(
    workload: Annotated[Path | None, typer.Argument(help="Workload YAML: arrival rate or concurrency, length distributions or a CSV trace, SLOs (seconds), candidate hardware, max GPUs (keys: reports/workloads/README.md). With --init: the file to write (default workload.yaml).")] = None,
    init: Annotated[bool, typer.Option("--init", help="Write a commented workload template to WORKLOAD (default workload.yaml) that plans as it is, and stop.")] = False,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Folder to write report.md, report.html (self-contained), plan.json and the charts into.")] = None,
    requests: Annotated[int | None, typer.Option("--requests", min=10, help="Requests simulated per configuration (default: the workload's `requests`).")] = None,
    price: Annotated[list[str] | None, typer.Option("--price", help="USD per GPU-hour for one hardware, NAME=USD (repeat for more); over the workload's prices and the catalog's.")] = None,
    table: Annotated[Path | None, typer.Option("--table", help="Write the ranked configurations as .csv, .parquet or .jsonl (JSON lines), by suffix; columns carry units.")] = None,
    robust: Annotated[bool, typer.Option("--robust", help="Rank by the pessimistic edge of the prediction bands: search SLOs tightened so every configuration listed meets the real ones at its edge.")] = False,
    bands: BandsOpt = True,
    fmt: FormatOpt = Format.table,
    quiet: QuietOpt = False,
) -> None:
    """Capacity plan: the cheapest hardware x TP x replicas x max batch that meets the workload's SLOs at its load.

    Closed-form steady state, then a discrete-event simulation of continuous batching
    (chunked prefill, KV pages, preemption) per configuration. Prices in USD per GPU-hour.
    No configuration meeting the SLOs is an answer (exit 0: the closest and why). Each configuration's
    SLOs are also checked at the pessimistic edge of its 80% prediction band; fragile ones are named.
    """
    if init:
        from calc.render.workload_doc import write_template

        path = write_template(workload or Path("workload.yaml"))
        typer.echo(f"wrote {path}; plan it with: roofline plan {path} --out plan/")
        return
    if workload is None:
        from calc.core.errors import SpecError

        raise SpecError("WORKLOAD", None, "missing argument (a workload YAML; `roofline plan --init` writes one)")
    import time

    from calc.core.progress import bar
    from calc.render.frames import check_table_path, flat_record, write_frame
    from calc.render.plan import plan_record, plan_text, write_report
    from calc.serving.planner.plan import plan
    from calc.spec.workload import load_workload

    t0 = time.perf_counter()
    if table is not None:
        check_table_path(table, "--table")
    wl = load_workload(workload, requests, prices=_prices(price or []))
    pb = plan_bands(wl, robust) if bands or robust else None
    searched = wl
    if pb is not None and robust:
        searched = _tightened(wl, pb.searched)
    with bar("planning", quiet) as progress:
        result = plan(searched, progress=progress)
    if fmt is Format.json:
        typer.echo(render.to_json(plan_record(result, pb)))
    elif fmt is Format.csv:
        typer.echo(render.to_csv(flat_record(_row(t, pb)) for t in result.ranked), nl=False)
    else:
        typer.echo(plan_text(result, pb))
    if table is not None:
        import pandas as pd

        shown = result.ranked or [t for t in (result.closest,) if t is not None]  # none meets: the closest
        write_frame(pd.DataFrame([flat_record(_row(t, pb)) for t in shown]), table, "--table")
        typer.echo(one_line(f"wrote {table} ({len(shown)} configurations)"), err=True)
    if out is not None:
        files = write_report(result, out, pb)
        typer.echo(one_line(f"wrote {', '.join(str(f) for f in files if f.suffix != '.png')} and "
                            f"{sum(f.suffix == '.png' for f in files)} charts"), err=True)
    typer.echo(f"planned in {time.perf_counter() - t0:.1f} s ({result.simulations} simulations of "
               f"{result.requests:,} requests)", err=True)


def _row(t, pb) -> dict:
    """A configuration's record, with its edge (edge_ttft_p99_s, ..., edge_meets_slos) where bands apply."""
    from calc.render.plan import trial_record
    from calc.render.plan_bands import edge_record

    rec = trial_record(t)
    if pb is not None:
        rec["edge"] = edge_record(pb, t)
    return rec


def plan_bands(wl, robust: bool):
    """The plan's bands (calc.serving.planner.bands.PlanBands) against the workload's SLOs (the command's and the
    web page's): the profiles' own where every candidate has them, else the published ones; with
    ``robust`` the targets to search."""
    from calc.core.errors import SpecError
    from calc.cost.dtypes import Dtypes
    from calc.serving.planner.bands import PlanBands, robust_targets
    from calc.spec.bands import bands_for

    found = [bands_for(h) for h in wl.hardware]
    tables = {id(t): (t, why) for t, why in found if t is not None}
    if len(tables) != 1 or any(t is None for t, _ in found):
        why = "; ".join(sorted({w for t, w in found if t is None})) or "the candidates carry different bands"
        if robust:
            raise SpecError("--robust", None, f"no single band table for these candidates: {why}")
        return None
    (table, source), = tables.values()
    targets = wl.spec.slo.targets()
    d = wl.spec.dtype_choices[0]  # the robust search's floors: at the first dtypes listed
    dt = Dtypes.resolve(wl.model, d.weight, d.kv, d.compute)
    searched = robust_targets(targets, table, wl.hardware, dt, wl.model) if robust else {}
    return PlanBands(table, source, targets, robust, searched)


def _tightened(wl, targets: dict[str, float]):
    """The workload with its SLOs replaced by ``targets`` (the --robust search)."""
    from dataclasses import replace

    slo = wl.spec.slo.model_copy(update={f"{k}_s": v for k, v in targets.items()})
    return replace(wl, spec=wl.spec.model_copy(update={"slo": slo}))


def _prices(values: list[str]) -> dict[str, float]:
    """--price NAME=USD values -> {name: USD per GPU-hour} (the workload checks each name and bound)."""
    from calc.core.errors import SpecError

    out = {}
    for v in values:
        name, sep, usd = v.partition("=")
        try:
            out[name.strip()] = float(usd)
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise SpecError("--price", None, f"expected NAME=USD per GPU-hour (h100-sxm=2.50), got {v!r}")
    return out


@command("accuracy")
def accuracy_cmd(
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Folder to write README.md, predictions.csv, under_load_predictions.csv and errors.png into (default: write nothing, print the figures).")] = None,
    fit: Annotated[bool, typer.Option("--fit/--no-fit", help="Refit the fitted preset fields leave-one-source-out (a minute or two); --no-fit: presets as committed.")] = True,
    bands_out: Annotated[Path | None, typer.Option("--bands-out", help="Where the prediction bands go (default: calc/data/bands.yaml, the ones estimate, sweep, compare and plan read).")] = None,
    record_previous: Annotated[bool, typer.Option("--record-previous", help="Only record the committed presets' predictions as the 'previous presets' column (reports/accuracy/previous_presets.csv); run before the presets change.")] = False,
    quiet: QuietOpt = False,
) -> None:
    """Predict every published measurement (reports/accuracy/published.csv): ideal roofline, previous presets, current model held out by source; then the runs under load (under_load.csv) through the serving simulator, held out by source; errors in %."""
    from calc.accuracy import report
    from calc.core.progress import bar
    from calc.spec.bands import BANDS_FILE

    if record_previous:
        typer.echo(report.record_previous())
        return
    with bar("accuracy", quiet) as progress:
        summary = report.write_accuracy_report(out, fit=fit, progress=progress, bands_out=bands_out or BANDS_FILE)
    typer.echo(summary)
