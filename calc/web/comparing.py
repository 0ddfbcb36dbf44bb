"""POST /api/compare: uploaded benchmark results, measured vs predicted, as `roofline compare --format json`.

The body is ``{"files": [{name, text}, ...], "options": {model, hardware, tp, ...}}``: the
result files (and any ``<stem>.roofline.yaml`` sidecars) go into the request's own folder,
the options are parsed by the ``compare`` command's parameters, and calc.accuracy.compare
reads and predicts them exactly as the command does. Names in the answer are the uploaded
names, never the server's folder.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from calc.core import text as render
from calc.core.errors import SpecError
from calc.web.params import ApiError, catalog_only, confined, parse, refuse
from calc.web.uploads import files_of, read_json, request_folder, unfold, write_files

router = APIRouter(prefix="/api")
SIDECAR = ".roofline.yaml"


def compare_answer(body: dict) -> str:
    """The JSON text of the comparison (the CLI's json_record), with the folder's path taken out."""
    from calc.accuracy.compare import compare_files
    from calc.accuracy.scenario import Conditions
    from calc.render.compare import json_record

    files = files_of(body)
    if not any(not n.endswith(SIDECAR) for n, _ in files):
        raise ApiError(400, "roofline: error: compare: upload at least one benchmark result file")
    options = body.get("options") or {}
    if not isinstance(options, dict):
        raise ApiError(400, "roofline: error: options: expected an object")
    with request_folder() as folder:
        paths = write_files(folder, files)
        results = [p for p in paths if not p.name.endswith(SIDECAR)]
        params = parse("compare", {k: str(v) for k, v in options.items() if v not in (None, "")},
                       tuple(str(p) for p in results))
        catalog_only(params, {"model": "model", "hardware": "hardware"})
        engine = params.get("engine")
        if engine is not None and engine.endswith((".yaml", ".yml")):  # a preset file: one uploaded with it
            confined(engine, "--engine", "preset")
            params["engine"] = str(folder / Path(engine).name)
        try:
            _check_sidecars(paths)
            _check_model_ids(results)
            conditions = Conditions(**{k: params.get(k) for k in ("model", "hardware", "engine", "tp", "pp", "ep",
                                                                  "gpus", "weight_dtype", "kv_dtype", "compute_dtype")})
            runs, failures, _ = compare_files(results, conditions)
        except SpecError as exc:
            raise ApiError(400, unfold(refuse(exc).line, folder)) from None
        record = json_record(runs, [(f, f"roofline: error: {m}") for f, m in failures])
        return unfold(render.to_json(record), folder)


def _check_sidecars(paths: list[Path]) -> None:
    """A sidecar states catalog names (and a preset uploaded beside it), never a path elsewhere."""
    from calc.accuracy.scenario import read_sidecar

    for p in paths:
        if p.name.endswith(SIDECAR):
            result = p.with_name(p.name[: -len(SIDECAR)] + ".json")
            side, _ = read_sidecar(result)
            catalog_only({"model": side.model, "hardware": side.hardware}, {"model": "model", "hardware": "hardware"})
            confined(side.engine, p.name, "engine")


def _check_model_ids(results: list[Path]) -> None:
    """A result whose model id is a path on the server is refused (the CLI would read it)."""
    from calc.accuracy.benchmarks import read_results

    for f in results:
        try:
            runs = read_results(f)
        except SpecError:
            continue  # compare_files reports it as the command does
        for run in runs:
            mid = run.model_id
            if mid and (Path(mid).is_absolute() or ".." in Path(mid).parts or Path(mid).exists()):
                raise ApiError(400, f"roofline: error: {f.name}: model: {mid!r} is a path; the page resolves "
                                    "catalog names and Hugging Face ids only (or give the model option)")


@router.post("/compare")
async def compare_route(request: Request):
    body = await read_json(request)
    text = await run_in_threadpool(compare_answer, body)
    return Response(text, media_type="application/json")
