"""The `roofline` command line: one thin function per subcommand (parse -> calc -> render).

Counting conventions (also in README): a multiply-add is 2 FLOPs; linear FLOPs
are the weight matmuls; attention FLOPs are QK^T and PV over the positions a
query may see (causal in prefill); everything else is "other". GB = 1e9 bytes.
"""

from __future__ import annotations

import functools
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from calc.render import text as render
from calc.spec.catalog import hardware_catalog, load_hardware, load_model, model_catalog, read_yaml
from calc.core.errors import SpecError
from calc.cli.values import parse_values
from calc.spec.model import ModelSpec
from calc.spec.hardware import HardwareSpec

app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=False,
    help="Roofline and capacity-planning calculator for LLM inference. "
    "FLOPs: a multiply-add is 2; bytes: GB = 1e9; times in seconds.",
)


class Format(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="Output format: table, json or csv.")]


def command(*args, **kwargs):
    """app.command, plus the error rule: a SpecError prints one line and exits 2."""

    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            try:
                return fn(*a, **k)
            except SpecError as exc:
                typer.echo(f"roofline: error: {exc}", err=True)
                raise typer.Exit(2) from None

        return app.command(*args, **kwargs)(wrapper)

    return deco


def _emit(fmt: Format, rows: list[dict], headers: list[str], table_rows: list[list[object]], obj=None):
    if fmt is Format.json:
        typer.echo(render.to_json(obj if obj is not None else rows))
    elif fmt is Format.csv:
        typer.echo(render.to_csv(rows), nl=False)
    else:
        typer.echo(render.table(table_rows, headers))


# --------------------------------------------------------------------------- catalogs


def model_summary(spec: ModelSpec) -> dict:
    """The key numbers of a model spec (the `show --format json` contract and more)."""
    a = spec.attention
    return {
        "name": spec.name,
        "architecture": spec.architecture,
        "params_total": spec.params_total,
        "params_active": spec.params_active,
        "num_layers": spec.num_layers,
        "hidden_size": spec.hidden_size,
        "attention": a.kind if a.kind == "mla" else ("mha" if a.num_kv_heads == a.num_heads else
                                                      "mqa" if a.num_kv_heads == 1 else "gqa"),
        "num_heads": a.num_heads,
        "num_kv_heads": a.num_kv_heads,
        "head_dim": a.head_dim,
        "sliding_window": a.sliding_window,
        "num_experts": spec.moe.num_experts if spec.moe else None,
        "experts_per_token": spec.moe.experts_per_token if spec.moe else None,
        "vocab_size": spec.vocab_size,
        "max_context": spec.max_context,
        "dtype": spec.serving_dtype,
        "kv_bytes_per_token": spec.kv_bytes_per_token(),
        "weight_bytes": spec.weight_bytes(),
        "param_breakdown": spec.param_breakdown(),
    }


def hardware_summary(hw: HardwareSpec) -> dict:
    return {
        "name": hw.name,
        "kind": hw.kind,
        "vendor": hw.vendor,
        "memory_gb": hw.memory_gb,
        "memory_bandwidth_tb_s": hw.memory_bandwidth_tb_s,
        "peak_tflops": dict(hw.peak_tflops),
        "ridge_bf16_flop_per_byte": hw.ridge_point("bf16"),
        "interconnect": hw.interconnect.name if hw.interconnect else None,
        "interconnect_gb_s_per_direction": hw.interconnect.bandwidth_gb_s_per_direction if hw.interconnect else None,
        "tdp_w": hw.tdp_w,
        "usd_per_hour": hw.price.usd_per_hour if hw.price else None,
        "calibrated": hw.calibration is not None,
    }


def _load_all(catalog: dict[str, Path], loader) -> list:
    return [loader(name) for name in sorted(catalog)]


@command("models")
def models_cmd(fmt: FormatOpt = Format.table) -> None:
    """List the model catalog: parameters, attention, KV bytes per token."""
    specs = _load_all(model_catalog(), load_model)
    rows = [model_summary(s) for s in specs]
    table_rows = [
        [r["name"], render.count(r["params_total"]), render.count(r["params_active"]), r["num_layers"],
         r["hidden_size"], r["attention"], r["num_experts"] or "-", render.nbytes(r["kv_bytes_per_token"]),
         r["max_context"], r["dtype"]]
        for r in rows
    ]
    headers = ["model", "params", "active", "layers", "hidden", "attn", "experts", "KV/token", "max ctx", "dtype"]
    flat = [{k: v for k, v in r.items() if k != "param_breakdown"} for r in rows]
    _emit(fmt, flat, headers, table_rows, obj=rows)


