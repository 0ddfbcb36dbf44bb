"""GET /api/explore: curves of the sweep's columns against batch or context, one per model x GPU.

The query is `roofline sweep`'s (its option names, parsed by its parameters: ``model`` and
``hardware`` comma lists, ``batch``, ``prompt-len`` or ``context``, ``output-len``, the scenario
options, ``columns``); the answer holds the same column names and values as the sweep's rows,
grouped into one curve per (model, hardware): ``{"curves": [{"model", "hardware", "batch": [...],
"prompt_len": [...], "ttft_s": [...], ...}]}``. It calls the vectorised estimator once per
curve (calc.cost.latency.estimate over the numeric axes) and the sweep's own column builder,
without a DataFrame, so the Explore page's four 200-point curves take milliseconds.
"""

from __future__ import annotations

import numpy as np
from fastapi import APIRouter, Request

from calc.core import limits
from calc.core.errors import SpecError
from calc.web.api import SCENARIO_REFS, answer, json_response
from calc.web.params import catalog_only, parse

router = APIRouter(prefix="/api")
DEFAULT_COLUMNS = "ttft_s,tpot_s,output_tokens_per_s"
AXES = ("batch", "prompt_len", "output_len")


def explore_answer(query: dict) -> dict:
    from calc.cli.options import scenario_of
    from calc.cli.values import parse_values, split_names
    from calc.cost.latency import estimate
    from calc.cost.sweep import TEXT, columns
    from calc.spec.catalog import load_model

    params = parse("sweep", query)
    catalog_only(params, SCENARIO_REFS)
    scenario = scenario_of(params)

    def run():
        cap = limits.max_scenarios()
        hint = "the most one request runs"
        prompt, output = (params["context"], "2") if params["context"] is not None else (params["prompt_len"],
                                                                                          params["output_len"])
        B = np.asarray(parse_values(params["batch"], "--batch", max_count=cap, raise_hint=hint), float)
        T = np.asarray(parse_values(prompt, "--prompt-len" if params["context"] is None else "--context",
                                    max_count=cap, raise_hint=hint), float)
        G = np.asarray(parse_values(output, "--output-len", max_count=cap, raise_hint=hint), float)
        models, hardware = split_names(params["model"]), split_names(params["hardware"])
        n = len(models) * len(hardware) * B.size * T.size * G.size
        if n > cap:
            raise SpecError("explore", None, limits.too_many("scenarios", n, cap, limits.SCENARIOS_ENV))
        keep = split_names(params["columns"] or DEFAULT_COLUMNS)
        setup = scenario.setup()
        curves = []
        for m_ref in models:
            model = load_model(m_ref)
            for h_ref in hardware:
                hw = scenario.hardware(h_ref)
                est = estimate(model, hw, B[:, None, None], T[None, :, None], G[None, None, :], setup)
                cols = columns(est, model, hw, setup.parallel.tp)
                unknown = [c for c in keep if c not in cols]
                if unknown:
                    raise SpecError("--columns", None, f"unknown column(s) {', '.join(unknown)}; "
                                                       f"known: {', '.join(cols)}")
                shape = np.broadcast_shapes(*(np.shape(cols[c]) for c in (*AXES, *keep)))
                curve = {"model": model.name, "hardware": hw.name}
                for c in (*AXES, *keep):
                    flat = np.broadcast_to(cols[c], shape).ravel()
                    curve[c] = [str(TEXT[c][int(v)]) for v in flat] if c in TEXT else flat
                curves.append(curve)
        return {"curves": curves, "scenarios": n}

    return answer(run)


@router.get("/explore")
def explore_route(request: Request):
    return json_response(explore_answer(dict(request.query_params)))
