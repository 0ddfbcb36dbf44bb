"""sweep and plot: grids of scenarios to files, and charts drawn from them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from calc.cli.base import command, one_line
from calc.cli.options import (
    DEFAULT_SCENARIO,
    BandsOpt,
    BatchOpt,
    HardwareOpt,
    KVDtypeOpt,
    ModelOpt,
    OutputOpt,
    PromptOpt,
    QuietOpt,
    Scenario,
    SpecAcceptOpt,
    SpecDraftOpt,
    SpecHeadsOpt,
    SpecKOpt,
    WeightDtypeOpt,
    spec_config,
    with_scenario,
)
from calc.cli.values import parse_values, split_names
from calc.core.errors import SpecError, TooLarge
from calc.spec.catalog import load_model


@command("sweep")
@with_scenario
def sweep_cmd(
    model: ModelOpt = "llama-3.1-8b",
    hardware: HardwareOpt = "h100-sxm",
    batch: BatchOpt = "1",
    prompt_len: PromptOpt = "512",
    output_len: OutputOpt = "128",
    context: Annotated[str | None, typer.Option("--context", help="Decode contexts to sweep TPOT over (list/range): sets the prompt length, 2 output tokens.")] = None,
    scenario: Scenario = DEFAULT_SCENARIO,
    spec_draft: SpecDraftOpt = None,
    spec_heads: SpecHeadsOpt = None,
    spec_k: SpecKOpt = None,
    spec_accept: SpecAcceptOpt = None,
    bands: BandsOpt = True,
    columns: Annotated[str | None, typer.Option("--columns", help="Keep only these result columns (comma-separated) besides the inputs.")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write .csv, .parquet or .jsonl (JSON lines), by suffix; default: CSV on stdout.")] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Run grids of more than a million scenarios (up to 100 million).")] = False,
    quiet: QuietOpt = False,
) -> None:
    """A grid over models, hardware, dtypes, TP/PP, batch and lengths -> CSV, Parquet or JSON lines, one row per scenario.

    Columns carry units: _s seconds, _bytes, _flops, _tokens, _per_s, _usd; each time and rate has its
    band (ttft_band_lo_s, ttft_band_hi_s, ...: where 80% of held-out measurements fell). Vectorised: a
    million scenarios take seconds (writing a CSV that size takes longer than computing it).
    """
    from calc.core.progress import bar
    from calc.render.frames import check_table_path, print_csv, write_frame

    if out is not None:
        check_table_path(out)
    with bar("sweep", quiet) as progress:
        frame = sweep_frame(model, hardware, batch, prompt_len, output_len, context, scenario, spec_draft, spec_heads,
                            spec_k, spec_accept, bands, columns, yes, progress=progress)
    if out is None:
        print_csv(frame)
    else:
        write_frame(frame, out)
        typer.echo(one_line(f"wrote {len(frame):,} scenarios x {frame.shape[1]} columns to {out}"), err=True)


def sweep_frame(model: str = "llama-3.1-8b", hardware: str = "h100-sxm", batch: str = "1", prompt_len: str = "512",
                output_len: str = "128", context: str | None = None, scenario: Scenario = DEFAULT_SCENARIO,
                spec_draft: str | None = None, spec_heads: str | None = None, spec_k: int | None = None,
                spec_accept: float | None = None, bands: bool = True, columns: str | None = None, yes: bool = False, *,
                max_scenarios: int | None = None, progress=None):
    """The frame `sweep` writes, from the options as parsed (the command and the web API both
    call it); ``max_scenarios`` lowers the cap (the web page's), named in the error."""
    from calc import sweep
    from calc.core.progress import silent
    from calc.cost.sweep import MAX_SCENARIOS, MAX_SCENARIOS_YES
    from calc.spec.bands import bands_for

    scenario.check_applies([load_model(m) for m in split_names(model)])
    if context is not None:
        prompt_len, output_len = context, "2"
    cap = MAX_SCENARIOS_YES if yes else MAX_SCENARIOS
    hint = "the most a sweep runs" if yes else "pass --yes to run up to 100,000,000"
    if max_scenarios is not None:
        cap, hint = min(cap, max_scenarios), "the most one request runs"

    def values(text, option):
        return parse_values(text, option, max_count=cap, raise_hint=hint)

    grid = dict(
        model=split_names(model), hardware=split_names(hardware), batch=values(batch, "--batch"),
        prompt_len=values(prompt_len, "--prompt-len" if context is None else "--context"),
        output_len=values(output_len, "--output-len"), weight_dtype=split_names(scenario.weight_dtype),
        kv_dtype=split_names(scenario.kv_dtype), compute_dtype=scenario.compute_dtype, tp=values(scenario.tp, "--tp"),
        pp=values(scenario.pp, "--pp"), attention=scenario.attention, ideal=scenario.ideal, engine=scenario.engine,
        ep=scenario.ep, **scenario.given(), spec=spec_config(spec_draft, spec_heads, spec_k, spec_accept),
        bands=(lambda hw: bands_for(hw)[0]) if bands else None,
        max_scenarios=cap,
    )
    try:
        frame = sweep(**grid, progress=progress or silent)
    except TooLarge as exc:
        raise SpecError(exc.path, exc.field, f"{exc.problem} ({hint})") from None
    if columns:
        keep = split_names(columns)
        unknown = [c for c in keep if c not in frame.columns]
        if unknown:
            raise SpecError("--columns", None, f"unknown column(s) {', '.join(unknown)}; "
                                               f"known: {', '.join(frame.columns)}")
        inputs = ["model", "hardware", "weight_dtype", "kv_dtype", "compute_dtype", "tp", "pp", "gpus", "batch",
                  "prompt_len", "output_len"]
        frame = frame[inputs + [c for c in keep if c not in inputs]]
    return frame


@command("plot")
def plot_cmd(
    kind: Annotated[str, typer.Argument(help="Chart: roofline, ttft, tpot-batch, tpot-context, throughput, kv-memory, breakdown or tp.")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Image to write (required): .png or .svg.")] = None,
    model: ModelOpt = "llama-3.1-8b",
    hardware: HardwareOpt = "h100-sxm",
    batch: Annotated[str | None, BatchOpt.__metadata__[0]] = None,
    prompt_len: Annotated[str | None, PromptOpt.__metadata__[0]] = None,
    output_len: Annotated[str | None, OutputOpt.__metadata__[0]] = None,
    context: Annotated[str | None, typer.Option("--context", "--seq-len", "-s", help="Decode context S in tokens (list/range for tpot-context, kv-memory).")] = None,
    weight_dtype: WeightDtypeOpt = None,
    kv_dtype: KVDtypeOpt = None,
    tp: Annotated[str | None, typer.Option("--tp", help="Tensor-parallel GPUs, a list for the tp chart's x axis (the same option as elsewhere; default per chart).")] = None,
    phase: Annotated[str | None, typer.Option("--phase", help="roofline chart: prefill, decode or both (default).")] = None,
) -> None:
    """Charts as PNG or SVG: the roofline of a model's operators, TTFT vs prompt, TPOT vs batch / context / TP,
    throughput vs TPOT with its Pareto frontier, KV memory (GB = 1e9 bytes) vs context, time breakdown."""
    from calc.plot.charts import check_kind, check_out, make_chart

    check_kind(kind)
    check_out(out)

    def values(text, option):
        return None if text is None else parse_values(text, option)

    make_chart(kind, split_names(model), split_names(hardware), batch=values(batch, "--batch"),
               prompt_len=values(prompt_len, "--prompt-len"), output_len=values(output_len, "--output-len"),
               context=values(context, "--context"), weight_dtype=weight_dtype, kv_dtype=kv_dtype,
               tp=values(tp, "--tp"), phases=None if phase in (None, "both") else (phase,), out=out)
    typer.echo(one_line(f"wrote {out}"), err=True)
