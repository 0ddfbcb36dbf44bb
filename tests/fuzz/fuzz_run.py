"""Running one fuzz case in-process and naming its outcome.

``run_case`` runs a ``Case`` through typer's CliRunner, as ``roofline`` would (main()'s
one-command app), under a SIGALRM time cap; ``classify`` names the outcome:

    ok          exit 0, every number in a json/csv output finite and (outside error columns) >= 0
    suspect     exit 0 with NaN / inf / null / a negative quantity in the output
    one_line    exit 2 (or 1 for a failed check), stderr one line "roofline: error: WHERE: problem"
    multi_line  exit 2 with more than one line, or without the prefix
    traceback   an exception escaped the CLI
    hang        over the time cap
    memory      MemoryError (or, in the campaign, a worker killed over its memory cap)
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from fuzz_inputs import Case


@dataclass
class Outcome:
    kind: str
    label: str
    exit_code: int | None
    stderr: str
    detail: str = ""


class Hang(BaseException):
    """Raised by SIGALRM when a case runs past its time cap (a BaseException: no `except
    Exception` in the code under test swallows it)."""


def _alarm(signum, frame):
    raise Hang()


def run_case(case: Case, tmp: Path, time_cap_s: float = 60.0) -> Outcome:
    """Run one case in-process with typer's CliRunner (the files written under ``tmp``),
    interrupted after ``time_cap_s`` (SIGALRM; main thread, Unix)."""
    import signal

    from typer.testing import CliRunner

    from calc.cli import app as entry

    args = case.materialise(tmp)
    # the app `roofline` runs: main() builds a one-command app for a known command name
    app = entry._only(args[0]) if args and hasattr(entry, "_only") else entry.app
    env = {k: v.replace("{tmp}", str(tmp)) for k, v in case.env.items()}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, time_cap_s)
    try:
        try:
            if args[:1] == ["@web"]:
                return run_web(case, args[1], args[2])
            result = CliRunner().invoke(app, args, catch_exceptions=True)
        except Hang:
            return Outcome(case.kind, "hang", None, "", f"over {time_cap_s:g} s")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    damaged = _damaged(case, tmp)
    if damaged:
        return Outcome(case.kind, "damaged", result.exit_code, "", damaged)
    return classify(case, result)


def _web_answer(route: str, payload):
    from calc.web import api, comparing

    if route == "estimate":
        return api.estimate_answer(payload)
    if route == "ops":
        return api.ops_answer(payload)
    if route == "sweep":
        return api.sweep_answer(payload)
    if route == "explore":
        from calc.web.explore import explore_answer

        return explore_answer(payload)
    if route == "show":
        from starlette.requests import Request

        query = "&".join(f"{k}={v}" for k, v in payload.items()).encode()
        return json.loads(api.show_route(Request({"type": "http", "query_string": query, "headers": []})).body)
    if route == "compare":
        return json.loads(comparing.compare_answer(payload))
    if route == "workload":
        import tempfile

        from calc.web.planning import prepare_workload

        with tempfile.TemporaryDirectory() as folder:
            prepare_workload(payload, Path(folder))
        return {}
    raise ValueError(route)


def run_web(case: Case, route: str, body: str) -> Outcome:
    """One page API call in-process: a 4xx ApiError must carry the CLI's one line; anything else
    escaping is a traceback; an answer is judged as a JSON output is."""
    from calc.web.params import ApiError

    payload = json.loads(body)
    try:
        answer = _web_answer(route, payload)
    except ApiError as exc:
        line = exc.line
        ok = (400 <= exc.status < 500 and "\n" not in line.strip() and line.startswith("roofline: error: ")
              and ": " in line[len("roofline: error: "):])
        return Outcome(case.kind, "one_line" if ok else "multi_line", exc.status, line,
                       "" if ok else f"{exc.status}: {line[:200]!r}")
    except MemoryError:
        return Outcome(case.kind, "memory", None, "", "MemoryError")
    except Hang:
        raise
    except Exception as exc:  # noqa: BLE001 (the page would answer 500)
        return Outcome(case.kind, "traceback", None, "", f"{type(exc).__name__}: {str(exc)[:200]}")
    why = _bad_json(answer, "")
    return Outcome(case.kind, "suspect" if why else "ok", 0, "", why or "")


def _damaged(case: Case, tmp: Path) -> str | None:
    """A special file the case laid down (a device node, a FIFO) that is no longer one: a writer
    replaced it (on /dev/null that would break the machine)."""
    import stat

    checks = {"<chardev>": stat.S_ISCHR, "<fifo>": stat.S_ISFIFO}
    for name, body in case.files.items():
        if body in checks:
            mode = os.lstat(tmp / name).st_mode
            if not checks[body](mode):
                return f"{name} ({body}) was replaced by another kind of file"
    return None


def classify(case: Case, result) -> Outcome:
    exc = result.exception
    stderr = getattr(result, "stderr", "") or ""
    if exc is not None and not isinstance(exc, SystemExit):
        if isinstance(exc, MemoryError):
            return Outcome(case.kind, "memory", None, stderr, "MemoryError")
        if isinstance(exc, Hang):
            return Outcome(case.kind, "hang", None, stderr, "time cap")
        return Outcome(case.kind, "traceback", None, stderr, f"{type(exc).__name__}: {str(exc)[:200]}")
    code = result.exit_code
    if code == 0:
        why = suspect(result.stdout, case.args)
        return Outcome(case.kind, "suspect" if why else "ok", 0, stderr, why or "")
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    # the one-line promise: "roofline: error: WHERE: problem"; the planned-in / wrote / note lines
    # of a command that then failed a check do not count against it
    lines = [ln for ln in lines if not ln.startswith(("wrote ", "planned in ", "roofline: note: "))]
    errors = [ln for ln in lines if ln.startswith("roofline: error: ")]
    if code in (1, 2) and len(errors) == 1 and len(lines) == 1 and ": " in errors[0][len("roofline: error: "):]:
        return Outcome(case.kind, "one_line", code, stderr)
    # compare says one line per result file it cannot read, and compares the rest (README)
    if case.args[:1] == ["compare"] and code == 2 and errors and len(errors) == len(lines) \
            and len(errors) <= len(case.args):
        return Outcome(case.kind, "one_line", code, stderr)
    return Outcome(case.kind, "multi_line", code, stderr, f"{len(lines)} lines: {stderr[:200]!r}")


_NONFINITE = re.compile(r"(?<![\w-])-?(nan|inf)(?![\w-])", re.I)  # as Python prints them
_SIGNED = ("error", "delta", "change", "diff", "residual", "bias",
           "growth")  # backlog_growth: waiting at the last measured arrival minus at the first (shrinks too)
# nulls the README documents: TPOT of a request with one output token (no decode step)
_DOCUMENTED_NULLS = {"tpot_s", "usd_per_million_output_tokens",  # G = 1; a profile without a price
                     "rate_per_s",  # compare: a run at a fixed concurrency (load: concurrency) has no rate
                     "searched_slo_s"}  # plan --format json: the tightened targets of --robust, null without it


def suspect(stdout: str, args: list[str]) -> str | None:
    """Why an exit-0 output looks like silent nonsense (None when it looks sane): a NaN, an
    infinity or a null number in JSON, a negative quantity in JSON or CSV outside error columns."""
    text = stdout.strip()
    if not text:
        return None
    if text[0] in "[{":
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            return "unparseable JSON"
        return _bad_json(data, "")
    if "\n" in text and "," in text.splitlines()[0] and ("csv" in args or args[:1] == ["sweep"]):
        for row in csv.DictReader(io.StringIO(text)):  # streamed: a 400,000-row sweep is judged in constant memory
            for key, cell in row.items():
                why = _bad_cell(key or "", cell)
                if why:
                    return why
        return None
    m = _NONFINITE.search(text)
    return f"{m.group(0)!r} in the table" if m else None


def _bad_cell(key: str, cell) -> str | None:
    if not isinstance(cell, str) or not cell:
        return None
    try:
        value = float(cell)
    except ValueError:
        return None
    if not math.isfinite(value):
        return f"{key} = {cell}"
    if value < 0 and not any(s in key for s in _SIGNED):
        return f"{key} = {cell} (negative)"
    return None


def _bad_json(data, key: str) -> str | None:
    if isinstance(data, dict):
        for k, v in data.items():
            why = _bad_json(v, str(k))
            if why:
                return why
    elif isinstance(data, list):
        for v in data:
            why = _bad_json(v, key)
            if why:
                return why
    elif isinstance(data, bool):
        return None
    elif isinstance(data, float | int):
        if isinstance(data, float) and not math.isfinite(data):
            return f"{key} = {data}"
        if data < 0 and not any(s in key for s in _SIGNED):
            return f"{key} = {data} (negative)"
    elif data is None and key not in _DOCUMENTED_NULLS and re.search(r"(_s|_flops|_bytes|_per_s|_tokens|flops|bytes|time)$", key):
        return f"{key} = null"
    return None
