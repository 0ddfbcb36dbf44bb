"""Charts: the roofline picture and the sweep charts, as matplotlib Figures (calc.plot.ops,
calc.plot.sweeps); this module picks a chart kind's defaults and sweep and draws it.

Every chart function returns a ``matplotlib.figure.Figure`` (Agg canvas, no
pyplot state) and, given ``out``, saves it as PNG or SVG by suffix, atomically.
Plotted artists carry a ``gid`` ("series:<label>", "roof:<hw>:memory", ...), so
``plotted_data(fig)`` reads the numbers back from the figure itself: tests and
the gallery's JSON compare data, never pixels. Display units: ms, GB (1e9),
TFLOP/s, tokens/s; the axis labels name them.

matplotlib and pandas are imported inside the functions (``import calc`` stays light).
"""

from __future__ import annotations

import math

from calc.core import limits
from calc.core.errors import SpecError, suggest

# calc.plot.charts is the public face: the chart functions live in plot_ops and plot_sweeps.
from calc.plot.base import KINDS, _as_list, _one, _whole, check_out, plotted_data, save
from calc.plot.ops import breakdown_chart, breakdown_shares, op_group, roofline_chart
from calc.plot.sweeps import (
    kv_memory_chart,
    pareto,
    throughput_chart,
    tp_chart,
    tpot_batch_chart,
    tpot_context_chart,
    ttft_chart,
)

__all__ = ["KINDS", "breakdown_chart", "breakdown_shares", "check_kind", "check_out", "kv_memory_chart",
           "make_chart", "op_group", "pareto", "plotted_data", "roofline_chart", "save", "sweep_for",
           "throughput_chart", "tp_chart", "tpot_batch_chart", "tpot_context_chart", "ttft_chart"]


def _doubling(lo: int, hi: int) -> list[int]:
    """lo, 2 lo, 4 lo, ... up to hi, and hi itself when the last doubling falls well short."""
    out = [lo * 2**i for i in range(int(math.log2(hi / lo)) + 1)]
    return out + [hi] if hi > 1.5 * out[-1] else out


def _max_context(models) -> int:
    from calc.spec.catalog import load_model

    return min(load_model(m).max_context for m in models)


# Which of the numeric options each kind reads (model, hardware, dtypes and TP apply to all; a
# list draws one line per value, and the chart's own axis is the list it sweeps).
OPTIONS = {
    "ttft": ("batch", "prompt_len", "tp"),
    "tpot-batch": ("batch", "prompt_len", "output_len", "tp"),
    "tpot-context": ("batch", "context", "tp"),
    "throughput": ("batch", "prompt_len", "output_len", "tp"),
    "kv-memory": ("batch", "context", "tp"),
    "tp": ("batch", "prompt_len", "output_len", "tp"),
    "roofline": ("batch", "prompt_len", "context", "tp"),
    "breakdown": ("batch", "prompt_len", "context", "tp"),
}


TPOT_KINDS = ("tpot-batch", "throughput", "tp")  # charts whose y or x is TPOT at the options' output length


def check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise SpecError("KIND", None, f"unknown chart {kind!r} (known: {', '.join(KINDS)}){suggest(kind, KINDS, n=2)}")
    return kind


