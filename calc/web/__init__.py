"""The local web page (`roofline serve`): the top layer, above the CLI whose JSON contract it serves.

app (the FastAPI app and its static pages), api (estimate, ops, sweep, catalog), params (query
parameters parsed by the CLI's commands), uploads (capped bodies, per-request folders),
comparing (benchmark uploads), planning and jobs (plans in the background), command (serve).
"""
