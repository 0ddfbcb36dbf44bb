"""The JSON API of the page: the CLI's JSON contract, answered by the functions the CLI prints.

| route              | answers as                                   |
| ------------------ | -------------------------------------------- |
| GET /api/estimate  | `roofline estimate --format json`            |
| GET /api/ops       | `roofline ops --format json`                 |
| GET /api/sweep     | `roofline sweep --out x.jsonl` (its rows)    |
| GET /api/explore   | the sweep's columns as curves (calc.web.explore) |
| GET /api/show      | `roofline show REF --format json`            |
| GET /api/models    | `roofline models --format json`              |
| GET /api/hardware  | `roofline hardware --format json`            |
| GET /api/catalog   | models and hardware with their sources; engine names |

Query parameters are the commands' option names; a mistake is a 400 whose body is
``{"error": "roofline: error: ..."}``, the line the CLI prints. Scenario counts are capped as
the CLI caps them (``ROOFLINE_MAX_SCENARIOS``), sweeps too, so one request stays milliseconds.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from calc.core import limits
from calc.core import text as render
from calc.core.errors import SpecError
from calc.web.params import ApiError, catalog_only, parse, refuse

router = APIRouter(prefix="/api")
SCENARIO_REFS = {"model": "model", "hardware": "hardware", "spec_draft": "model"}


def json_response(obj, status: int = 200) -> Response:
    """JSON as the CLI writes it (numpy values converted, NaN and inf as null)."""
    return Response(render.to_json(obj), status_code=status, media_type="application/json")


def answer(fn, *args):
    """Run ``fn``; a SpecError (the CLI's user mistake) becomes the 400 of its line."""
    try:
        return fn(*args)
    except SpecError as exc:
        raise refuse(exc) from None


def _query(request: Request) -> dict[str, str]:
    return dict(request.query_params)


def estimate_answer(query: dict) -> dict | list:
    from calc.cli.estimate import estimate_json
    from calc.cli.options import scenario_of

    params = parse("estimate", query)
    catalog_only(params, SCENARIO_REFS)
    scenario = scenario_of(params)
    recs = answer(lambda: estimate_json(scenario=scenario, **params))
    return recs[0] if len(recs) == 1 else recs


def ops_answer(query: dict) -> dict:
    from calc.cli.options import scenario_of
    from calc.cost.breakdown import ops_records
    from calc.spec.catalog import load_model

    params = parse("ops", query)
    catalog_only(params, SCENARIO_REFS)
    scenario = scenario_of(params)

    def run():
        recs, summary = ops_records(load_model(params["model"]), scenario.hardware(params["hardware"]),
                                    str(params["phase"].value if hasattr(params["phase"], "value") else params["phase"]),
                                    params["batch"], params["seq_len"], scenario.setup())
        return {**summary, "ops": recs}

    return answer(run)


def sweep_answer(query: dict) -> list[dict]:
    import json

    from calc.cli.options import scenario_of
    from calc.cli.sweep import sweep_frame

    params = parse("sweep", query)
    catalog_only(params, SCENARIO_REFS)
    scenario = scenario_of(params)
    frame = answer(lambda: sweep_frame(scenario=scenario, max_scenarios=limits.max_scenarios(), **params))
    return json.loads(frame.to_json(orient="records", double_precision=15))


@router.get("/estimate")
def estimate_route(request: Request):
    return json_response(estimate_answer(_query(request)))


@router.get("/ops")
def ops_route(request: Request):
    return json_response(ops_answer(_query(request)))


@router.get("/sweep")
def sweep_route(request: Request):
    return json_response(sweep_answer(_query(request)))


@router.get("/show")
def show_route(request: Request):
    from calc.cli.catalog import hardware_summary, model_summary
    from calc.spec.catalog import hardware_catalog, load_hardware, load_model, model_catalog

    query = _query(request)
    ref = query.pop("ref", None)
    if ref is None or query:
        raise ApiError(400, "roofline: error: show: give ref=NAME (a model or hardware catalog name) and nothing else")
    if ref in model_catalog():
        return json_response(answer(lambda: model_summary(load_model(ref))))
    if ref in hardware_catalog():
        return json_response(answer(lambda: hardware_summary(load_hardware(ref))))
    catalog_only({"model": ref}, {"model": "model"})


def _listing(kind: str) -> list[dict]:
    from calc.cli.catalog import hardware_summary, model_summary
    from calc.spec.catalog import hardware_catalog, load_hardware, load_model, model_catalog

    if kind == "model":
        return [{**model_summary(s), "description": s.description, "sources": dict(s.sources)}
                for s in (load_model(n) for n in sorted(model_catalog()))]
    return [{**hardware_summary(h), "description": h.description, "sources": dict(h.sources)}
            for h in (load_hardware(n) for n in sorted(hardware_catalog()))]


@router.get("/models")
def models_route():
    return json_response([{k: v for k, v in r.items() if k not in ("description", "sources")}
                          for r in answer(_listing, "model")])


@router.get("/hardware")
def hardware_route():
    return json_response([{k: v for k, v in r.items() if k not in ("description", "sources")}
                          for r in answer(_listing, "hardware")])


@router.get("/catalog")
def catalog_route():
    """Every model and accelerator: the listing's numbers plus description and sources."""
    from calc.spec.engine import engines

    return json_response({"models": answer(_listing, "model"), "hardware": answer(_listing, "hardware"),
                          "engines": [{"name": e.name, "description": e.description} for e in engines().values()]})
