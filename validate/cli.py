"""profile, validate, calibrate, validate-comm: the torch-backed commands, registered on the roofline app.

This module imports no torch at module level (roofline --help stays light); each command
imports what it needs inside.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from calc.cli.base import command
from calc.cli.options import HardwareOpt, QuietOpt
from calc.core import text as render
from calc.core.errors import SpecError
from calc.core.files import out_folder

RUN_DTYPES = ("fp32", "bf16", "fp16")  # the dtypes validate and profile build torch models in
GraphsOpt = Annotated[bool, typer.Option("--cuda-graphs", help="Time kernels (and passes) as CUDA graph replays, as engines run decode: the GPU's work without Python's launches. CUDA only.")]


def run_dtypes(text: str) -> tuple[str, ...]:
    """--dtype of validate and profile: a comma list of RUN_DTYPES, checked before any work."""
    dtypes = tuple(d.strip() for d in text.split(",") if d.strip())
    unknown = [d for d in dtypes if d not in RUN_DTYPES]
    if not dtypes or unknown:
        raise SpecError("--dtype", None, f"{', '.join(map(repr, unknown)) or 'no dtype'} given; "
                                         f"run dtypes are {', '.join(RUN_DTYPES)}")
    return dtypes


def need_torch(command: str) -> None:
    """The torch-backed commands' first check: without torch, one line and exit 2, before any
    module that imports torch is loaded (which would end in a traceback)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise SpecError(command, None, "needs torch, which is not installed: pip install 'roofline[torch]'") from None


@command("validate-comm")
def validate_comm_cmd(
    world_size: Annotated[int, typer.Option("--world-size", "-n", help="Processes (GPUs with NCCL) to start, as torchrun would.")] = 2,
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for comm.csv and interconnect.yaml.")] = Path("comm-validation"),
    backend: Annotated[str, typer.Option("--backend", help="auto (NCCL when enough GPUs, else gloo), gloo or nccl.")] = "auto",
    quick: Annotated[bool, typer.Option("--quick", help="Fewer sizes (1 KiB-4 MiB) and repeats: seconds, for CI.")] = False,
) -> None:
    """Time all-reduce and all-to-all with torch.distributed; fit link bandwidth (GB/s) and per-hop latency (us)."""
    need_torch("validate-comm")
    from .comm import validate_comm

    if backend not in ("auto", "gloo", "nccl"):
        raise SpecError("--backend", None, f"must be auto, gloo or nccl, got {backend!r}")
    out_folder(out, parents=True, create=False)  # a name too long, a loop, a file in the way: one line
    try:
        res = validate_comm(world_size, out, backend, quick)
    except RuntimeError as exc:
        raise SpecError("validate-comm", None, str(exc)) from None
    n = res["world_size"]
    rows = []
    for algo, fit in res["fits"].items():
        from .comm import modelled

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


