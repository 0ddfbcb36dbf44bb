"""Charts of one pass's operators: the roofline chart and the phase breakdown."""

from __future__ import annotations

import itertools
import math

import numpy as np

from calc.core.errors import SpecError
from calc.core.units import TERA
from calc.plot.base import MARKERS, PHASE_COLORS, ROOF_COLORS, _as_list, _figure, _finish, _whole

# --------------------------------------------------------------------------- the roofline chart


def _op_points(cost) -> tuple[list, list]:
    """(intensity, achieved FLOP/s, share of phase time, name) per operator; and the names left out."""
    total = float(cost.time_s)
    pts, left_out = [], []
    for t in cost.ops:
        op = t.op
        flops, time_s, intensity = float(op.flops), float(t.time_s), float(t.intensity)
        if op.kind == "comm" or flops <= 0 or time_s <= 0 or not math.isfinite(intensity):
            left_out.append(op.name)
            continue
        pts.append((intensity, flops / time_s, float(t.total_time_s) / total, op.name))
    return pts, left_out


def roofline_chart(model, hardware, batch=1, prompt_len=512, context=None, *, weight_dtype=None, kv_dtype=None,
                   tp=1, phases=("prefill", "decode"), datasheet=True, out=None, more_x=()):
    """Log-log roofline: per hardware the memory roof (bandwidth x memory efficiency) and a
    compute roof per dtype the operators run at (peak x compute efficiency), ridge points
    labelled, data-sheet roofs dashed; each operator of the prefill (T = prompt_len) and
    decode step (context S) at (FLOP/byte, FLOP/time), area by share of the phase's time;
    whole phases bigger and outlined. Communication operators have no intensity: left out.
    ``more_x``: intensities of points the caller draws after, which the x range holds too."""
    from matplotlib.lines import Line2D

    from calc.cost.breakdown import phase_for
    from calc.cost.efficiency import Efficiency
    from calc.cost.roofline import peak_for
    from calc.cost.setup import Setup
    from calc.spec.catalog import load_hardware, load_model

    spec = load_model(model)
    hws = [load_hardware(h) for h in _as_list(hardware)]
    if not hws:
        raise SpecError("--hardware", None, "no hardware given")
    batch, prompt_len = _whole(batch, "--batch"), _whole(prompt_len, "--prompt-len")
    context = prompt_len if context is None else _whole(context, "--context")
    phases = tuple(phases)
    if not phases or any(p not in PHASE_COLORS for p in phases):
        raise SpecError("--phase", None, f"must be prefill, decode or both, got {', '.join(phases) or 'none'}")
    fig, ax = _figure()
    setup = Setup.of(weight_dtype=weight_dtype, kv_dtype=kv_dtype, tp=tp)
    drawn, left_out, handles = [], set(), []
    for i, hw in enumerate(hws):
        for phase in phases:
            cost, dt = phase_for(spec, hw, phase, batch, prompt_len if phase == "prefill" else context, setup)
            pts, skipped = _op_points(cost)
            left_out.update(skipped)
            drawn.append((i, hw, phase, cost, dt, pts))
    xs = [p[0] for d in drawn for p in d[5]] + [float(d[3].intensity) for d in drawn] + [float(x) for x in more_x]
    ridges = []
    roofs = {}
    for i, hw in enumerate(hws):
        dt = next(d[4] for d in drawn if d[0] == i)
        eff = Efficiency.of(hw).for_dtype(dt.compute)
        bw = hw.memory_bandwidth_bytes_per_s
        peaks: dict[float, list[str]] = {}
        for name, cls in ((dt.compute, "matmul"), (dt.attention_compute, "attention")):
            names = peaks.setdefault(peak_for(hw, dt, cls), [])
            if name not in names:
                names.append(name)
        roofs[i] = (hw, eff, bw, peaks)
        ridges += [p * eff.compute / (bw * eff.memory) for p in peaks] + [p / bw for p in peaks]
    x_lo, x_hi = min(min(xs), 1.0) / 3, max(max(xs), *ridges) * 4
    ax.set_xlim(x_lo, x_hi)
    for i, (hw, eff, bw, peaks) in roofs.items():
        color = ROOF_COLORS[i % len(ROOF_COLORS)]
        top = max(peaks)
        for scale_c, scale_m, style, kind in ((eff.compute, eff.memory, "-", "roof"), (1.0, 1.0, "--", "datasheet")):
            if kind == "datasheet" and not datasheet:
                continue
            alpha, lw = (1.0, 1.6) if kind == "roof" else (0.45, 1.0)
            mem = bw * scale_m
            ax.plot([x_lo, top * scale_c / mem], [x_lo * mem / TERA, top * scale_c / TERA], style, color=color,
                    lw=lw, alpha=alpha, gid=f"{kind}:{hw.name}:memory")
            for j, (peak, names) in enumerate(sorted(peaks.items(), reverse=True)):
                ridge = peak * scale_c / mem
                ax.plot([ridge, x_hi], [peak * scale_c / TERA] * 2, style if j == 0 else ":" if kind == "roof"
                        else "--", color=color, lw=lw, alpha=alpha, gid=f"{kind}:{hw.name}:{'/'.join(names)}")
                if kind == "roof":
                    ax.scatter([ridge], [peak * scale_c / TERA], marker="|", s=120, color=color, zorder=4,
                               gid=f"ridge:{hw.name}:{'/'.join(names)}")
                    ax.annotate(f"ridge {ridge:.0f}", (ridge, peak * scale_c / TERA),
                                xytext=(-4, 5), textcoords="offset points", ha="right", fontsize=7, color=color)
        main = max(peaks)
        handles.append(Line2D([], [], color=color, marker=MARKERS[i % len(MARKERS)], markerfacecolor="none",
                              label=f"{hw.name}: {bw * eff.memory / 1e12:.2f} TB/s, "
                                    f"{'/'.join(peaks[main])} {main * eff.compute / TERA:.0f} TFLOP/s, "
                                    f"ridge {main * eff.compute / (bw * eff.memory):.0f} FLOP/B"))
    for i, hw, phase, cost, _dt, pts in drawn:
        marker, color = MARKERS[i % len(MARKERS)], PHASE_COLORS[phase]
        x = np.array([p[0] for p in pts])
        y = np.array([p[1] for p in pts]) / TERA
        share = np.array([p[2] for p in pts])
        ax.scatter(x, y, s=12 + 600 * share, c=color, marker=marker, alpha=0.7, edgecolors="white",
                   linewidths=0.5, zorder=3, gid=f"ops:{hw.name}:{phase}")
        px, py = float(cost.intensity), float(cost.flops / cost.time_s) / TERA
        ax.scatter([px], [py], s=200, c=color, marker=marker, alpha=0.8, edgecolors="black", linewidths=1.8, zorder=5,
                   gid=f"phase:{hw.name}:{phase}")
        if i == 0:
            ax.annotate(phase, (px, py), xytext=(10, -12), textcoords="offset points", fontsize=8, weight="bold")
        if len(hws) == 1:  # name the operators that take a tenth of the phase or more
            for xi, yi, si, name in pts:
                if si >= 0.1:
                    ax.annotate(f"{name} {si:.0%}", (xi, yi / TERA), xytext=(-8, 8), textcoords="offset points",
                                ha="right", fontsize=7, color="#333333")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved TFLOP/s (operator FLOPs / operator time)")
    handles += [Line2D([], [], color=PHASE_COLORS[p], marker="o", ls="", label=f"{p} operators") for p in phases]
    handles.append(Line2D([], [], color="#999999", marker="o", ls="", markersize=11, markeredgecolor="black",
                          markeredgewidth=1.8, label="whole phase"))
    if datasheet:
        handles.append(Line2D([], [], color="#777777", ls="--", label="data-sheet roofs"))
    dt = drawn[0][4]
    what = " and ".join(f"prefill T={prompt_len}" if p == "prefill" else f"decode at S={context}" for p in phases)
    title = (f"{spec.name}: batch {batch}, {what}\n"
             f"weights {dt.weight}, KV {dt.kv}, compute {dt.compute}" + (f", TP {tp}" if tp > 1 else ""))
    comm = sorted(n for n in left_out if n.startswith(("tp.", "ep.", "pp.")))
    other = sorted(n for n in left_out if n not in comm)
    comm_share = ", ".join(f"{float(cost.comm_s / cost.time_s):.0%} of {phase}"
                           for i, _hw, phase, cost, _dt, _pts in drawn if i == 0)
    note = ("Marker area: share of the phase's time. Solid roofs: data sheet x the profile's efficiencies "
            "(dotted: the attention dtype). Left out: ")
    note += "; ".join(filter(None, [
        f"communication ({', '.join(comm)}: no arithmetic intensity; {comm_share} on {hws[0].name}, counted in "
        "the whole-phase points)" if comm else "", f"{', '.join(other)} (0 FLOPs)" if other else ""])) or "nothing"
    return _finish(fig, ax, title, note + ".", out, handles)



