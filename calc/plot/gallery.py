"""The example gallery: `python -m calc.plot.gallery` regenerates reports/gallery/ in one go.

Each chart is written as <name>.png beside <name>.json (the series it plots, read
back from the figure by calc.plot.charts.plotted_data), and README.md lists them with
two lines on what each shows. A test regenerates one chart's data and compares it
with the committed JSON, so the gallery cannot drift from the code unnoticed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from calc.core.files import atomic_write
from calc.plot import charts as plot
from calc.spec.catalog import REPO_ROOT, load_model

GALLERY_DIR = REPO_ROOT / "reports" / "gallery"
COMMAND = "python -m calc.plot.gallery"


@dataclass(frozen=True)
class Chart:
    name: str  # file stem
    title: str
    build: Callable[[], object]  # -> Figure
    caption: Callable[[], str]  # two lines: what it shows, and what to read from it
    command: str = ""  # the equivalent `roofline plot` line, when one exists


def _paired(kind: str, pairs, **options):
    """One sweep per (hardware, TP) pair, concatenated: e.g. H100 at TP 2 beside H200 at TP 1."""
    import pandas as pd

    return pd.concat([plot.sweep_for(kind, hardware=hw, tp=[tp], **options) for hw, tp in pairs],
                     ignore_index=True)


FP8_70B = dict(model="llama-3.1-70b", weight_dtype="fp8", kv_dtype="fp8")
PAIRS_70B = (("h100-sxm", 2), ("h200", 1))
THREE_GPUS = "h100-sxm,l4,rtx-4090"


def _kv_ratio() -> str:
    ds, ll = load_model("deepseek-v3"), load_model("llama-3.1-405b")
    a, b = ds.kv_bytes_per_token(), ll.kv_bytes_per_token()
    return (f"MLA caches {a / 1e3:.0f} kB per token (bf16) for the whole model against {b / 1e3:.0f} kB for "
            f"Llama-3.1-405B's GQA: {b / a:.1f}x less (dotted: 405B's whole-model KV; DeepSeek's equals its solid "
            "line).\nBut TP 8 replicates the latent on every GPU while GQA splits its 8 KV heads one per GPU, so "
            "per GPU they are even: MLA's advantage needs data-parallel attention, as DeepSeek serves it.")


CHARTS: tuple[Chart, ...] = (
    Chart("llama-3.1-8b_roofline", "Llama-3.1-8B roofline: H100 SXM vs L4 vs RTX 4090",
          lambda: plot.make_chart("roofline", "llama-3.1-8b", THREE_GPUS, batch=[1], prompt_len=[1024]),
          lambda: "One user (B=1): the prefill of 1024 tokens lands at ~535 FLOP/B, past every ridge "
                  "(compute-bound); a decode step at ~1 FLOP/B sits far down the memory roof.\n"
                  "Decode reaches 2.3, 0.77 and 0.24 TFLOP/s on the three GPUs: close to the ratio of their "
                  "memory bandwidths (3.3x, 11x), not of their TFLOP/s.",
          f"roofline plot roofline -m llama-3.1-8b --hardware {THREE_GPUS} --batch 1 --prompt-len 1024 "
          "--out roofline.png"),
    Chart("llama-3.1-8b_ttft", "Llama-3.1-8B: TTFT vs prompt length",
          lambda: plot.make_chart("ttft", "llama-3.1-8b", THREE_GPUS, batch=[1]),
          lambda: "One prompt of 128 to 32k tokens: short prompts are bound by reading the 16 GB of weights "
                  "(the flat start), long ones by compute, growing faster than T as causal attention takes over.\n"
                  "At 1k tokens: 25 ms on H100, 105 ms on RTX 4090, 186 ms on L4, close to the inverse of their "
                  "attainable bf16 TFLOP/s (792 : 157 : 97).",
          f"roofline plot ttft -m llama-3.1-8b --hardware {THREE_GPUS} --batch 1 --out ttft.png"),
    Chart("llama-3.1-8b_throughput", "Llama-3.1-8B: throughput vs TPOT over batch",
          lambda: plot.make_chart("throughput", "llama-3.1-8b", THREE_GPUS, prompt_len=[1024], output_len=[256]),
          lambda: "The latency-throughput curve, T=1024, G=256, batch 1 to 512: throughput grows almost for free "
                  "while reading the weights dominates the step, then TPOT climbs.\nCrosses: no longer fits (L4 "
                  "and RTX 4090 from 32 sequences, H100 from 256); the grey band is the Pareto frontier, all H100.",
          f"roofline plot throughput -m llama-3.1-8b --hardware {THREE_GPUS} --prompt-len 1024 --output-len 256 "
          "--out throughput.png"),
    Chart("llama-3.1-70b-fp8_tpot_batch", "Llama-3.1-70B FP8: TPOT vs batch, H100 (TP 2) vs H200 (TP 1)",
          lambda: plot.tpot_batch_chart(_paired("tpot-batch", PAIRS_70B, prompt_len=[2048], output_len=[256],
                                                **FP8_70B)),
          lambda: "FP8 weights and KV (73 GB of weights): two H100s each read half of them (2 x 3.35 TB/s) and "
                  "decode at 19.7 ms per token at B=1, one H200 (4.8 TB/s) at 24.2 ms.\nThe gap holds as the "
                  "batch grows; crosses: weights + KV + the prefill's activations (B x 2048 tokens) no longer fit.",
          "roofline plot tpot-batch -m llama-3.1-70b --hardware h100-sxm,h200 --tp 1,2 --weight-dtype fp8 "
          "--kv-dtype fp8 --prompt-len 2048 --output-len 256 --out tpot_batch.png   # all four pairs"),
    Chart("llama-3.1-70b-fp8_kv_memory", "Llama-3.1-70B FP8: KV memory vs context, H100 (TP 2) vs H200 (TP 1)",
          lambda: plot.kv_memory_chart(_paired("kv-memory", PAIRS_70B, batch=[16], **FP8_70B)),
          lambda: "16 sequences, FP8 KV: 164 kB per token for the model, half of it per GPU on the TP 2 pair "
                  "(dotted: the whole model's, equal to the H200's solid line).\nWith the weights (dashed), the "
                  "H100 pair (160 GB in all) holds 32k tokens per sequence, one H200 (141 GB) 16k.",
          "roofline plot kv-memory -m llama-3.1-70b --hardware h100-sxm,h200 --tp 1,2 --weight-dtype fp8 "
          "--kv-dtype fp8 --batch 16 --out kv_70b.png   # all four pairs"),
    Chart("deepseek-v3_kv_memory", "DeepSeek-V3 (MLA) vs Llama-3.1-405B (GQA): KV memory on H200, TP 8",
          lambda: plot.make_chart("kv-memory", "deepseek-v3,llama-3.1-405b", "h200", batch=[16], tp=[8],
                                  weight_dtype="fp8"),
          _kv_ratio,
          "roofline plot kv-memory -m deepseek-v3,llama-3.1-405b --hardware h200 --tp 8 --batch 16 "
          "--weight-dtype fp8 --out kv.png"),
    Chart("deepseek-v3_decode_roofline", "DeepSeek-V3 decode roofline on H200, TP 8",
          lambda: plot.make_chart("roofline", "deepseek-v3", "h200", batch=[64], context=[4096], tp=[8],
                                  weight_dtype="fp8", phases=("decode",)),
          lambda: "64 sequences decoding at context 4096, FP8 weights: the routed experts take 52% of the step at "
                  "~4.5 FLOP/B (64 tokens x 8 of 256 experts: 2 tokens per expert), the all-reduces 7%.\n"
                  "The absorbed latent attention (14%) runs at ~30 FLOP/B, twice Llama-3.1-405B's GQA decode at "
                  "TP 8 (16): MLA trades cache bytes for FLOPs.",
          "roofline plot roofline -m deepseek-v3 --hardware h200 --tp 8 --batch 64 --context 4096 "
          "--weight-dtype fp8 --phase decode --out ds_decode.png"),
    Chart("tpot_vs_tp", "Llama-3.1-70B on H100 SXM: TPOT vs TP degree",
          lambda: plot.make_chart("tp", "llama-3.1-70b", "h100-sxm", batch=[1, 64], prompt_len=[1024],
                                  output_len=[256], tp=[1, 2, 4, 8]),
          lambda: "bf16 weights (141 GB: TP 1 does not fit) split over 1 to 8 H100s; dashed lines are ideal "
                  "1/TP scaling from TP 1.\nAt B=1, TP 2 gives 1.9x, TP 4 3.3x, TP 8 5.3x: each GPU reads 1/TP of "
                  "the weights, but per-kernel fixed times and 161 one-shot all-reduces per step do not shrink.",
          "roofline plot tp -m llama-3.1-70b --hardware h100-sxm --tp 1,2,4,8 --batch 1,64 --prompt-len 1024 "
          "--output-len 256 --out tpot_vs_tp.png"),
)


def chart(name: str) -> Chart:
    for c in CHARTS:
        if c.name == name:
            return c
    raise KeyError(f"no gallery chart {name!r}; known: {', '.join(c.name for c in CHARTS)}")


def chart_json(c: Chart, fig) -> dict:
    return {"name": c.name, "title": c.title, "data": plot.plotted_data(fig)}


def _write_text(path: Path, text: str) -> None:
    atomic_write(path, text)


def render(c: Chart, folder: Path = GALLERY_DIR) -> Path:
    """Write <name>.png and <name>.json."""
    fig = c.build()
    png = plot.save(fig, folder / f"{c.name}.png")
    _write_text(folder / f"{c.name}.json", json.dumps(chart_json(c, fig), indent=1) + "\n")
    return png


def readme() -> str:
    lines = ["# Gallery", "",
             "Charts for a few telling scenarios, drawn by `calc.plot.charts` from the calculator's estimates "
             "(no measurements). Each PNG has its plotted data beside it as JSON; a test regenerates one "
             "and compares. Regenerate the whole gallery (PNGs, JSON and this README) with:", "",
             "```sh", COMMAND, "```", ""]
    for c in CHARTS:
        lines += [f"## {c.title}", "", f"![{c.title}]({c.name}.png)", "", *c.caption().splitlines(), ""]
        lines += [f"Data: [{c.name}.json]({c.name}.json)." + (f" Alone: `{c.command}`" if c.command else ""), ""]
    return "\n".join(lines)


def regenerate(only: list[str] | None = None, out: Path = GALLERY_DIR) -> None:
    """Regenerate reports/gallery/ (PNG, JSON, README); ``only`` names the charts to redraw."""
    out.mkdir(parents=True, exist_ok=True)
    for c in [chart(n) for n in only] if only else CHARTS:
        path = render(c, out)
        print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB)")
    if not only:
        _write_text(out / "README.md", readme())
        print(f"wrote {out / 'README.md'}")


def main() -> None:
    """`python -m calc.plot.gallery [--only NAME ...] [--out DIR]`, through typer as the CLI is."""
    def cli(only: Annotated[list[str] | None, typer.Option("--only", help="Chart names to regenerate (default: all).")] = None,
            out: Annotated[Path, typer.Option("--out", help="Folder (default: reports/gallery).")] = GALLERY_DIR) -> None:
        regenerate(only, out)

    typer.run(cli)


if __name__ == "__main__":  # pragma: no cover
    main()