@command("profile")
def profile_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for kernels/*.yaml and profile.yaml.")],
    device: Annotated[str, typer.Option("--device", help="cpu or cuda.")] = "cpu",
    threads: Annotated[int | None, typer.Option("--threads", min=1, help="CPU threads (default: torch's default, what a user's process runs).")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Fewer shapes and shorter timings (under 3 minutes on a 2-core CPU).")] = False,
    dtype: Annotated[str, typer.Option("--dtype", help="Comma list of dtypes: fp32, bf16, fp16.")] = "fp32,bf16",
    graphs: GraphsOpt = False,
) -> None:
    """Measure kernel tables (matmul, attention, streaming, gather, sampling) with torch; write a profile fitted to them.

    Times in seconds; the profile's peaks and bandwidth are the best measured, its efficiencies never above 1 against them.
    """
    need_torch("profile")
    from .profile import run_profile

    out_folder(out, parents=True, create=False)
    dtypes = run_dtypes(dtype)
    hw, path, _, wall = run_profile(device, out, threads, quick, dtypes, say=typer.echo, graphs=graphs)
    e = hw.efficiency
    typer.echo(f"peaks {', '.join(f'{d} {v * 1e3:.4g} GFLOP/s' for d, v in hw.peak_tflops.items())}; "
               f"bandwidth {hw.memory_bandwidth_tb_s * 1e3:.4g} GB/s; compute {e.compute:g}, memory {e.memory:g}, "
               f"attention {e.attention:g}, M half {e.gemm_m_half:g}, kernel overhead {e.kernel_overhead_us:g} us")
    typer.echo(f"wrote {len(hw.kernel_tables)} tables under {out / 'kernels'} and {path} in {wall:.0f} s; "
               f"use it with --hardware {path}")


@command("validate")
def validate_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for kernels/, calibrated.yaml (the kernel profile), measurements.csv, counts.json, report.md and scatter.png.")],
    model: Annotated[str | None, typer.Option("--model", "-m", help="Held-out models to validate, comma-separated (default: llama-3.2-1b, qwen2.5-0.5b, qwen3-30b-a3b); the kernel profile leaves their widths out.")] = None,
    device: Annotated[str, typer.Option("--device", help="cpu or cuda.")] = "cpu",
    layers: Annotated[int | None, typer.Option("--layers", min=1, help="Build N layers at the real widths (default 2); predictions use the same N-layer model.")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="The quick kernel profile and short timings, for CI.")] = False,
    dtype: Annotated[str, typer.Option("--dtype", help="Comma list of run dtypes: fp32, bf16, fp16.")] = "fp32,bf16",
    hardware: Annotated[str | None, typer.Option("--hardware", help="Base profile for the base predictions (default: cpu-generic-2core on CPU, the catalog GPU named like the device on CUDA, else the probes' measured profile).")] = None,
    profile: Annotated[str | None, typer.Option("--profile", help="An existing kernel profile (roofline profile's profile.yaml) instead of measuring one.")] = None,
    threads: Annotated[int | None, typer.Option("--threads", min=1, help="CPU threads (default: torch's default, what a user's process runs).")] = None,
    budget: Annotated[float | None, typer.Option("--budget", min=1.0, help="Seconds of timing for the whole grid of passes (default 120; 24 with --quick).")] = None,
    impl: Annotated[str, typer.Option("--impl", help="reference (validate/reference.py) or hf (transformers' LlamaForCausalLM; Llama-style models).")] = "reference",
    graphs: GraphsOpt = False,
    grid: Annotated[str | None, typer.Option("--grid", help="Passes to time: default (B 1, 4; prompts and contexts 64, 256), quick (prompts 32, 128) or serving (B 1, 8, 64; prompts 512, 2048 up to 16384 tokens; contexts 512, 4096: a loaded engine's steps, for a GPU). Default: quick with --quick.")] = None,
    quiet: QuietOpt = False,
) -> None:
    """Kernel profile first, then whole prefill/decode passes of held-out models: predicted, then measured.

    Nothing is fitted to the passes. Times in seconds (ms in tables); errors are predicted / measured - 1.
    Exit 1 when a count check fails.
    """
    need_torch("validate")
    from .report import summary_lines, write_all
    from .runner import HELD_OUT, Options, run

    out_folder(out, parents=True, create=False)
    dtypes = run_dtypes(dtype)
    models = tuple(m.strip() for m in model.split(",") if m.strip()) if model else HELD_OUT
    from calc.core.progress import bar

    with bar("validate", quiet) as progress:
        res = run(Options(models, out, device, layers, dtypes, quick, hardware, threads, budget, impl, profile, graphs, grid),
                  say=typer.echo, progress=progress)
    written = write_all(res)
    for line in summary_lines(res):
        typer.echo(line)
    typer.echo(f"wrote {out / 'measurements.csv'}, {out / 'calibrated.yaml'}, "
               + ", ".join(str(p) for p in written) + f" in {res.wall_s:.0f} s ({res.where_the_time_went()})")
    if not all(c.ok for _, c in res.counts):
        typer.echo("roofline: error: a FLOP or KV count check failed (see counts.json)", err=True)
        raise typer.Exit(1)


@command("calibrate")
def calibrate_cmd(
    kernels: Annotated[Path, typer.Option("--kernels", help="A folder of kernel tables (roofline profile's DIR or DIR/kernels).")],
    hardware: HardwareOpt,
    out: Annotated[Path, typer.Option("--out", "-o", help="The profile to write (YAML, atomically), pointing to the tables.")],
) -> None:
    """Refit a profile's analytical curves (compute, memory, attention share, M half, kernel overhead in us) to kernel tables.

    The base profile's peaks and bandwidth are the roofs (raised to a table's best rate where one beats them);
    whole passes are never fitted: `roofline validate` checks them.
    """
    from .kernelfit import refit_folder

    hw = refit_folder(kernels, hardware, out)
    e = hw.efficiency
    typer.echo(f"compute {e.compute:g}, memory {e.memory:g}, attention share {e.attention:g}, M half {e.gemm_m_half:g}, "
               f"kernel overhead {e.kernel_overhead_us:g} us" + "".join(
                   f"; {d}: " + ", ".join(f"{k} {v:g}" for k, v in o.model_dump(exclude_none=True).items())
                   for d, o in e.by_dtype.items()))
    typer.echo(f"wrote {out} ({hw.name}, {len(hw.kernel_tables)} tables); use it with --hardware {out}")
