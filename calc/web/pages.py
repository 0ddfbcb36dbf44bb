"""The five pages: each static/NAME.html is the page's <main>, wrapped here in the shared head,
navigation and scripts (common.js, NAME.js, and plotly.js where the page draws charts)."""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

STATIC = Path(str(resources.files("calc.web").joinpath("static")))
PAGES = {"estimate": "Estimate", "explore": "Explore", "plan": "Plan", "compare": "Compare", "catalog": "Catalog"}
CHARTS = {"estimate", "explore", "compare"}  # the pages that load plotly.js


def nav(here: str) -> str:
    here_class = ' class="here"'
    links = "".join(f'<a href="/{n}" id="nav-{n}"{here_class if n == here else ""}>{t}</a>' for n, t in PAGES.items())
    return f"<header><b>roofline</b>\n{links}\n</header>"


@cache
def page(name: str) -> str:
    """The whole HTML of page ``name`` (read once)."""
    main = (STATIC / f"{name}.html").read_text()
    plotly = '<link rel="preload" href="/assets/plotly.min.js" as="script">\n' if name in CHARTS else ""  # run by common.js
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>roofline: {PAGES[name]}</title>\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f'<link rel="stylesheet" href="/assets/style.css">\n{plotly}'
            f'<script defer src="/assets/common.js"></script>\n<script defer src="/assets/{name}.js"></script>\n'
            f"</head><body>\n{nav(name)}\n<main>\n{main}</main>\n</body></html>\n")
