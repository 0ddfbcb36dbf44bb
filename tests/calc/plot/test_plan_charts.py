"""The plan's charts: latencies in milliseconds as plain numbers; the KV chart's legend clear of its lines."""

import pytest

import calc.plot.plan as pp
from calc.serving.planner.plan import plan
from calc.spec.workload import load_workload

WORKLOAD = "reports/plans/workloads/chat-llama-3.1-8b.yaml"


@pytest.fixture(scope="module")
def small_plan():
    return plan(load_workload(WORKLOAD, requests=100))


def test_latency_axes_are_milliseconds(small_plan, monkeypatch):
    monkeypatch.setattr(pp, "_png", lambda fig: fig)
    fig = pp.pareto_png(small_plan)
    ttft, tpot = fig.axes[:2]
    assert ttft.get_ylabel() == "TTFT p99 (ms)" and tpot.get_ylabel() == "TPOT p99 (ms)"
    # the workload's TPOT p99 target is 0.04 s: the dashed line sits at 40 (ms), labelled "40"
    [slo] = [ln for ln in tpot.get_lines() if ln.get_gid() == "slo:tpot"]
    assert slo.get_ydata()[0] == pytest.approx(40.0)
    fmt = tpot.yaxis.get_major_formatter()
    assert fmt(10.0, 0) == "10" and fmt(100.0, 0) == "100" and "10^" not in fmt(0.01, 0)


def test_kv_legend_is_clear_of_the_max_batch_line(small_plan, monkeypatch):
    monkeypatch.setattr(pp, "_png", lambda fig: fig)
    fig = pp.kv_png(small_plan.chosen)
    fig.canvas.draw()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent()
    plot_area = ax.get_window_extent()
    # the max-batch line spans the plot area's whole width: a legend inside it would be crossed
    assert not legend.overlaps(plot_area)
    ax2 = fig.axes[1]
    [cap] = [ln for ln in ax2.get_lines() if ln.get_label().startswith("max batch")]
    assert cap.get_ydata()[0] < ax2.get_ylim()[1]  # drawn inside the frame


def _overlaps(fig):
    from matplotlib.text import Annotation

    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    out = []
    for ax in fig.axes:
        boxes = [(t.get_text(), t.get_window_extent(r)) for t in ax.texts if isinstance(t, Annotation)]
        out += [(a, b) for i, (a, x) in enumerate(boxes) for b, y in boxes[i + 1:] if x.overlaps(y)]
    return out


def test_roofline_labels_do_not_cover_each_other(small_plan, monkeypatch):
    # The plan's roofline (operators, the ridge label, the two step annotations) and the
    # single-GPU operator chart: after declutter no label's box overlaps another's.
    from calc.plot.base import declutter
    from calc.plot.charts import roofline_chart

    monkeypatch.setattr(pp, "_png", lambda fig: (declutter(fig), fig)[1])
    steps = small_plan.what_if.steps
    fig = pp.roofline_png(small_plan.chosen, steps)
    assert _overlaps(fig) == []
    fig = roofline_chart("llama-3.1-8b", "l4", batch=1, prompt_len=512, context=512)
    declutter(fig)
    assert _overlaps(fig) == []


@pytest.mark.parametrize("workload", [WORKLOAD, "reports/plans/workloads/rag-llama-3.1-70b.yaml"])
def test_roofline_steps_and_their_labels_sit_inside_the_axes(workload, monkeypatch):
    """Both step markers lie inside the plot area (the prefill step's intensity can pass the
    chart's own points), and their labels inside the figure, clear of the legend (a label hanging
    far out of the axes to the right ran under it, or squeezed the axes to make room)."""
    from matplotlib.text import Annotation

    from calc.plot.base import lay_out

    p = plan(load_workload(workload, requests=100))
    monkeypatch.setattr(pp, "_png", lambda fig: (lay_out(fig), fig)[1])
    fig = pp.roofline_png(p.chosen, p.what_if.steps)
    fig.canvas.draw()
    ax, r = fig.axes[0], fig.canvas.get_renderer()
    frame = ax.get_window_extent()
    steps = [c for c in ax.collections if (c.get_gid() or "").startswith("step:")]
    assert len(steps) == 2
    for c in steps:
        x, y = ax.transData.transform(c.get_offsets()[0])
        assert frame.x0 < x < frame.x1 and frame.y0 < y < frame.y1
    labels = [t for t in ax.texts if isinstance(t, Annotation) and "-bound" in t.get_text()]
    assert len(labels) == 2
    legend = fig.legends[0].get_window_extent(r)
    for t in labels:
        box = t.get_window_extent(r)
        assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and not box.overlaps(legend), t.get_text()
        assert box.x1 <= frame.x1 + 0.1 * frame.width, t.get_text()  # at most a little past the frame
