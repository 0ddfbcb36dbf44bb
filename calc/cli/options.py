"""Every command-line option that more than one command takes, defined once, with one type.

Scenario options (model, hardware, dtypes, attention, TP/PP/EP, engine) are the same in
estimate, ops, sweep and plot; options that take several values are text parsed by
calc.cli.values (`1,8,64` or `128:8192:128`), and commands that take one value say so.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Annotated

import typer

from calc.cli.values import check_value, in_range, one, parse_values
from calc.core.errors import SpecError
from calc.cost.setup import Setup
from calc.spec.catalog import load_hardware, load_model

ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Catalog name, YAML path, or HF config.json / folder (comma-separated where a command draws several).")]
HardwareOpt = Annotated[str, typer.Option("--hardware", help="Catalog name or YAML path, e.g. a calibrated profile (comma-separated where a command draws several).")]
WeightDtypeOpt = Annotated[str | None, typer.Option("--weight-dtype", help="Weights: bf16, fp16, fp8, int8, int4, fp4 (default: the model's; sweeps take a list).")]
KVDtypeOpt = Annotated[str | None, typer.Option("--kv-dtype", help="KV cache: bf16, fp16, fp8, int8, int4 (default: the model's; sweeps take a list).")]
ComputeDtypeOpt = Annotated[str | None, typer.Option("--compute-dtype", help="Matmul dtype (default: fp8 for fp8 weights, else the model's; under llama.cpp fp16 for quantised weights).")]
AttentionOpt = Annotated[str | None, typer.Option("--attention", help="Attention kernel: fused (FlashAttention, scores stay on chip) or unfused (default: the engine's, else fused).")]
EngineOpt = Annotated[str | None, typer.Option("--engine", help="Serving-engine preset: ideal, default, vllm, sglang, trtllm, llama.cpp, hf (default: the profile's own), or a preset file as `compare --fit` writes (PATH or PATH:NAME). See `roofline engines`.")]
GroupOpt = Annotated[int | None, typer.Option("--group-size", callback=in_range("--group-size"), help="Weights per quantisation scale for int8/int4/fp4 weights.")]
IdealOpt = Annotated[bool, typer.Option("--ideal", help="Pure roofline: peak FLOP/s and data-sheet bandwidth, no overheads.")]
TPOpt = Annotated[str, typer.Option("--tp", help="Tensor-parallel GPUs (shards heads, MLP, vocab; 2 all-reduces per layer); sweeps take a list.")]
PPOpt = Annotated[str, typer.Option("--pp", help="Pipeline stages (layers split; one activation send per stage boundary); sweeps take a list.")]
EPOpt = Annotated[int, typer.Option("--ep", callback=in_range("--ep"), help="Expert-parallel GPUs for MoE layers (divides --tp; 2 all-to-alls per MoE layer).")]
ImbalanceOpt = Annotated[float | None, typer.Option("--imbalance", callback=in_range("--imbalance"), help="MoE load imbalance under EP: busiest GPU's routed tokens over the mean (>= 1).")]
BatchOpt = Annotated[str, typer.Option("--batch", "-b", help="Sequences per batch: N, a list 1,8,64 or a range start:stop:step.")]
PromptOpt = Annotated[str, typer.Option("--prompt-len", "-t", help="Prompt tokens per sequence (list/range allowed).")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar (it is drawn on stderr only when stderr is a terminal).")]
OutputOpt = Annotated[str, typer.Option("--output-len", "-g", help="Output tokens per sequence (list/range allowed).")]
BandsOpt = Annotated[bool, typer.Option("--bands/--no-bands", help="Prediction bands beside each time and rate: where 80% of held-out measurements fell (calc/data/bands.yaml, or the profile's own).")]
SpecDraftOpt = Annotated[str | None, typer.Option("--spec-draft", help="Speculative decoding with this draft model (catalog name or path; same vocabulary as --model).")]
SpecHeadsOpt = Annotated[str | None, typer.Option("--spec-heads", help="Speculative decoding with EAGLE/MTP-style draft heads: LAYERS or LAYERS:WIDTH (hidden size; default the target's).")]
SpecKOpt = Annotated[int | None, typer.Option("--spec-k", callback=in_range("--spec-k"), help="Draft tokens proposed per verification step (with --spec-draft or --spec-heads).")]
SpecAcceptOpt = Annotated[float | None, typer.Option("--spec-accept", help="Acceptance rate per drafted token, in [0, 1).")]


@dataclass(frozen=True)
class Scenario:
    """The scenario options as given on the command line (text where a sweep takes a list)."""

    weight_dtype: str | None = None
    kv_dtype: str | None = None
    compute_dtype: str | None = None
    attention: str | None = None
    group_size: int | None = None  # None: not given (Setup's default applies)
    ideal: bool = False
    tp: str = "1"
    pp: str = "1"
    ep: int = 1
    imbalance: float | None = None  # None: not given (1, no imbalance)
    engine: str | None = None

    def setup(self) -> Setup:
        """The Setup, for commands that take one value of each."""
        return Setup.of(weight_dtype=self.weight_dtype, kv_dtype=self.kv_dtype, compute_dtype=self.compute_dtype,
                        attention=self.attention, ideal=self.ideal,
                        tp=one(parse_values(self.tp, "--tp"), "--tp"), pp=one(parse_values(self.pp, "--pp"), "--pp"),
                        ep=self.ep, **self.given())

    def given(self) -> dict:
        """group_size and imbalance where the command line gave them (else Setup's defaults)."""
        out = {} if self.group_size is None else {"group_size": self.group_size}
        return out if self.imbalance is None else {**out, "imbalance": self.imbalance}

    def check_applies(self, models) -> None:
        """An option that changes nothing for these models is a mistake, said so, not ignored:
        --group-size without quantised weights, --imbalance on dense models."""
        from calc.core.units import GROUP_SCALED, canonical_dtype

        given = [d.strip() for d in (self.weight_dtype or "").split(",") if d.strip()]
        try:
            dtypes = [canonical_dtype(d) for d in given] or [m.serving_dtype for m in models]
        except ValueError as exc:
            raise SpecError("--weight-dtype", None, str(exc)) from None
        if self.group_size is not None and not any(d in GROUP_SCALED for d in dtypes):
            raise SpecError("--group-size", None, f"applies to {'/'.join(GROUP_SCALED)} weights; the weights here "
                                                  f"are {', '.join(sorted(set(dtypes)))}")
        if self.imbalance not in (None, 1.0) and not any(m.moe for m in models):
            names = ", ".join(m.name for m in models)
            raise SpecError("--imbalance", None, f"applies to MoE models; {names} "
                                                 f"{'is' if len(models) == 1 else 'are'} dense")

    def hardware(self, ref: str):
        """The --hardware profile under the --engine preset."""
        return hardware_with_engine(ref, self.engine)


_SCENARIO_OPTIONS = (  # (name, option, default): the fields of Scenario, in --help order
    ("weight_dtype", WeightDtypeOpt, None), ("kv_dtype", KVDtypeOpt, None), ("compute_dtype", ComputeDtypeOpt, None),
    ("attention", AttentionOpt, None), ("group_size", GroupOpt, None), ("ideal", IdealOpt, False),
    ("tp", TPOpt, "1"), ("pp", PPOpt, "1"), ("ep", EPOpt, 1), ("imbalance", ImbalanceOpt, None),
    ("engine", EngineOpt, None),
)


def with_scenario(fn):
    """The scenario options, declared once for every command that takes a scenario (estimate, ops,
    sweep): the command declares ``scenario: Scenario`` and receives them in it. Typer reads the
    command's signature, so the options are spliced into it (before the command's output options)."""
    sig = inspect.signature(fn, eval_str=True)
    own = [q.replace(kind=inspect.Parameter.KEYWORD_ONLY) for q in sig.parameters.values() if q.name != "scenario"]
    extra = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=d, annotation=a)
             for n, a, d in _SCENARIO_OPTIONS]
    at = next((i for i, q in enumerate(own) if q.name in _OUTPUT_OPTIONS), len(own))
    params = own[:at] + extra + own[at:]

    @functools.wraps(fn)
    def wrapper(**kwargs):
        return fn(scenario=scenario_of(kwargs), **kwargs)

    wrapper.__signature__ = sig.replace(parameters=params)
    wrapper.__annotations__ = {q.name: q.annotation for q in params}
    return wrapper


