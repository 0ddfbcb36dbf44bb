"""validate, calibrate, validate-comm: the torch-backed commands, registered on the roofline app.

This module imports no torch at module level (roofline --help stays light); each command
imports what it needs inside.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from calc.cli.base import command
from calc.cli.options import HardwareOpt, ModelOpt, QuietOpt
from calc.core import text as render
from calc.core.errors import SpecError


@command("validate-comm")
def validate_comm_cmd(
    world_size: Annotated[int, typer.Option("--world-size", "-n", help="Processes (GPUs with NCCL) to start, as torchrun would.")] = 2,
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for comm.csv and interconnect.yaml.")] = Path("comm-validation"),
    backend: Annotated[str, typer.Option("--backend", help="auto (NCCL when enough GPUs, else gloo), gloo or nccl.")] = "auto",
    quick: Annotated[bool, typer.Option("--quick", help="Fewer sizes (1 KiB-4 MiB) and repeats: seconds, for CI.")] = False,
) -> None:
    """Time all-reduce and all-to-all with torch.distributed; fit link bandwidth (GB/s) and per-hop latency (us)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise SpecError("validate-comm", None, "needs torch: pip install torch") from None
    from validate.comm import validate_comm

    if backend not in ("auto", "gloo", "nccl"):
        raise SpecError("--backend", None, f"must be auto, gloo or nccl, got {backend!r}")
    if out.exists() and not out.is_dir():
        raise SpecError("--out", None, f"{out} exists and is not a folder")
    try:
        res = validate_comm(world_size, out, backend, quick)
    except RuntimeError as exc:
        raise SpecError("validate-comm", None, str(exc)) from None
    n = res["world_size"]
    rows = []
    for algo, fit in res["fits"].items():
        from validate.comm import modelled

        bw, hop = fit["bandwidth_gb_s_per_direction"] * 1e9, fit["latency_us"] * 1e-6
        for r in res["rows"][:: max(len(res["rows"]) // 4, 1)]:
            meas = r[f"{algo}_s"]
            mod = modelled(r["size_bytes"], n, algo, bw, hop)
            rows.append([algo, render.nbytes(r["size_bytes"]), render.seconds(meas), render.seconds(mod),
                         f"{mod / meas - 1:+.1%}"])
    typer.echo(f"{res['backend']}, {n} processes: measured vs modelled (ring model, fitted)\n")
    typer.echo(render.table(rows, ["collective", "message", "measured", "modelled", "error"]))
    for algo, fit in res["fits"].items():
        typer.echo(f"{algo}: {fit['bandwidth_gb_s_per_direction']:.3g} GB/s per direction, "
                   f"{fit['latency_us']:.3g} us per hop; median |error| {fit['median_abs_error']:.1%}")
    typer.echo(f"wrote {out / 'comm.csv'} and {out / 'interconnect.yaml'}")


@command("validate")
def validate_cmd(
    model: ModelOpt,
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for measurements.csv, counts.json, calibrated.yaml, report.md and scatter.png.")],
    device: Annotated[str, typer.Option("--device", help="cpu or cuda.")] = "cpu",
    layers: Annotated[int | None, typer.Option("--layers", min=1, help="Build N layers at the real widths; predictions use the same N-layer model.")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="A small grid and short timings (under a minute on a 2-core CPU), for CI.")] = False,
    dtype: Annotated[str, typer.Option("--dtype", help="Comma list of run dtypes: fp32, bf16, fp16.")] = "fp32,bf16",
    hardware: Annotated[str | None, typer.Option("--hardware", help="Base profile for the default predictions and the fit (default: cpu-generic-2core on CPU, the catalog GPU named like the device on CUDA, else the probes' measured profile).")] = None,
    threads: Annotated[int | None, typer.Option("--threads", min=1, help="CPU threads, fixed for the run (default: half the logical CPUs).")] = None,
    budget: Annotated[float | None, typer.Option("--budget", min=1.0, help="Seconds of timing for the whole grid (default 150; 12 with --quick).")] = None,
    impl: Annotated[str, typer.Option("--impl", help="reference (validate/reference.py) or hf (transformers' LlamaForCausalLM; Llama-style models).")] = "reference",
    quiet: QuietOpt = False,
) -> None:
    """Real torch prefill/decode passes: check FLOP and KV counts, time a grid, fit a calibrated profile.

    Times in seconds (ms in tables); errors are predicted / measured - 1. Exit 1 when a count check fails.
    """
    from validate.report import summary_lines, write_all
    from validate.runner import Options, run

    if out.exists() and not out.is_dir():
        raise SpecError("--out", None, f"{out} exists and is not a folder")
    from calc.core.progress import bar

    with bar("validate", quiet) as progress:
        res = run(Options(model, out, device, layers, tuple(d.strip() for d in dtype.split(",") if d.strip()),
                          quick, hardware, threads, budget, impl), say=typer.echo, progress=progress)
    written = write_all(res)
    for line in summary_lines(res):
        typer.echo(line)
    typer.echo(f"wrote {out / 'measurements.csv'}, {out / 'calibrated.yaml'}, "
               + ", ".join(str(p) for p in written) + f" in {res.wall_s:.0f} s")
    if not all(c.ok for c in res.counts):
        typer.echo("roofline: error: a FLOP or KV count check failed (see counts.json)", err=True)
        raise typer.Exit(1)


@command("calibrate")
def calibrate_cmd(
    measurements: Annotated[Path, typer.Option("--measurements", help="A measurements.csv written by roofline validate.")],
    hardware: HardwareOpt,
    out: Annotated[Path, typer.Option("--out", "-o", help="The calibrated profile to write (YAML, atomically).")],
    model: Annotated[str | None, typer.Option("--model", "-m", help="The model measured (default: model.yaml beside the CSV).")] = None,
) -> None:
    """Refit a hardware profile's efficiencies (compute, memory, attention share, overheads in us) to saved measurements."""
    from calc.core.text import table
    from validate.fitting import refit
    from validate.report import ERROR_HEADERS, error_lines

    hw, fits, errors, _ = refit(measurements, hardware, out, model)
    for d, f in fits.items():
        typer.echo(f"{d}: compute {f.compute:.3g}, memory {f.memory:.3g}, attention share {f.attention:.3g}, "
                   f"kernel overhead {f.kernel_overhead_s * 1e6:.3g} us, step overhead {f.step_overhead_s * 1e6:.3g} us")
    if errors:
        typer.echo(table(error_lines(errors), ERROR_HEADERS))
    typer.echo(f"wrote {out} ({hw.name}); use it with --hardware {out}")