@command("hardware")
def hardware_cmd(fmt: FormatOpt = Format.table) -> None:
    """List the hardware catalog: memory, bandwidth, dense peaks, ridge point."""
    specs = _load_all(hardware_catalog(), load_hardware)
    rows = [hardware_summary(h) for h in specs]
    table_rows = [
        [r["name"], r["kind"], f'{r["memory_gb"]:g}', f'{r["memory_bandwidth_tb_s"]:g}',
         f'{r["peak_tflops"].get("bf16", "-")}', f'{r["peak_tflops"].get("fp8", "-")}',
         f'{r["ridge_bf16_flop_per_byte"]:.0f}', r["interconnect_gb_s_per_direction"] or "-",
         f'{r["usd_per_hour"]:.2f}' if r["usd_per_hour"] else "-"]
        for r in rows
    ]
    headers = ["hardware", "kind", "mem GB", "TB/s", "bf16 TFLOP/s", "fp8 TFLOP/s", "ridge FLOP/B",
               "link GB/s/dir", "$/h"]
    flat = [{**{k: v for k, v in r.items() if k != "peak_tflops"},
             **{f"peak_tflops_{k}": v for k, v in r["peak_tflops"].items()}} for r in rows]
    _emit(fmt, flat, headers, table_rows, obj=rows)


