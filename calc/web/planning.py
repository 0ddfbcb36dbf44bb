"""Plan routes: a workload YAML (typed in the form or uploaded) planned in the background.

POST /api/plan ``{"yaml": TEXT, "files": [{name, text}]}`` (a trace CSV the workload names goes
in ``files``) checks the workload now, exactly as `roofline plan` reads it (calc.spec.workload:
the schema, the catalog, the planner's limits on requests and simulations), and answers 400
with its one line, or 202 with the job; GET /api/plan/ID is its progress (and, once done, the
`plan --format json` record); POST /api/plan/ID/cancel stops it; GET /plan/jobs/ID/report.html
is the report `plan --out` writes.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, Response

from calc.core.errors import SpecError
from calc.web.api import json_response
from calc.web.jobs import Jobs
from calc.web.params import ApiError, catalog_only, confined, refuse
from calc.web.uploads import files_of, new_folder, read_json, unfold, write_files

router = APIRouter()
REPORT_FILES = {"report.html": "text/html", "report.md": "text/markdown", "plan.json": "application/json"}


def jobs_of(request: Request) -> Jobs:
    return request.app.state.jobs


def prepare_workload(body: dict, folder):
    """The LoadedWorkload of the request's YAML, checked: catalog names, files inside the upload."""
    from calc.spec.workload import Workload, resolve
    from calc.spec.yamlio import build, read_yaml

    text = body.get("yaml")
    if not isinstance(text, str) or not text.strip():
        raise ApiError(400, "roofline: error: workload: give the workload YAML (the form fills it in)")
    extra = files_of(body)
    write_files(folder, [("workload.yaml", text), *((n, t) for n, t in extra if n != "workload.yaml")])
    path = folder / "workload.yaml"
    try:
        spec = build(Workload, read_yaml(path), path)
        catalog_only({"model": spec.model, "hardware": ",".join(spec.hardware),
                      "spec_draft": spec.speculative.draft if spec.speculative else None},
                     {"model": "model", "hardware": "hardware", "spec_draft": "model"})
        confined(spec.trace, "workload.yaml", "trace")
        return resolve(spec, path)
    except SpecError as exc:
        raise ApiError(400, unfold(refuse(exc).line, folder)) from None


def run_plan(wl, folder, progress) -> dict:
    """Plan, write the report into the job's folder, and answer the plan's JSON record."""
    from calc.cli.plan import plan_bands
    from calc.core.files import atomic_write
    from calc.render.plan import plan_record, write_report
    from calc.serving.planner.plan import plan

    try:
        bands = plan_bands(wl, False)  # as `roofline plan` (its default: bands on, not --robust)
        result = plan(wl, progress=progress)
        for path in write_report(result, folder / "report", bands):
            if path.name in REPORT_FILES:  # the report names the workload as uploaded, not the job's folder
                atomic_write(path, unfold(path.read_text(), folder), "report")
    except SpecError as exc:
        raise ApiError(400, unfold(refuse(exc).line, folder)) from None
    return plan_record(result, bands)


@router.post("/api/plan")
async def plan_route(request: Request):
    body = await read_json(request)
    jobs = jobs_of(request)
    job = await run_in_threadpool(jobs.start, lambda folder: prepare_workload(body, folder), run_plan)
    return json_response(job.status(), status=202)


@router.get("/api/plan/{job_id}")
def plan_status_route(job_id: str, request: Request):
    return json_response(jobs_of(request).get(job_id).status())


@router.post("/api/plan/{job_id}/cancel")
def plan_cancel_route(job_id: str, request: Request):
    return json_response(jobs_of(request).cancel(job_id).status())


@router.get("/plan/jobs/{job_id}/{name}")
def plan_report_route(job_id: str, name: str, request: Request):
    job = jobs_of(request).get(job_id)
    if name not in REPORT_FILES or job.state != "done":
        raise ApiError(404, f"roofline: error: plan: no {name[:40]!r} for job {job_id[:12]} ({job.state})")
    path = job.folder / "report" / name
    if name == "report.html":  # self-contained: its charts are inline
        return FileResponse(path, media_type=REPORT_FILES[name])
    return Response(path.read_bytes(), media_type=REPORT_FILES[name])


def make_jobs(root) -> Jobs:
    return Jobs(lambda: new_folder(root))
