"""A `roofline serve` in a child process on a free loopback port, and the page's speed figures.

``running(command)`` starts the server (``python -m calc.cli.app serve --port 0`` by default),
reads the address it prints (bounded wait), yields it, and stops the process (terminate, then
kill) however the block ends: the tests, `python -m calc.bench` and the wheel check use it.
``speed(base)`` measures what the page promises: the server time (its ``Server-Timing``
header) of an estimate and of the Explore page's default request, and the first load of the
Estimate page in headless Chromium when the system has one.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import shutil
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager

ESTIMATE = {"model": "llama-3.1-8b", "hardware": "h100-sxm", "batch": "8", "prompt-len": "2048", "output-len": "300"}
EXPLORE = {"model": "llama-3.1-8b,mistral-7b", "hardware": "h100-sxm,l4", "batch": "1:200:1", "prompt-len": "1024",
           "columns": "ttft_s,tpot_s,output_tokens_per_s"}  # the Explore page's default: 4 curves of 200 points
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@contextmanager
def running(command: list[str] | None = None, start_timeout_s: float = 60.0):
    """Yield the base URL of a server started by ``command`` (plus ``--port 0``); stop it after."""
    cmd = [*(command or [sys.executable, "-m", "calc.cli.app", "serve"]), "--port", "0", "--host", "127.0.0.1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        deadline, line = time.monotonic() + start_timeout_s, ""
        while time.monotonic() < deadline and proc.poll() is None:
            if sel.select(timeout=0.5):
                line = proc.stdout.readline()
                break
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        if found is None:
            raise RuntimeError(f"the server did not start: {line!r} {proc.stderr.read() if proc.poll() is not None else ''}")
        yield f"http://127.0.0.1:{found.group(1)}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        for stream in (proc.stdout, proc.stderr):
            stream.close()


def get(url: str, timeout: float = 60.0) -> tuple[int, dict, bytes]:
    """(status, headers, body) of a GET; a 4xx/5xx is returned, not raised."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def post(url: str, body: object, timeout: float = 120.0) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def server_ms(headers: dict) -> float:
    """The server's own time for an answer, from its Server-Timing header (ms)."""
    value = next(v for k, v in headers.items() if k.lower() == "server-timing")
    return float(value.split("dur=")[1])


def median_server_ms(base: str, path: str, params: dict, runs: int) -> float:
    from urllib.parse import urlencode

    url = f"{base}{path}?{urlencode(params)}"
    get(url)  # warm: the first answer loads the specs and the web stack's lazy parts
    times = []
    for _ in range(runs):
        status, headers, _ = get(url)
        if status != 200:
            raise RuntimeError(f"{url}: HTTP {status}")
        times.append(server_ms(headers))
    return statistics.median(times)


def browser(width: int = 1300, height: int = 1400):
    """Headless Chromium from the system's packages (never a downloaded build), or None."""
    if not (os.path.exists(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        return None
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        return None
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--disable-extensions", "--no-first-run"):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


def first_load_ms(base: str, runs: int = 5) -> tuple[float, float] | None:
    """Median ms from navigation start until the Estimate page shows its numbers, and until its
    charts are drawn too, with the browser's cache off (every script, plotly.js included, fetched
    and parsed each time); None without Chromium."""
    drv = browser()
    if drv is None:
        return None
    try:
        drv.execute_cdp_cmd("Network.enable", {})
        drv.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": True})
        drv.get(f"{base}/estimate")  # the browser's own start-up is not the page's
        numbers, charts = [], []
        for _ in range(runs):
            drv.get("about:blank")
            drv.get(f"{base}/estimate")
            for key, times in (("numbers", numbers), ("ready", charts)):
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and not drv.execute_script(f"return document.body.dataset.{key}"):
                    time.sleep(0.005)
                times.append(drv.execute_script("return performance.now()"))
        return statistics.median(numbers), statistics.median(charts)
    finally:
        drv.quit()


def cpu_ms(answer, query: dict, runs: int) -> float:
    """Median CPU ms of answering ``query`` in this process (parse, compute, JSON): what a request
    costs the server whatever else the machine runs."""
    from calc.core import text

    text.to_json(answer(dict(query)))
    times = []
    for _ in range(runs):
        t0 = time.process_time()
        text.to_json(answer(dict(query)))
        times.append((time.process_time() - t0) * 1e3)
    return statistics.median(times)


def speed(base: str, runs: int = 30) -> dict[str, float | None]:
    from calc.web.api import estimate_answer
    from calc.web.explore import explore_answer

    return {"estimate_ms": median_server_ms(base, "/api/estimate", ESTIMATE, runs),
            "explore_ms": median_server_ms(base, "/api/explore", EXPLORE, runs),
            "estimate_cpu_ms": cpu_ms(estimate_answer, ESTIMATE, runs),
            "explore_cpu_ms": cpu_ms(explore_answer, EXPLORE, runs),
            "first_load_ms": first_load_ms(base)}
