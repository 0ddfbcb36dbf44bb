"""The charts of a capacity plan, as PNG bytes: cost vs latency (with the Pareto front), KV
cache over time, and the roofline of the chosen replica's GPU with its mean steps.

matplotlib is imported inside the functions (Agg canvas, no pyplot state); the roofline
uses calc.plot.charts.roofline_chart when that module is there and draws its own roofs otherwise.
"""

from __future__ import annotations

import io
import math

from calc.core import text as render
from calc.serving.effects.whatif import Steps
from calc.serving.planner.plan import Plan, Trial


def _figure(ncols: int = 1, size=(9.0, 4.8), margins: dict | None = None):
    """A figure of ``ncols`` axes side by side, at fixed margins (fractions of the figure, as
    Figure.subplots_adjust takes them): these charts' labels are of known sizes, and a
    constrained layout, which measures every tick label first, took most of their drawing time."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=100)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(**{"left": 0.8 / size[0], "right": 1 - 0.25 / size[0], "bottom": 0.55 / size[1],
                           "top": 1 - 0.6 / size[1], "wspace": 0.22, **(margins or {})})
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    return fig, axes


def _png(fig) -> bytes:
    from calc.plot.base import lay_out

    lay_out(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return buf.getvalue()


def _cost_axis(plan: Plan, t: Trial) -> float:
    return t.usd_per_hour if plan.prices_known else float(t.gpus)


def _front(points) -> list[tuple[float, float]]:
    """(cost, latency) points that no other point beats on both lower cost and lower latency."""
    out, best = [], math.inf
    for x, y in sorted(points):
        if y < best:
            out.append((x, y))
            best = y
    return out


def pareto_png(plan: Plan) -> bytes:
    """Cost against TTFT p99 and TPOT p99 for every simulated configuration (a miss whose run
    stopped once certain at what its p99 is at least); the Pareto front of those that meet the
    SLOs; the chosen one starred; SLO targets dashed."""
    from matplotlib.ticker import FuncFormatter

    fig, axes = _figure(2, (10.0, 4.6))
    trials = [t for t in plan.trials if t.same_as is None]
    chosen = plan.chosen
    targets = plan.workload.spec.slo.targets()
    ms = 1e3  # latencies drawn in milliseconds, labelled as plain numbers (not 4x10^-2 s)
    # a miss whose run the search stopped once it was certain sits at what its p99 is at least
    kinds = ((lambda t: t.meets, "o", "#2ca02c", "meets the SLOs", "ok"),
             (lambda t: not t.meets and t.whole, "o", "#bbbbbb", "misses", "miss"),
             (lambda t: not t.whole, "^", "#bbbbbb", "misses (at least: run stopped once certain)", "stopped"))
    for ax, metric in zip(axes, ("ttft", "tpot"), strict=True):
        for which, marker, color, label, gid in kinds:
            pts = [(_cost_axis(plan, t), ms * t.p99_at_least(metric)) for t in trials if which(t)]
            if pts:
                x, y = zip(*pts, strict=True)
                ax.scatter(x, y, s=28, c=color, marker=marker, edgecolors="#555555", linewidths=0.4, label=label,
                           zorder=3, gid=f"trials:{metric}:{gid}")
        ok_pts = [(_cost_axis(plan, t), ms * t.stats[f"{metric}_p99"]) for t in trials if t.meets]
        front = _front(ok_pts)
        if len(front) > 1:
            fx, fy = zip(*front, strict=True)
            ax.plot(fx, fy, "-", color="#2ca02c", lw=5, alpha=0.25, label="Pareto front", gid=f"front:{metric}")
        if chosen is not None:
            ax.scatter([_cost_axis(plan, chosen)], [ms * chosen.stats[f"{metric}_p99"]], marker="*", s=260,
                       c="#d62728", edgecolors="black", zorder=5, label="chosen", gid=f"chosen:{metric}")
        key = f"{metric}_p99"
        if key in targets:
            ax.axhline(ms * targets[key], color="#d62728", ls="--", lw=1, label="SLO target", gid=f"slo:{metric}")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:.1g}"[0] in "25" else ""))
        ax.set_xlabel("USD per hour (all replicas)" if plan.prices_known else "GPUs (price unknown)")
        ax.set_ylabel(f"{metric.upper()} p99 (ms)")
        ax.grid(True, alpha=0.3)
        ax.set_title(f"cost vs {metric.upper()} p99", fontsize=10)
    axes[0].legend(fontsize=8, loc="best")
    fig.suptitle(f"{plan.workload.spec.name}: every simulated configuration", fontsize=11)
    return _png(fig)


def kv_png(t: Trial) -> bytes:
    """One replica of the chosen configuration over the simulation: KV pages in use, running
    batch and waiting queue."""
    fig, (ax,) = _figure(1, (9.0, 4.2), {"right": 1 - 0.8 / 9.0, "bottom": 0.95 / 4.2})  # the twin axis; the legend below
    tl = t.sim.timeline
    step = max(1, tl["t_s"].size // 4000)
    x = tl["t_s"][::step]
    ax.plot(x, 100 * tl["kv_used"][::step], color="#1f77b4", lw=1, label="KV pages in use (%)", gid="kv_used")
    ax.set_ylim(0, 105)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("KV pages in use (% of the replica's pages)")
    ax2 = ax.twinx()
    ax2.plot(x, tl["running"][::step], color="#ff7f0e", lw=0.8, alpha=0.8, label="running batch", gid="running")
    ax2.plot(x, tl["waiting"][::step], color="#7f7f7f", lw=0.8, alpha=0.8, label="waiting", gid="waiting")
    ax2.axhline(t.replica.max_batch, color="#ff7f0e", ls=":", lw=1, label=f"max batch {t.replica.max_batch}")
    ax2.set_ylabel("requests")
    top = max(t.replica.max_batch, float(tl["running"].max(initial=0)), float(tl["waiting"].max(initial=0)))
    ax2.set_ylim(0, 1.08 * top)  # the max-batch line below the frame's top
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    # below the axes, so no line (the max-batch line spans the whole width) runs through it
    ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=4, frameon=False)
    ax.grid(True, alpha=0.3)
    ax.set_title(f"One replica of {t.label}: {t.sim.pages:,} KV pages of {t.replica.kv.block_size} tokens; "
                 f"mean use {t.sim.kv_used_mean:.0%}, {int(t.sim.preemptions.sum())} preemptions", fontsize=10)
    return _png(fig)


def roofline_png(t: Trial, steps: Steps) -> bytes:
    """The roofline of the chosen replica's GPU with its decode step (mean running batch, mean
    context) and a step that also carries a prefill chunk (the plan's ``what_if.steps``). Drawn by calc.plot.charts.roofline_chart
    (per-operator points of the decode step)."""
    from calc.plot.charts import roofline_chart

    r = t.replica
    decode, mixed, n, ctx = steps.decode, steps.with_chunk, steps.running, steps.context
    fig = roofline_chart(r.model, r.hw, batch=n, prompt_len=int(ctx), context=int(ctx),
                         weight_dtype=r.dt.weight, kv_dtype=r.dt.kv, tp=r.tp, phases=("decode",),
                         more_x=(float(decode.intensity), float(mixed.intensity)))
    ax = fig.axes[0]
    lo, hi = (math.log(v) for v in ax.get_xlim())  # log x: roofline_chart sets the limits
    for cost, label, color, dy in ((decode, f"decode step: {n} sequences at context {ctx:,.0f}", "#ff7f0e", -30),
                                   (mixed, "the same step plus a prefill chunk", "#1f77b4", 14)):
        x, y = float(cost.intensity), float(cost.flops / cost.time_s) / 1e12
        ax.scatter([x], [y], marker="P", s=220, c=color, edgecolors="black", zorder=6, gid=f"step:{label}")
        # the label on the side with more room, so it stays inside the axes (one hanging out of
        # them takes its width from the axes in the layout)
        right = (math.log(x) - lo) / (hi - lo) < 0.5
        ax.annotate(f"{label}\n{render.seconds(float(cost.time_s))}, {cost.bound}-bound", (x, y),
                    xytext=(12 if right else -12, dy), textcoords="offset points", ha="left" if right else "right",
                    fontsize=7, weight="bold", color=color)
    return _png(fig)
