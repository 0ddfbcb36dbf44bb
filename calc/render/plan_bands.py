"""The plan report's bands: each configuration's SLOs at the nominal value and at the pessimistic
edge of its prediction bands (calc.serving.planner.bands), and the fragile ones named. Reads results."""

from __future__ import annotations

from calc.core import text as render
from calc.spec.workload import Target


def _shown(plan) -> list:
    return plan.ranked or [t for t in (plan.closest,) if t is not None]


def edge_record(bands, t) -> dict:
    e = bands.of(t)
    return {"load": e.load, "latency_s": e.latency_s, "band_s": {k: list(v) for k, v in e.band_s.items()},
            "groups": {k: {"group": g, "rows": n} for k, (g, n) in e.groups.items()},
            "meets_slos": e.meets, "failures": e.why() if not e.meets else None}


def add_to_record(rec: dict, plan, bands) -> dict:
    """The plan JSON with each shown configuration's ``edge`` beside its nominal ``latency_s`` and
    ``meets_slos``, and a top-level ``bands`` block (fragile configurations, --robust or not)."""
    for key in ("chosen", "closest"):
        t = plan.chosen if key == "chosen" else plan.closest
        if rec.get(key) and t is not None:
            rec[key]["edge"] = edge_record(bands, t)
    for r, t in zip(rec.get("ranked", []), plan.ranked, strict=True):
        r["edge"] = edge_record(bands, t)
    rec["bands"] = {"coverage": bands.table.coverage, "source": bands.source, "robust": bands.robust,
                    "slo_s": bands.targets, "searched_slo_s": bands.searched or None,
                    "fragile": [t.label for t in bands.fragile(plan.ranked)]}
    return rec


def headers(bands) -> list[str]:
    return ["configuration", "load", *[f"{Target.of(k, v).label} <= {render.seconds(v)}: nominal / edge"
                                       for k, v in bands.targets.items()], "meets at the edge"]


def rows(plan, bands) -> list[list[str]]:
    """One row per shown configuration: each SLO statistic nominal / at the edge, and the verdict."""
    out = []
    for t in _shown(plan):
        e = bands.of(t)
        cells = []
        for key in bands.targets:
            nominal, at_edge = t.stats.get(key), e.latency_s.get(key)
            cells.append(f"{render.seconds(nominal) if nominal is not None else '-'} / "
                         f"{render.seconds(at_edge) if at_edge is not None else '-'}")
        verdict = "yes" if e.meets else ("NO: fragile" if t.meets else "NO")
        out.append([t.label, e.load, *cells, verdict])
    return out


def summary(plan, bands) -> str:
    fragile = bands.fragile(plan.ranked)
    head = (f"Bands: each SLO at the pessimistic edge of its 80% band ({bands.source})"
            + (f"; --robust searched the SLOs tightened to {_targets(bands.searched)}, so every configuration "
               "listed meets the real ones at its edge" if bands.robust else "") + ".")
    if not plan.ranked:
        return head
    if fragile:
        return head + (f" Fragile (meet the SLOs nominally, miss them at the edge): "
                       f"{'; '.join(f'{t.label} ({bands.of(t).why()})' for t in fragile)}.")
    return head + " No configuration listed is fragile: each meets its SLOs at the edge too."


def _targets(targets: dict[str, float]) -> str:
    return ", ".join(f"{Target.of(k, v).label} {render.seconds(v)}" for k, v in targets.items())


def text_lines(plan, bands) -> list[str]:
    hs = headers(bands)
    return ["", summary(plan, bands), render.table(rows(plan, bands), hs, align="ll" + "r" * (len(hs) - 3) + "l")]


STATS = ("A simulated percentile is a predicted time; its band brackets the measurement between v e^-r90 and "
         "v e^-r10, r the held-out residuals log(predicted / measured) of its regime (calc/data/bands.yaml: "
         "family, load level by requests in flight, engine, precision, GPU family, with fallback to broader "
         "groups). The edge is the slow end.")


def section(d, plan, bands) -> None:
    """The report's section: every shown configuration at nominal and at the edge."""
    d.h(2, "Nominal and at the pessimistic edge of the bands")
    d.p(summary(plan, bands) + " " + STATS)
    hs = headers(bands)
    d.table(hs, rows(plan, bands), "ll" + "r" * (len(hs) - 3) + "l")
