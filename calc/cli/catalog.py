"""models, hardware, show, engines: the catalogs and one spec with its derived values."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from calc.cli.base import Format, FormatOpt, command, emit
from calc.core import text as render
from calc.core.units import TERA
from calc.spec.catalog import hardware_catalog, load_hardware, load_model, load_spec, model_catalog
from calc.spec.hardware import HardwareSpec
from calc.spec.model import ModelSpec


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
        "weight_dtype": spec.default_weight_dtype,
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
        "memory_reported_mib": hw.memory_reported_mib,
        "memory_cuda_mib": hw.memory_cuda_mib,
        "memory_bandwidth_tb_s": hw.memory_bandwidth_tb_s,
        "peak_tflops": dict(hw.peak_tflops),
        # the rates the GEMM classes are priced at: the profile's figure, else what stands in for it
        "fp16_accumulate_tflops": hw.fp16_accumulate_rate_per_s / TERA,
        "int32_tops": hw.int32_rate_per_s / TERA,
        "ridge_bf16_flop_per_byte": hw.ridge_point("bf16"),
        "interconnect": hw.interconnect.name if hw.interconnect else None,
        "interconnect_gb_s_per_direction": hw.interconnect.bandwidth_gb_s_per_direction if hw.interconnect else None,
        "tdp_w": hw.tdp_w,
        "usd_per_hour": hw.price.usd_per_hour if hw.price else None,
        "calibrated": hw.calibration is not None,
        "kernel_curves": "measured" if hw.efficiency.kernels is not None else "analytical",
        "collectives": "measured" if hw.collectives is not None else "analytical",
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
    emit(fmt, flat, headers, table_rows, obj=rows)


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
    emit(fmt, flat, headers, table_rows, obj=rows)


@command("show")
def show_cmd(
    ref: Annotated[str, typer.Argument(help="Catalog name, YAML path, or HF config.json (or its folder).")],
    fmt: FormatOpt = Format.table,
) -> None:
    """Show one model or hardware spec with its derived values."""
    spec = load_spec(ref)
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
        emit(fmt, [summary], [], [], obj=summary)



@command("engines")
def engines_cmd(fmt: FormatOpt = Format.table) -> None:
    """List the serving-engine presets (--engine): attention kernel and efficiency, overheads, sources."""
    from calc.spec.engine import engines

    rows = [{"name": e.name, "description": e.description, "attention_kernel": e.attention_kernel,
             "attention": e.attention, "gemm_m_half": e.gemm_m_half, "memory_half_mb": e.memory_half_mb,
             "kernel_overhead_us": e.kernel_overhead_us, "step_overhead_us": e.step_overhead_us,
             "request_overhead_us": e.request_overhead_us, "compute_scale": e.compute_scale, "memory_scale": e.memory_scale, "ideal": e.ideal,
             "launch_us": e.launch_us, "kernels": dict(e.kernels), "cuda_graphs": e.cuda_graphs,
             "custom_allreduce": e.custom_allreduce, "sources": e.sources} for e in engines().values()]
    table_rows = [[r["name"], r["attention_kernel"], f"{r['attention']:.2f}", f"{r['gemm_m_half']:.3g}",
                   f"{r['memory_half_mb']:.3g}", f"{r['kernel_overhead_us']:.3g}", f"{r['step_overhead_us']:.4g}",
                   f"{r['request_overhead_us'] / 1e3:.3g}", f"{r['compute_scale']:.2f}/{r['memory_scale']:.2f}",
                   "-" if r["launch_us"] is None else f"{r['launch_us']:.3g}",
                   " ".join(f"{k}={v:g}" for k, v in r["kernels"].items()) or "-"]
                  for r in rows]
    headers = ["engine", "attention", "attn eff", "GEMM M half", "half MB", "kernel us", "step us", "request ms",
               "scales c/m", "launch us (measured kernels)", "kernel set"]
    emit(fmt, [{k: v for k, v in r.items() if k != "sources"} for r in rows], headers, table_rows, obj=rows)