# --------------------------------------------------------------------------- phase breakdown

GROUP_COLORS = {
    "attention projections": "#1f77b4", "attention (QK^T, PV)": "#d62728", "MLP matmuls": "#2ca02c",
    "MoE (router, experts)": "#17becf", "lm_head": "#9467bd", "elementwise, embedding, sampling": "#bcbd22",
    "communication": "#7f7f7f", "step overhead": "#000000",
}


def op_group(name: str, kind: str) -> str:
    """The bar segment an operator belongs to."""
    if kind == "comm":
        return "communication"
    if kind == "attention":
        return "attention (QK^T, PV)"
    if name.startswith("moe."):
        return "MoE (router, experts)"
    if name.startswith("mlp.") and kind == "linear":
        return "MLP matmuls"
    if name == "lm_head":
        return "lm_head"
    return "attention projections" if kind == "linear" else "elementwise, embedding, sampling"


def breakdown_shares(model, hardware, phase, batch, seq_len, setup=None) -> tuple[dict[str, float], float]:
    """Share of a pass's time per operator group (summing to 1) and the pass time in seconds."""
    from calc.cost.breakdown import ops_records
    from calc.cost.setup import DEFAULT

    recs, summary = ops_records(model, hardware, phase, batch, seq_len, setup or DEFAULT)
    shares: dict[str, float] = dict.fromkeys(GROUP_COLORS, 0.0)
    for r in recs:
        if r["kind"] != "overhead":  # the step overhead row gets its own group below
            shares[op_group(r["op"], r["kind"])] += r["share"]
    shares["step overhead"] = summary["step_overhead_s"] / summary["time_s"]
    return shares, summary["time_s"]


