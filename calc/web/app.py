"""The page's server: the FastAPI app, its static pages, the charting library, and the error rule.

Pages are static files (calc/web/static/: one HTML body and one script per page, a shared script
and style, wrapped by calc.web.pages) that call the JSON API; every script and style is served from the installed packages:
ours, and plotly.js from the ``plotly`` wheel (plotly/package_data/plotly.min.js), so the page
needs no network. Every answer carries ``Server-Timing: app;dur=MS`` (the server's time for it).
A refused request answers ``{"error": "roofline: error: ..."}`` with its 4xx status.
"""

from __future__ import annotations

import time
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException

from calc.web.pages import PAGES, STATIC, page
from calc.web.params import ApiError

# The page's own scripts only; plotly draws with inline styles and data: images (its toolbar icons).
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
       "frame-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'")
ASSET_CACHE = "public, max-age=86400"


def plotly_js() -> Path:
    """plotly.min.js as the installed ``plotly`` package ships it."""
    try:
        path = Path(str(resources.files("plotly").joinpath("package_data", "plotly.min.js")))
    except ModuleNotFoundError:
        path = None
    if path is None or not path.is_file():
        raise RuntimeError("plotly is not installed (pip install plotly): the page draws its charts with the "
                           "plotly.js it ships")
    return path


def create_app(root: Path | None = None) -> FastAPI:
    """The app; per-request and per-job folders go under ``root`` (default: the system temp dir)."""
    from calc.web import api, comparing, explore, planning

    jobs = planning.make_jobs(root)

    @asynccontextmanager
    async def lifespan(app):
        yield
        jobs.close()

    app = FastAPI(title="roofline", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.jobs = jobs
    plotly = plotly_js()

    @app.middleware("http")
    async def timing(request: Request, call_next):
        t0 = time.perf_counter()
        response = await call_next(request)
        response.headers["Server-Timing"] = f"app;dur={(time.perf_counter() - t0) * 1e3:.3f}"
        response.headers["X-Content-Type-Options"] = "nosniff"
        if response.headers.get("content-type", "").startswith("text/html"):
            response.headers["Content-Security-Policy"] = CSP
        return response

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError):
        return JSONResponse({"error": exc.line}, status_code=exc.status)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        line = f"roofline: error: {request.url.path[:80]}: {exc.detail}".lower() if exc.status_code == 404 else \
            f"roofline: error: {request.url.path[:80]}: {exc.detail}"
        return JSONResponse({"error": line}, status_code=exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        return JSONResponse({"error": f"roofline: error: {request.url.path[:80]}: malformed request"},
                            status_code=400)

    app.include_router(api.router)
    app.include_router(comparing.router)
    app.include_router(explore.router)
    app.include_router(planning.router)

    @app.get("/", include_in_schema=False)
    def index():
        return RedirectResponse("/estimate")

    def route(name: str):
        def serve_page():
            return HTMLResponse(page(name))

        serve_page.__name__ = f"page_{name}"
        return serve_page

    for name in PAGES:
        app.get(f"/{name}", include_in_schema=False)(route(name))

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon():
        return Response(status_code=204)

    @app.get("/assets/plotly.min.js", include_in_schema=False)
    def plotly_route():
        return FileResponse(plotly, media_type="text/javascript", headers={"Cache-Control": ASSET_CACHE})

    @app.get("/assets/{name}", include_in_schema=False)
    def asset(name: str):
        path = STATIC / name
        if "/" in name or name.startswith(".") or name.endswith(".html") or not path.is_file():
            raise ApiError(404, f"roofline: error: /assets/{name[:60]}: not found")
        kind = "text/javascript" if name.endswith(".js") else "text/css" if name.endswith(".css") else "text/plain"
        return FileResponse(path, media_type=kind, headers={"Cache-Control": "no-cache"})

    return app
