"""The aggregated-vs-disaggregated chart of a plan: output tokens/s per GPU against tokens/s
per user (1 / TPOT p50) of every simulated deployment, with each kind's Pareto front."""

from __future__ import annotations

from calc.plot.plan import _figure, _png
from calc.serving.planner.disagg_search import front_points, pareto
from calc.serving.planner.plan import Plan

COLORS = {"aggregated": "#1f77b4", "disaggregated": "#ff7f0e"}


def front_png(plan: Plan) -> bytes:
    fig, (ax,) = _figure(1, (8.0, 4.8))
    pts = front_points([t for t in plan.trials if t.same_as is None], plan.disagg)
    for kind, color in COLORS.items():
        mine = [p for p in pts if p.kind == kind]
        for ok, fill in ((True, color), (False, "none")):
            sel = [p for p in mine if p.meets == ok]
            if sel:
                ax.scatter([p.tokens_per_s_per_user for p in sel], [p.tokens_per_s_per_gpu for p in sel], s=30,
                           facecolors=fill, edgecolors=color, linewidths=1, zorder=3, gid=f"{kind}:{ok}",
                           label=f"{kind}, {'meets the SLOs' if ok else 'misses'}")
        front = pareto(mine)
        if len(front) > 1:
            ax.plot([p.tokens_per_s_per_user for p in front], [p.tokens_per_s_per_gpu for p in front], "-",
                    color=color, lw=4, alpha=0.3, gid=f"front:{kind}", label=f"{kind} Pareto front")
    tpot = plan.workload.spec.slo.tpot_p50_s
    if tpot:
        ax.axvline(1.0 / tpot, color="#d62728", ls="--", lw=1, label="TPOT p50 target")
    ax.set_xlabel("tokens/s per user (1 / TPOT p50)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    ax.set_title(f"{plan.workload.spec.name}: aggregated vs disaggregated", fontsize=11)
    return _png(fig)
