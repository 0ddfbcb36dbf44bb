"""compare: a user's own benchmark results against the calculator, and a refit on them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from calc.cli.base import Format, FormatOpt, command, one_line
from calc.cli.options import ComputeDtypeOpt, KVDtypeOpt, WeightDtypeOpt
from calc.cli.values import in_range

ResultsArg = Annotated[list[Path], typer.Argument(
    help="Result files: vllm bench serve --save-result (or benchmark_serving.py) JSON, vllm bench latency "
         "--output-json, sglang.bench_serving JSONL, GuideLLM benchmarks.json, llama-bench -o json|jsonl|csv, "
         "GenAI-Perf profile_export_genai_perf.json|csv, trtllm-bench --report_json, LMDeploy "
         "profile_restful_api / profile_throughput CSV. Conditions a file lacks come from the options or a "
         "sidecar <file stem>.roofline.yaml (model, hardware, tp, pp, ep, gpus, dtypes, lengths, concurrency or request_rate).")]


@command("compare")
def compare_cmd(
    results: ResultsArg,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Catalog name, YAML path or HF config (default: the result's model id where the catalog resolves it).")] = None,
    hardware: Annotated[str | None, typer.Option("--hardware", help="GPU the runs used: catalog name or YAML path (llama-bench names it; the others do not).")] = None,
    tp: Annotated[int | None, typer.Option("--tp", callback=in_range("--tp"), help="Tensor-parallel GPUs of the server (default 1).")] = None,
    ep: Annotated[int | None, typer.Option("--ep", callback=in_range("--ep"), help="Expert-parallel GPUs of an MoE model's layers, of the TP ones (default 1: experts split TP ways).")] = None,
    pp: Annotated[int | None, typer.Option("--pp", callback=in_range("--pp"), help="Pipeline stages of the server (default 1): PP engines, one micro-batch each in flight, the load split between them.")] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", callback=in_range("--gpus"), help="GPUs behind the endpoint (default TP x PP): gpus / (TP x PP) replicas, the load split evenly between them.")] = None,
    weight_dtype: WeightDtypeOpt = None,
    kv_dtype: KVDtypeOpt = None,
    compute_dtype: ComputeDtypeOpt = None,
    engine: Annotated[str | None, typer.Option("--engine", help="Preset name, or a preset YAML written by --fit (default: by format: vllm, sglang, llama.cpp; GuideLLM: default).")] = None,
    fmt: FormatOpt = Format.table,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Folder for README.md, report.html, compare.csv, compare.json and compare.png (predicted vs measured, TTFT / TPOT / e2e / throughput apart).")] = None,
    fit: Annotated[bool, typer.Option("--fit", help="Refit each engine preset's overheads on these runs, held out by run, and write the refitted presets.")] = False,
    fit_out: Annotated[Path | None, typer.Option("--fit-out", help="Preset YAML --fit writes (default: OUT/preset.yaml, else ./roofline-fit.yaml).")] = None,
    engine_arg: Annotated[list[str] | None, typer.Option("--engine-arg", help="An engine argument the server ran with, under the engine's own name, KEY=VALUE (repeatable): gpu_memory_utilization=0.5, max_num_batched_tokens=2048 (vLLM); mem_fraction_static, chunked_prefill_size (SGLang); ... Overrides the sidecar's engine_args.")] = None,
    engine_version: Annotated[str | None, typer.Option("--engine-version", help="The engine's version the runs used (0.6.3, 0.1.0a1): its scheduler as that version had it, where the preset states one (engines.yaml by_version). Overrides the sidecar's engine_version.")] = None,
    cached_requests: Annotated[int | None, typer.Option("--cached-requests", callback=in_range("--cached-requests"), help="A burst or open-loop run whose first N prompts the server had in its prefix cache (an earlier run of the same prompts: vLLM's random dataset draws the same prompts for the same --seed); each computes only its last prompt token. Overrides the sidecar's cached_requests.")] = None,
) -> None:
    """Measured | predicted | error per metric (TTFT, TPOT, ITL, e2e: mean/p50/p99; tokens/s) for each run.

    Fixed-concurrency runs go through the continuous-batching steady state (throughput)
    and the simulator (latencies), request-rate runs through the simulator at the run's
    arrival process and lengths, llama-bench rows through prefill / decode directly.
    Error = predicted / measured - 1. A file that cannot be read or lacks lengths, model
    or GPU is one line on stderr and exit status 2; the other files are still compared.
    """
    from calc.accuracy.benchmarks import LABELS
    from calc.accuracy.compare import compare_files, load_preset
    from calc.accuracy.scenario import Conditions
    from calc.core import text as render
    from calc.core.errors import SpecError
    from calc.core.files import check_writable, out_folder
    from calc.render import compare as view
    from calc.spec.catalog import load_hardware, load_model
    from calc.spec.versions import version_problem

    if model is not None:
        load_model(model)
    if hardware is not None:
        load_hardware(hardware)
    if engine is not None:
        load_preset(engine)
    if out is not None:  # a file in the way is refused before any work, not after it
        out_folder(out, "--out", parents=True, create=False)
    if fit and fit_out is not None:  # so is a --fit-out that cannot be written (a missing folder, a device)
        check_writable(fit_out, "--fit-out")
    if engine_version is not None and (problem := version_problem(engine_version)):
        raise SpecError("--engine-version", None, problem)
    options = Conditions(model=model, hardware=hardware, engine=engine, tp=tp, pp=pp, ep=ep, gpus=gpus,
                         weight_dtype=weight_dtype, kv_dtype=kv_dtype, compute_dtype=compute_dtype,
                         engine_args=_engine_args(engine_arg), engine_version=engine_version,
                         cached_requests=cached_requests)
    runs, failures, presets = compare_files(results, options)
    for _, message in failures:
        typer.echo(f"roofline: error: {message}", err=True)
    refits, fit_text = [], None
    if fit and runs:
        refits, fit_text = _refit(runs, presets, out, fit_out)
    if fmt is Format.json:
        typer.echo(render.to_json(view.json_record(runs, failures, view.fit_records(refits) if refits else None)))
    elif fmt is Format.csv:
        typer.echo(render.to_csv(view.records(runs)), nl=False)
    else:
        typer.echo(view.table_text(runs, LABELS, failures))
        if fit_text:
            typer.echo("\nrefit, error on held-out runs (median |error| over their metrics):\n" + fit_text)
    if out is not None and runs:
        files = view.write_report(runs, LABELS, failures, out, fit_text)
        typer.echo(one_line(f"wrote {', '.join(str(f) for f in files)}"), err=True)
    if failures:
        raise typer.Exit(2)


def _engine_args(pairs: list[str] | None) -> dict | None:
    """--engine-arg KEY=VALUE pairs as a mapping (calc.spec.scheduler.parse_engine_args)."""
    from calc.spec.scheduler import parse_engine_args

    return parse_engine_args(pairs, "--engine-arg") if pairs else None


def _refit(runs, presets, out, fit_out):
    from calc.accuracy.refit import preset_yaml, refit_groups
    from calc.core.files import atomic_write, out_folder
    from calc.render.compare import fit_table

    refits, skipped = refit_groups(runs, presets)
    for line in skipped:  # a note, not an error: the other presets are refitted
        typer.echo(one_line(f"roofline: note: {line}"), err=True)
    if not refits:
        return [], None
    try:
        from importlib.metadata import version

        ours = version("roofline")
    except Exception:  # noqa: BLE001 (not installed: a source checkout)
        ours = "unknown version"
    tools = [f"{r.scenario.run.format} {r.scenario.run.tool_version or '(version not recorded in the file)'}"
             for r in runs]
    if fit_out is None:
        fit_out = (Path(out) / "preset.yaml") if out is not None else Path("roofline-fit.yaml")
        if out is not None:
            out_folder(out, "--out", parents=True)
    path = atomic_write(fit_out, preset_yaml(refits, sorted({r.scenario.run.file for r in runs}), tools, ours), "--fit-out")
    typer.echo(one_line(f"wrote the refitted preset(s) to {path}"), err=True)
    return refits, fit_table(refits)