def breakdown_chart(model, hardware, batch=1, prompt_len=512, context=None, *, weight_dtype=None, kv_dtype=None,
                    tp=1, out=None):
    """Stacked bars: share of the prefill (T = prompt_len) and decode-step (context S) time per
    operator group, for each model x hardware; the phase time above each bar."""
    from calc.cost.setup import Setup
    from calc.spec.catalog import load_hardware, load_model

    specs = [load_model(m) for m in _as_list(model)]
    hws = [load_hardware(h) for h in _as_list(hardware)]
    if not specs or not hws:
        raise SpecError("--model" if not specs else "--hardware", None, "no value given")
    batch, prompt_len = _whole(batch, "--batch"), _whole(prompt_len, "--prompt-len")
    context = prompt_len if context is None else _whole(context, "--context")
    setup = Setup.of(weight_dtype=weight_dtype, kv_dtype=kv_dtype, tp=tp)
    bars, names = [], []
    for spec, hw in itertools.product(specs, hws):
        for phase, n in (("prefill", prompt_len), ("decode", context)):
            bars.append(breakdown_shares(spec, hw, phase, batch, n, setup))
            who = ", ".join(filter(None, [spec.name if len(specs) > 1 else "", hw.name if len(hws) > 1 else ""]))
            names.append(f"{who}\n{phase}" if who else phase)
    fig, ax = _figure()
    pos = np.arange(len(bars), dtype=float) + np.repeat(np.arange(len(bars) // 2) * 0.5, 2)
    bottom = np.zeros(len(bars))
    for group, color in GROUP_COLORS.items():
        h = np.array([b[0][group] for b in bars]) * 100
        if h.any():
            ax.bar(pos, h, 0.7, bottom=bottom, color=color, label=group)
            bottom += h
    from calc.core import text as render

    for p, (_, time_s) in zip(pos, bars, strict=True):
        ax.annotate(render.seconds(time_s), (p, 100), xytext=(0, 3), textcoords="offset points", ha="center",
                    fontsize=8)
    ax.set_xticks(pos, names)
    ax.set_ylim(0, 108)
    ax.set_ylabel("share of the phase's time (%)")
    dt_name = f"weights {weight_dtype or specs[0].default_weight_dtype}, KV {kv_dtype or specs[0].serving_dtype}"
    title = (f"Where the time goes: {', '.join(s.name for s in specs) if len(specs) > 1 else specs[0].name}"
             f"{'' if len(hws) > 1 else ' on ' + hws[0].name}\nbatch {batch}, prefill T={prompt_len}, decode at "
             f"S={context}, {dt_name}" + (f", TP {tp}" if tp > 1 else ""))
    return _finish(fig, ax, title, "Above each bar: the phase's time (prefill = TTFT; decode = one step).", out)


