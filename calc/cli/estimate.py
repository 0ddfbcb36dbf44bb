"""estimate, ops, intensity: one scenario's request, operators, or whole-model intensity."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import numpy as np
import typer

from calc.cli.base import Format, FormatOpt, command, emit
from calc.cli.options import (
    DEFAULT_SCENARIO,
    BandsOpt,
    BatchOpt,
    HardwareOpt,
    KVDtypeOpt,
    ModelOpt,
    OutputOpt,
    PromptOpt,
    Scenario,
    SpecAcceptOpt,
    SpecDraftOpt,
    SpecHeadsOpt,
    SpecKOpt,
    WeightDtypeOpt,
    spec_config,
    with_scenario,
)
from calc.cli.values import in_range, parse_values
from calc.core import limits
from calc.core import text as render
from calc.core.errors import SpecError
from calc.spec.catalog import load_model


@command("estimate")
@with_scenario
def estimate_cmd(
    model: ModelOpt,
    hardware: HardwareOpt,
    batch: BatchOpt = "1",
    prompt_len: PromptOpt = "512",
    output_len: OutputOpt = "128",
    scenario: Scenario = DEFAULT_SCENARIO,
    spec_draft: SpecDraftOpt = None,
    spec_heads: SpecHeadsOpt = None,
    spec_k: SpecKOpt = None,
    spec_accept: SpecAcceptOpt = None,
    bands: BandsOpt = True,
    fmt: FormatOpt = Format.table,
) -> None:
    """Prefill and decode roofline, TTFT / TPOT / e2e (seconds), throughput (tokens/s) and memory (bytes).

    A request of G outputs is one prefill at T, then G - 1 decode steps at contexts
    T .. T+G-2; TPOT is their mean. FLOPs count a multiply-add as 2. With --spec-draft or
    --spec-heads, the speculative TPOT (k drafted tokens, one verification pass) is shown beside it.
    """
    from calc.render.estimate import estimate_rows_text, estimate_text, flat_record

    recs = estimate_json(model, hardware, batch, prompt_len, output_len, scenario, spec_draft, spec_heads, spec_k,
                         spec_accept, bands)
    if fmt is Format.json:
        typer.echo(render.to_json(recs[0] if len(recs) == 1 else recs))
    elif fmt is Format.csv:
        typer.echo(render.to_csv(flat_record(r) for r in recs), nl=False)
    else:
        typer.echo(estimate_text(recs[0]) if len(recs) == 1 else estimate_rows_text(recs))


def estimate_json(model: str, hardware: str, batch: str = "1", prompt_len: str = "512", output_len: str = "128",
                  scenario: Scenario = DEFAULT_SCENARIO, spec_draft: str | None = None, spec_heads: str | None = None,
                  spec_k: int | None = None, spec_accept: float | None = None, bands: bool = True) -> list[dict]:
    """The records `estimate --format json` prints (one per scenario), from the options as parsed:
    the command and the web API (calc.web) both answer with these."""
    from calc.cost.latency import estimate
    from calc.cost.speculative import speculative
    from calc.render.estimate import estimate_records
    from calc.spec.bands import bands_for

    spec, hw = load_model(model), scenario.hardware(hardware)
    scenario.check_applies([spec])
    B = parse_values(batch, "--batch")
    T = parse_values(prompt_len, "--prompt-len")
    G = parse_values(output_len, "--output-len")
    n = len(B) * len(T) * len(G)
    if n > limits.max_scenarios():
        raise SpecError("--batch/--prompt-len/--output-len", None,
                        limits.too_many("scenarios", n, limits.max_scenarios(), limits.SCENARIOS_ENV))
    grid = np.meshgrid(B, T, G, indexing="ij")
    est = estimate(spec, hw, *grid, scenario.setup())
    spec_cfg = spec_config(spec_draft, spec_heads, spec_k, spec_accept)
    return estimate_records(est, speculative(est, spec_cfg) if spec_cfg is not None else None,
                            bands_for(hw) if bands else None)


class Phase(str, Enum):
    prefill = "prefill"
    decode = "decode"


@command("ops")
@with_scenario
def ops_cmd(
    model: ModelOpt,
    hardware: HardwareOpt,
    phase: Annotated[Phase, typer.Option("--phase", help="prefill (seq-len prompt tokens) or decode (one token at context seq-len).")] = Phase.decode,
    batch: Annotated[int, typer.Option("--batch", "-b", callback=in_range("--batch"), help="Sequences per batch.")] = 1,
    seq_len: Annotated[int, typer.Option("--seq-len", "-s", callback=in_range("--seq-len"), help="Prompt tokens (prefill) or cached context (decode).")] = 1024,
    scenario: Scenario = DEFAULT_SCENARIO,
    fmt: FormatOpt = Format.table,
) -> None:
    """Per-operator breakdown of one pass: one layer's FLOPs, bytes, intensity and time, the totals, sorted by time."""
    from calc.cost.breakdown import ops_records
    from calc.render.ops import ops_text

    spec, hw = load_model(model), scenario.hardware(hardware)
    scenario.check_applies([spec])
    recs, summary = ops_records(spec, hw, phase.value, batch, seq_len, scenario.setup())
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
    from calc.cost.breakdown import intensity_records
    from calc.render.ops import intensity_text

    spec = load_model(model)
    recs = intensity_records(spec, parse_values(seq_len, "--seq-len"), weight_dtype, kv_dtype)
    if fmt is Format.table:
        typer.echo(intensity_text(spec, recs))
    else:
        emit(fmt, recs, [], [])