def sweep_for(kind: str, model="llama-3.1-8b", hardware="h100-sxm", *, batch=None, prompt_len=None,
              output_len=None, context=None, weight_dtype=None, kv_dtype=None, tp=None):
    """The calc.sweep frame a sweep chart plots, with the chart's default axis values."""
    from calc import sweep

    check_kind(kind)
    given = {"batch": batch, "prompt_len": prompt_len, "output_len": output_len, "context": context, "tp": tp}
    for name, value in given.items():
        if _as_list(value) and name not in OPTIONS[kind]:
            raise SpecError(f"--{name.replace('_', '-')}", None, f"does not apply to the {kind} chart")
    models = _as_list(model)
    if not models:
        raise SpecError("--model", None, "no model given")
    top = _max_context(models)
    batch, prompt_len, output_len = _as_list(batch), _as_list(prompt_len), _as_list(output_len)
    tp = _as_list(tp) or [1]
    if kind in TPOT_KINDS and min(output_len, default=2) < 2:
        raise SpecError("--output-len", None, f"the {kind} chart plots TPOT, the mean of a request's G - 1 decode "
                                              f"steps: it needs G >= 2 output tokens, got {min(output_len)}")
    if kind == "ttft":
        prompt_len, output_len = prompt_len or _doubling(128, min(32768, top)), [1]
    elif kind in ("tpot-context", "kv-memory"):
        # TPOT at context S: a request of T = S prompt tokens and G = 2 (one decode step at S);
        # KV held at context S: T = S, G = 1.
        prompt_len = _as_list(context) or (_doubling(1024, min(131072, top)) if kind == "kv-memory"
                                            else _doubling(512, min(131072, top - 1)))
        output_len = [2 if kind == "tpot-context" else 1]
        if max(prompt_len) + output_len[0] - 1 > top:
            raise SpecError("--context", None, f"{max(prompt_len)} exceeds the longest context this chart can "
                                               f"evaluate for the model(s): {top - output_len[0] + 1}")
    elif kind == "tpot-batch":
        batch = batch or _doubling(1, 256)
    elif kind == "throughput":
        batch = batch or _doubling(1, 512)
    elif kind == "tp":
        tp = _as_list(tp) if given["tp"] is not None else [1, 2, 4, 8]
    _check_size(kind, {"--model": models, "--hardware": _as_list(hardware), "--batch": batch or [1],
                       "--prompt-len": prompt_len or [512], "--output-len": output_len or [128], "--tp": tp,
                       "--weight-dtype": _as_list(weight_dtype) or [None], "--kv-dtype": _as_list(kv_dtype) or [None]})
    from calc.spec.bands import bands_for

    return sweep(model=models, hardware=_as_list(hardware), batch=batch or [1], prompt_len=prompt_len or [512],
                 output_len=output_len or [128], weight_dtype=_as_list(weight_dtype) or [None],
                 kv_dtype=_as_list(kv_dtype) or [None], tp=tp, bands=lambda hw: bands_for(hw)[0])


MAX_LINES = 64  # series one chart draws; more is unreadable and slow to render
# the list each sweep chart spreads along its x axis (context charts put the context in prompt_len)
AXIS = {"ttft": "--prompt-len", "tpot-batch": "--batch", "tpot-context": "--prompt-len", "throughput": "--batch",
        "kv-memory": "--prompt-len", "tp": "--tp"}


def _check_size(kind: str, lists: dict[str, list]) -> None:
    """Before the sweep: at most limits.max_scenarios() points and MAX_LINES lines (every list but
    the chart's axis draws one line per value)."""
    sizes = {k: len(v) for k, v in lists.items()}
    points = math.prod(sizes.values())
    if points > limits.max_scenarios():
        raise SpecError("plot", None, limits.too_many(f"points on the {kind} chart", points, limits.max_scenarios(),
                                                       limits.SCENARIOS_ENV))
    axis = AXIS[kind]
    lines = points // sizes[axis]
    if lines > MAX_LINES:
        many = ", ".join(f"{k} ({n})" for k, n in sizes.items() if n > 1 and k != axis)
        raise SpecError("plot", None, f"{lines:,} lines on one {kind} chart (at most {MAX_LINES}); "
                                      f"give fewer values to {many}")


SWEEP_CHARTS = {
    "ttft": ttft_chart, "tpot-batch": tpot_batch_chart, "tpot-context": tpot_context_chart,
    "throughput": throughput_chart, "kv-memory": kv_memory_chart, "tp": tp_chart,
}


def make_chart(kind: str, model="llama-3.1-8b", hardware="h100-sxm", *, batch=None, prompt_len=None,
               output_len=None, context=None, weight_dtype=None, kv_dtype=None, tp=None, phases=None, out=None):
    """Any chart kind from option values (one value, or a list where the chart draws one line per value)."""
    check_kind(kind)
    if out is not None:
        check_out(out)
    if phases is not None and kind != "roofline":
        raise SpecError("--phase", None, f"applies to the roofline chart only, not {kind}")
    if kind in ("roofline", "breakdown"):
        if output_len is not None:
            raise SpecError("--output-len", None, f"does not apply to the {kind} chart")
        opts = dict(batch=_one(batch, "--batch", kind, 1), prompt_len=_one(prompt_len, "--prompt-len", kind, 512),
                    context=_one(context, "--context", kind), weight_dtype=_one(weight_dtype, "--weight-dtype", kind),
                    kv_dtype=_one(kv_dtype, "--kv-dtype", kind), tp=_whole(_one(tp, "--tp", kind, 1), "--tp"), out=out)
        if kind == "breakdown":
            return breakdown_chart(model, hardware, **opts)
        return roofline_chart(_one(model, "--model", kind, required=True), hardware, phases=phases or ("prefill", "decode"), **opts)
    frame = sweep_for(kind, model, hardware, batch=batch, prompt_len=prompt_len, output_len=output_len,
                      context=context, weight_dtype=weight_dtype, kv_dtype=kv_dtype, tp=tp)
    return SWEEP_CHARTS[kind](frame, out=out)