def _resolve_any(ref: str) -> ModelSpec | HardwareSpec:
    """A name or path that may be a model or a hardware profile."""
    if ref in model_catalog():
        return load_model(ref)
    if ref in hardware_catalog():
        return load_hardware(ref)
    p = Path(ref)
    if p.suffix in (".yaml", ".yml") and p.is_file():
        data = read_yaml(p)
        return load_hardware(ref) if "memory_bandwidth_tb_s" in data else load_model(ref)
    try:
        return load_model(ref)
    except SpecError as exc:
        if p.exists():
            raise
        names = sorted([*model_catalog(), *hardware_catalog()])
        import difflib

        close = difflib.get_close_matches(ref, names, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise SpecError("NAME", None, f"unknown model or hardware {ref!r}{hint}") from exc


@command("show")
def show_cmd(
    ref: Annotated[str, typer.Argument(help="Catalog name, YAML path, or HF config.json (or its folder).")],
    fmt: FormatOpt = Format.table,
) -> None:
    """Show one model or hardware spec with its derived values."""
    spec = _resolve_any(ref)
    summary = model_summary(spec) if isinstance(spec, ModelSpec) else hardware_summary(spec)
    if fmt is Format.table:
        lines = []
        for key, val in summary.items():
            if isinstance(val, dict):
                val = ", ".join(f"{k}={render.count(v) if isinstance(spec, ModelSpec) else v}"
                                for k, v in val.items() if v)
            elif key.startswith("params"):
                val = f"{val:,} ({render.count(val)})"
            elif key.endswith("_bytes") or key == "kv_bytes_per_token":
                val = f"{val:,.0f} B ({render.nbytes(val)})"
            lines.append([key, val])
        typer.echo(render.table(lines, ["field", "value"], align="ll"))
    else:
        _emit(fmt, [summary], [], [], obj=summary)


# --------------------------------------------------------------------------- estimators

ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Catalog name, YAML path, or HF config.json / folder.")]
HardwareOpt = Annotated[str, typer.Option("--hardware", help="Catalog name or YAML path (e.g. a calibrated profile).")]
WeightDtypeOpt = Annotated[str | None, typer.Option("--weight-dtype", help="Weights: bf16, fp16, fp8, int8, int4, fp4 (default: the model's).")]
KVDtypeOpt = Annotated[str | None, typer.Option("--kv-dtype", help="KV cache: bf16, fp16, fp8, int8, int4 (default: the model's).")]
ComputeDtypeOpt = Annotated[str | None, typer.Option("--compute-dtype", help="Matmul dtype (default: fp8 for fp8 weights, else the model's).")]
AttentionOpt = Annotated[str | None, typer.Option("--attention", help="Attention kernel: fused (FlashAttention, scores stay on chip) or unfused (default: the engine's, else fused).")]
EngineOpt = Annotated[str | None, typer.Option("--engine", help="Serving-engine preset: ideal, default, vllm, sglang, trtllm, llama.cpp, hf (default: the profile's own). See `roofline engines`.")]
GroupOpt = Annotated[int, typer.Option("--group-size", min=1, help="Weights per quantisation scale for int8/int4/fp4 weights.")]
IdealOpt = Annotated[bool, typer.Option("--ideal", help="Pure roofline: peak FLOP/s and data-sheet bandwidth, no overheads.")]
TPOpt = Annotated[int, typer.Option("--tp", help="Tensor-parallel GPUs (shards heads, MLP, vocab; 2 all-reduces per layer).")]
PPOpt = Annotated[int, typer.Option("--pp", help="Pipeline stages (layers split; one activation send per stage boundary).")]
EPOpt = Annotated[int, typer.Option("--ep", help="Expert-parallel GPUs for MoE layers (divides --tp; 2 all-to-alls per MoE layer).")]
ImbalanceOpt = Annotated[float, typer.Option("--imbalance", help="MoE load imbalance under EP: busiest GPU's routed tokens over the mean (>= 1).")]


def _estimate_options(weight_dtype, kv_dtype, compute_dtype, group_size, attention, ideal,
                      tp=1, pp=1, ep=1, imbalance=1.0, engine=None) -> dict:
    return dict(weight_dtype=weight_dtype, kv_dtype=kv_dtype, compute_dtype=compute_dtype,
                group_size=group_size, attention=attention, ideal=ideal, tp=tp, pp=pp, ep=ep, imbalance=imbalance,
                engine=engine)


@command("estimate")
def estimate_cmd(
    model: ModelOpt,
    hardware: HardwareOpt,
    batch: Annotated[str, typer.Option("--batch", "-b", help="Sequences per batch: N, a list 1,8,64 or a range start:stop:step.")] = "1",
    prompt_len: Annotated[str, typer.Option("--prompt-len", "-t", help="Prompt tokens per sequence (list/range allowed).")] = "512",
    output_len: Annotated[str, typer.Option("--output-len", "-g", help="Output tokens per sequence (list/range allowed).")] = "128",
    weight_dtype: WeightDtypeOpt = None,
    kv_dtype: KVDtypeOpt = None,
    compute_dtype: ComputeDtypeOpt = None,
    attention: AttentionOpt = None,
    group_size: GroupOpt = 128,
    ideal: IdealOpt = False,
    tp: TPOpt = 1,
    pp: PPOpt = 1,
    ep: EPOpt = 1,
    imbalance: ImbalanceOpt = 1.0,
    engine: EngineOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Prefill and decode roofline, TTFT / TPOT / e2e (seconds), throughput (tokens/s) and memory (bytes).

    A request of G outputs is one prefill at T, then G - 1 decode steps at contexts
    T .. T+G-2; TPOT is their mean. FLOPs count a multiply-add as 2.
    """
    from calc.cost.latency import estimate
    from calc.render.estimate import estimate_records, estimate_rows_text, estimate_text, flat_record

    spec, hw = load_model(model), load_hardware(hardware)
    B = parse_values(batch, "--batch")
    T = parse_values(prompt_len, "--prompt-len")
    G = parse_values(output_len, "--output-len")
    grid = np.meshgrid(B, T, G, indexing="ij")
    est = estimate(spec, hw, *grid, **_estimate_options(weight_dtype, kv_dtype, compute_dtype, group_size,
                                                         attention, ideal, tp, pp, ep, imbalance, engine))
    recs = estimate_records(est)
    if fmt is Format.json:
        typer.echo(render.to_json(recs[0] if len(recs) == 1 else recs))
    elif fmt is Format.csv:
        typer.echo(render.to_csv(flat_record(r) for r in recs), nl=False)
    else:
        typer.echo(estimate_text(recs[0]) if len(recs) == 1 else estimate_rows_text(recs))


class Phase(str, Enum):
    prefill = "prefill"
    decode = "decode"


@command("ops")
def ops_cmd(
    model: ModelOpt,
    hardware: HardwareOpt,
    phase: Annotated[Phase, typer.Option("--phase", help="prefill (seq-len prompt tokens) or decode (one token at context seq-len).")] = Phase.decode,
    batch: Annotated[int, typer.Option("--batch", "-b", min=1, help="Sequences per batch.")] = 1,
    seq_len: Annotated[int, typer.Option("--seq-len", "-s", min=1, help="Prompt tokens (prefill) or cached context (decode).")] = 1024,
    weight_dtype: WeightDtypeOpt = None,
    kv_dtype: KVDtypeOpt = None,
    compute_dtype: ComputeDtypeOpt = None,
    attention: AttentionOpt = None,
    group_size: GroupOpt = 128,
    ideal: IdealOpt = False,
    tp: TPOpt = 1,
    pp: PPOpt = 1,
    ep: EPOpt = 1,
    imbalance: ImbalanceOpt = 1.0,
    engine: EngineOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Per-operator breakdown of one pass: one layer's FLOPs, bytes, intensity and time, the totals, sorted by time."""
    from calc.cost.breakdown import ops_records, ops_text

    spec, hw = load_model(model), load_hardware(hardware)
    recs, summary = ops_records(spec, hw, phase.value, batch, seq_len,
                                **_estimate_options(weight_dtype, kv_dtype, compute_dtype, group_size, attention, ideal,
                                                    tp, pp, ep, imbalance, engine))
    if fmt is Format.json:
        typer.echo(render.to_json({**summary, "ops": recs}))
    elif fmt is Format.csv:
        typer.echo(render.to_csv(recs), nl=False)
    else:
        typer.echo(ops_text(recs, summary))


@command("intensity")
def intensity_cmd(
    model: ModelOpt,
    seq_len: Annotated[str, typer.Option("--seq-len", "-s", help="Sequence lengths S (list/range allowed).")] = "128,1024,8192",
    weight_dtype: WeightDtypeOpt = None,
    kv_dtype: KVDtypeOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Whole-model arithmetic intensity (FLOP/byte): the seed's first-order formula beside the operator model."""
    from calc.cost.breakdown import intensity_records, intensity_text

    spec = load_model(model)
    recs = intensity_records(spec, parse_values(seq_len, "--seq-len"), weight_dtype, kv_dtype)
    if fmt is Format.table:
        typer.echo(intensity_text(spec, recs))
    else:
        _emit(fmt, recs, [], [])


# --------------------------------------------------------------------------- sweeps


def _split(text: str | None) -> list[str | None]:
    return [None] if text is None else [t.strip() for t in text.split(",") if t.strip()]


@command("sweep")
def sweep_cmd(
    model: Annotated[str, typer.Option("--model", "-m", help="Model name(s) or path(s), comma-separated.")] = "llama-3.1-8b",
    hardware: Annotated[str, typer.Option("--hardware", help="Hardware name(s) or path(s), comma-separated.")] = "h100-sxm",
    batch: Annotated[str, typer.Option("--batch", "-b", help="Sequences: N, a list 1,8,64 or a range start:stop:step.")] = "1",
    prompt_len: Annotated[str, typer.Option("--prompt-len", "-t", help="Prompt tokens (list/range).")] = "512",
    output_len: Annotated[str, typer.Option("--output-len", "-g", help="Output tokens (list/range).")] = "128",
    context: Annotated[str | None, typer.Option("--context", help="Decode contexts to sweep TPOT over (list/range): sets the prompt length, 2 output tokens.")] = None,
    weight_dtype: Annotated[str | None, typer.Option("--weight-dtype", help="Weight dtype(s), comma-separated.")] = None,
    kv_dtype: Annotated[str | None, typer.Option("--kv-dtype", help="KV dtype(s), comma-separated.")] = None,
    compute_dtype: ComputeDtypeOpt = None,
    tp: Annotated[str, typer.Option("--tp", help="Tensor-parallel degree(s) (list/range).")] = "1",
    pp: Annotated[str, typer.Option("--pp", help="Pipeline stages (list/range).")] = "1",
    attention: AttentionOpt = None,
    ideal: IdealOpt = False,
    engine: EngineOpt = None,
    columns: Annotated[str | None, typer.Option("--columns", help="Keep only these result columns (comma-separated) besides the inputs.")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write .csv or .jsonl (JSON lines); default: CSV on stdout.")] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Run grids of more than 100 million scenarios.")] = False,
) -> None:
    """A grid over models, hardware, dtypes, TP/PP, batch and lengths -> CSV or JSON lines, one row per scenario.

    Columns carry units: _s seconds, _bytes, _flops, _tokens, _per_s, _usd. Vectorised: a
    million scenarios take seconds (writing a CSV that size takes longer than computing it).
    """
    from calc.cost.sweep import MAX_SCENARIOS, sweep, write_frame

    if out is not None and out.suffix.lower() not in (".csv", ".jsonl", ".json"):
        raise SpecError("--out", None, f"{out}: use a .csv or .jsonl file name")
    if context is not None:
        prompt_len, output_len = context, "2"
    frame = sweep(
        model=_split(model), hardware=_split(hardware), batch=parse_values(batch, "--batch"),
        prompt_len=parse_values(prompt_len, "--prompt-len" if context is None else "--context"),
        output_len=parse_values(output_len, "--output-len"), weight_dtype=_split(weight_dtype),
        kv_dtype=_split(kv_dtype), compute_dtype=compute_dtype, tp=parse_values(tp, "--tp"),
        pp=parse_values(pp, "--pp"), attention=attention, ideal=ideal, engine=engine,
        max_scenarios=2**62 if yes else MAX_SCENARIOS,
    )
    if columns:
        keep = _split(columns)
        unknown = [c for c in keep if c not in frame.columns]
        if unknown:
            raise SpecError("--columns", None, f"unknown column(s) {', '.join(unknown)}; "
                                               f"known: {', '.join(frame.columns)}")
        inputs = ["model", "hardware", "weight_dtype", "kv_dtype", "compute_dtype", "tp", "pp", "gpus", "batch",
                  "prompt_tokens", "output_tokens"]
        frame = frame[inputs + [c for c in keep if c not in inputs]]
    if out is None:
        typer.echo(frame.to_csv(index=False), nl=False)
    else:
        write_frame(frame, out)
        typer.echo(f"wrote {len(frame):,} scenarios x {frame.shape[1]} columns to {out}", err=True)


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


# --------------------------------------------------------------------------- validation (torch, lazily)


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
) -> None:
    """Real torch prefill/decode passes: check FLOP and KV counts, time a grid, fit a calibrated profile.

    Times in seconds (ms in tables); errors are predicted / measured - 1. Exit 1 when a count check fails.
    """
    from validate.report import summary_lines, write_all
    from validate.runner import Options, run

    if out.exists() and not out.is_dir():
        raise SpecError("--out", None, f"{out} exists and is not a folder")
    res = run(Options(model, out, device, layers, tuple(d.strip() for d in dtype.split(",") if d.strip()), quick,
                      hardware, threads, budget, impl), say=typer.echo)
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
    from calc.render.text import table
    from validate.fitting import refit
    from validate.report import ERROR_HEADERS, error_lines

    hw, fits, errors, _ = refit(measurements, hardware, out, model)
    for d, f in fits.items():
        typer.echo(f"{d}: compute {f.compute:.3g}, memory {f.memory:.3g}, attention share {f.attention:.3g}, "
                   f"kernel overhead {f.kernel_overhead_s * 1e6:.3g} us, step overhead {f.step_overhead_s * 1e6:.3g} us")
    if errors:
        typer.echo(table(error_lines(errors), ERROR_HEADERS))
    typer.echo(f"wrote {out} ({hw.name}); use it with --hardware {out}")


@command("plot")
def plot_cmd(
    kind: Annotated[str, typer.Argument(help="Chart: roofline, ttft, tpot-batch, tpot-context, throughput, kv-memory, breakdown or tp.")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Image to write (required): .png or .svg.")] = None,
    model: Annotated[str, typer.Option("--model", "-m", help="Model name(s) or path(s), comma-separated (one line per model; one for roofline).")] = "llama-3.1-8b",
    hardware: Annotated[str, typer.Option("--hardware", help="Hardware name(s) or path(s), comma-separated (one roof or line per profile).")] = "h100-sxm",
    batch: Annotated[str | None, typer.Option("--batch", "-b", help="Sequences: N, a list 1,8,64 or a range start:stop:step (default per chart).")] = None,
    prompt_len: Annotated[str | None, typer.Option("--prompt-len", "-t", help="Prompt tokens T (list/range; default per chart).")] = None,
    output_len: Annotated[str | None, typer.Option("--output-len", "-g", help="Output tokens G per sequence (list/range).")] = None,
    context: Annotated[str | None, typer.Option("--context", "--seq-len", "-s", help="Decode context S in tokens (list/range for tpot-context, kv-memory).")] = None,
    weight_dtype: Annotated[str | None, typer.Option("--weight-dtype", help="Weight dtype(s), comma-separated.")] = None,
    kv_dtype: Annotated[str | None, typer.Option("--kv-dtype", help="KV dtype(s), comma-separated.")] = None,
    tp: Annotated[str | None, typer.Option("--tp", help="Tensor-parallel degree(s) (list/range; the tp chart's x axis).")] = None,
    phase: Annotated[str | None, typer.Option("--phase", help="roofline chart: prefill, decode or both (default).")] = None,
) -> None:
    """Charts as PNG or SVG: the roofline of a model's operators, TTFT vs prompt, TPOT vs batch / context / TP,
    throughput vs TPOT with its Pareto frontier, KV memory (GB = 1e9 bytes) vs context, time breakdown."""
    from calc.plot.charts import check_kind, check_out, make_chart

    check_kind(kind)
    check_out(out)

    def values(text, option):
        return None if text is None else parse_values(text, option)

    make_chart(kind, _split(model), _split(hardware), batch=values(batch, "--batch"),
               prompt_len=values(prompt_len, "--prompt-len"), output_len=values(output_len, "--output-len"),
               context=values(context, "--context"), weight_dtype=weight_dtype, kv_dtype=kv_dtype,
               tp=values(tp, "--tp"), phases=None if phase in (None, "both") else (phase,), out=out)
    typer.echo(f"wrote {out}", err=True)


@command("plan")
def plan_cmd(
    workload: Annotated[Path, typer.Argument(help="Workload YAML: arrival rate or concurrency, length distributions or a CSV trace, SLOs (seconds), candidate hardware, max GPUs.")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Folder to write report.md, report.html (self-contained), plan.json and the charts into.")] = None,
    requests: Annotated[int | None, typer.Option("--requests", min=10, help="Requests simulated per configuration (default: the workload's `requests`).")] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Capacity plan: the cheapest hardware x TP x replicas x max batch that meets the workload's SLOs at its load.

    Closed-form steady state, then a discrete-event simulation of continuous batching
    (chunked prefill, KV pages, preemption) per configuration. Prices in USD per GPU-hour.
    No configuration meeting the SLOs is an answer (exit 0: the closest and why).
    """
    import time

    from calc.render.plan import plan_record, plan_text, trial_record, write_report
    from calc.serving.plan import plan
    from calc.spec.workload import load_workload

    t0 = time.perf_counter()
    result = plan(load_workload(workload, requests))
    if fmt is Format.json:
        typer.echo(render.to_json(plan_record(result)))
    elif fmt is Format.csv:
        typer.echo(render.to_csv({k: v for k, v in trial_record(t).items() if not isinstance(v, dict)}
                                 for t in result.ranked), nl=False)
    else:
        typer.echo(plan_text(result))
    if out is not None:
        files = write_report(result, out)
        typer.echo(f"wrote {', '.join(str(f) for f in files if f.suffix != '.png')} and "
                   f"{sum(f.suffix == '.png' for f in files)} charts", err=True)
    typer.echo(f"planned in {time.perf_counter() - t0:.1f} s ({result.simulations} simulations of "
               f"{result.requests:,} requests)", err=True)


@command("engines")
def engines_cmd(fmt: FormatOpt = Format.table) -> None:
    """List the serving-engine presets (--engine): attention kernel and efficiency, overheads, sources."""
    from calc.spec.engine import engines

    rows = [{"name": e.name, "description": e.description, "attention_kernel": e.attention_kernel,
             "attention": e.attention, "gemm_m_half": e.gemm_m_half, "memory_half_mb": e.memory_half_mb,
             "kernel_overhead_us": e.kernel_overhead_us, "step_overhead_us": e.step_overhead_us,
             "request_overhead_us": e.request_overhead_us, "compute_scale": e.compute_scale, "memory_scale": e.memory_scale, "ideal": e.ideal,
             "sources": e.sources} for e in engines().values()]
    table_rows = [[r["name"], r["attention_kernel"], f"{r['attention']:.2f}", f"{r['gemm_m_half']:.3g}",
                   f"{r['memory_half_mb']:.3g}", f"{r['kernel_overhead_us']:.3g}", f"{r['step_overhead_us']:.4g}",
                   f"{r['request_overhead_us'] / 1e3:.3g}", f"{r['compute_scale']:.2f}/{r['memory_scale']:.2f}"]
                  for r in rows]
    headers = ["engine", "attention", "attn eff", "GEMM M half", "half MB", "kernel us", "step us", "request ms",
               "scales c/m"]
    _emit(fmt, [{k: v for k, v in r.items() if k != "sources"} for r in rows], headers, table_rows, obj=rows)


@command("accuracy")
def accuracy_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for README.md, predictions.csv and errors.png.")] = Path("reports/accuracy"),
    fit: Annotated[bool, typer.Option("--fit/--no-fit", help="Refit the presets on the fit half (about 20 s).")] = True,
) -> None:
    """Predict every published measurement (reports/accuracy/published.csv): ideal roofline, presets, refitted; errors in %."""
    from calc.accuracy.report import write_accuracy_report

    summary = write_accuracy_report(Path(out), fit=fit)
    typer.echo(summary)


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