def scenario_of(kwargs: dict) -> Scenario:
    """The Scenario of a command's parsed options, popped from ``kwargs`` (the rest stay): what
    with_scenario hands a command, and what the web API builds from the same parsed options."""
    return Scenario(**{n: kwargs.pop(n) for n, _, _ in _SCENARIO_OPTIONS if n in kwargs})


_OUTPUT_OPTIONS = ("spec_draft", "columns", "out", "fmt")  # the scenario options go before these
DEFAULT_SCENARIO = Scenario()


SPEC_K, SPEC_ACCEPT = 4, 0.7  # --spec-k and --spec-accept when a draft is given without them


def spec_config(draft: str | None, heads: str | None, k: int | None, accept: float | None):
    """The speculative-decoding options as a calc.cost.speculative.SpecConfig (None: not asked for);
    --spec-k or --spec-accept without a draft is a mistake (they would change nothing)."""
    from calc.cost.speculative import DraftHeads, SpecConfig

    if draft is None and heads is None:
        if k is not None or accept is not None:
            raise SpecError("--spec-k" if k is not None else "--spec-accept", None,
                            "needs --spec-draft or --spec-heads (no speculative decoding is asked for)")
        return None
    k = SPEC_K if k is None else k
    accept = SPEC_ACCEPT if accept is None else accept
    if draft is not None and heads is not None:
        raise SpecError("--spec-draft", None, "give --spec-draft or --spec-heads, not both")
    parsed = None
    if heads is not None:
        bits = heads.split(":")
        try:
            nums = [int(b) for b in bits]
        except ValueError:
            nums = []
        if len(nums) not in (1, 2) or min(nums) < 1:
            raise SpecError("--spec-heads", None, f"expected LAYERS or LAYERS:WIDTH (whole numbers >= 1), got {heads!r}")
        check_value(nums[0], "--spec-heads")
        if len(nums) == 2:
            check_value(nums[1], "--spec-heads width")
        parsed = DraftHeads(nums[0], nums[1] if len(nums) == 2 else None)
    return SpecConfig(k, accept, load_model(draft) if draft is not None else None, parsed)


def hardware_with_engine(ref: str, engine: str | None):
    """The --hardware profile under the --engine preset (None: the profile's own)."""
    return load_hardware(ref).with_engine(engine)
