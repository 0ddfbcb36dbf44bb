"""Speed figures the issues promise, printed: `python -m calc.bench` (`--quick`: fewer repeats).

On a shared machine wall times move with other load, so each figure is a median of repeated
runs, start-up is a ratio of paired runs (the two commands alternate), and CPU seconds (this
process, all threads) are printed beside wall seconds. The load average is printed too.

1. Cold `roofline estimate` over the import of its own dependencies (numpy, pydantic, typer,
   pyyaml): median ratio of paired fresh processes.
2. The whole-request estimate (prefill, TPOT over the decode steps, memory) in one call over a
   million (B, T, G) scenarios given as grid axes, as `calc.sweep` passes them.
3. A 1,000,000-scenario `calc.sweep` written as CSV and as Parquet (frame + file).
4. The web page (`roofline serve` in a child process): server time of an estimate and of the
   Explore page's default request (4 curves of 200 points), from the Server-Timing header, and
   the Estimate page's first load in headless Chromium (cache off), when the system has one.
5. Every example plan (reports/plans/workloads/*.yaml) at its own request count, alone and
   with its report and charts (what `roofline plan --out` writes), and one 50,000-request
   simulation (one H100 at the chat workload's lengths and rate, overloaded: its backlog grows).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from calc import load_hardware, load_model
from calc.spec.catalog import REPO_ROOT

_PAIRED = """
import json, subprocess, sys, time
runs, cmds, cwd = int(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3] or None
times = [[] for _ in cmds]
for _ in range(runs):
    for c, t in zip(cmds, times):
        t0 = time.perf_counter()
        subprocess.run(c, check=True, capture_output=True, cwd=cwd)
        t.append(time.perf_counter() - t0)
print(json.dumps(times))
"""
DEPS = "import numpy, pydantic, typer, yaml"


def _timed(fn, runs: int):
    """(median wall s, median CPU s, last result) of ``runs`` calls."""
    walls, cpus, out = [], [], None
    for _ in range(runs):
        c, t = time.process_time(), time.perf_counter()
        out = fn()
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus), out


def _rounds(cmds: list[list[str]], runs: int, cwd=None) -> list[list[float]]:
    """Wall seconds of each command, run in turn ``runs`` times (paired: the same load)."""
    import json

    out = subprocess.run([sys.executable, "-c", _PAIRED, str(runs), json.dumps(cmds), str(cwd or "")],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def cold_estimate(runs: int = 9) -> tuple[float, float, float, float]:
    """(median s of `import numpy, pydantic, typer, yaml`, median s of a cold `roofline
    estimate`, median ratio of the two over pairs, and the same ratio for the import plus one
    pydantic model class: the floor any pydantic spec sets). The command is ``python -m
    calc.cli.app`` from the folder holding this calc package, so it measures this code (a
    console script may belong to another install); clocks run in a bare interpreter."""
    est = [sys.executable, "-m", "calc.cli.app", "estimate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm"]
    floor = [sys.executable, "-c", DEPS + "\nfrom pydantic import BaseModel\nclass A(BaseModel):\n    x: int"]
    deps, est_s, floor_s = _rounds([[sys.executable, "-c", DEPS], est, floor], runs,
                                   cwd=Path(__file__).resolve().parents[1])

    def ratio(xs):
        return statistics.median(x / d for d, x in zip(deps, xs, strict=True))

    return statistics.median(deps), statistics.median(est_s), ratio(est_s), ratio(floor_s)


def grid_estimates(runs: int = 5, model: str = "llama-3.1-8b", hardware: str = "h100-sxm"):
    """(median wall s, median CPU s, scenarios) of one estimate call over a 100 x 100 x 100 grid."""
    from calc.cost.latency import estimate

    m, hw = load_model(model), load_hardware(hardware)
    B = np.arange(1.0, 101)[:, None, None]
    T = np.arange(128.0, 12929, 128)[None, :100, None]
    G = np.arange(16.0, 1601, 16)[None, None, :]

    def once():
        e = estimate(m, hw, B, T, G)
        return e.ttft_s, e.tpot_s, e.e2e_s, e.memory.total_bytes

    wall, cpu, out = _timed(once, runs)
    return wall, cpu, int(np.size(out[1]))


def list_estimates(n: int = 131_072, runs: int = 3):
    """(median wall s, scenarios) of one call over ``n`` random (B, T, G) scenarios in a list."""
    from calc.cost.latency import estimate

    m, hw = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    rng = np.random.default_rng(0)
    B, T, G = rng.integers(1, 257, n), rng.integers(1, 8193, n), rng.integers(1, 2049, n)
    wall, _, _ = _timed(lambda: estimate(m, hw, B, T, G).tpot_s, runs)
    return wall, n


def sweep_to_files(runs: int = 3) -> dict[str, tuple[float, float]]:
    """suffix -> (median wall s, median CPU s) of a million-scenario sweep into that file."""
    from calc import sweep
    from calc.render.frames import write_frame

    def grid():
        return sweep("llama-3.1-8b", "h100-sxm", batch=list(range(1, 101)), prompt_len=list(range(128, 12801, 128)),
                     output_len=list(range(16, 1601, 16)))

    out = {}
    with tempfile.TemporaryDirectory() as d:
        for suffix in (".csv", ".parquet"):
            wall, cpu, _ = _timed(lambda s=suffix: write_frame(grid(), f"{d}/grid{s}"), runs)
            out[suffix] = (wall, cpu)
        out["rows"] = len(grid())
    return out


def plans(runs: int = 1) -> list[tuple[str, float, float, int, int, float]]:
    """(workload, median wall s, CPU s, simulations, requests each, median wall s with the report
    and charts written as `roofline plan --out` writes them) per example plan."""
    from calc.render.plan import write_report
    from calc.serving.planner.plan import plan
    from calc.spec.workload import load_workload

    rows = []
    with tempfile.TemporaryDirectory() as d:
        for path in sorted((REPO_ROOT / "reports" / "plans" / "workloads").glob("*.yaml")):
            wl = load_workload(path)
            wall, cpu, p = _timed(lambda w=wl: plan(w), runs)
            out_wall, _, _ = _timed(lambda w=wl, s=path.stem: write_report(plan(w), Path(d) / s), runs)
            rows.append((path.stem, wall, cpu, p.simulations, p.requests, out_wall))
    return rows


def simulation(n: int = 50_000, runs: int = 3) -> tuple[float, float, int]:
    """(median wall s, CPU s, steps) of one n-request simulation: the chat workload's lengths
    and rate on one H100 (Llama-3.1-8B, TP1, max batch 256, the workload's engine scheduler)."""
    from calc.core import limits
    from calc.cost.dtypes import Dtypes
    from calc.serving.replica.capacity import Replica
    from calc.serving.sim.simulate import simulate
    from calc.spec.workload import load_workload

    # One simulation, not a plan: the plan-wide cap on simulated requests (n x its candidates) does
    # not apply, so it is raised for this load, the way the cap's message says.
    old = {env: os.environ.get(env) for env in (limits.SIMULATED_ENV, limits.REQUESTS_ENV)}
    os.environ[limits.SIMULATED_ENV] = str(100 * n)
    os.environ[limits.REQUESTS_ENV] = str(n)
    try:
        wl = load_workload(REPO_ROOT / "reports" / "plans" / "workloads" / "chat-llama-3.1-8b.yaml", n)
    finally:
        for env, value in old.items():
            if value is None:
                del os.environ[env]
            else:
                os.environ[env] = value
    hw = load_hardware("h100-sxm")
    rep = Replica(wl.model, hw, 1, 256, Dtypes.resolve(wl.model), wl.serving_for(hw))
    _ = rep.steps, rep.kv
    rate = wl.spec.arrival.rate_per_s or 10.0
    wall, cpu, sim = _timed(lambda: simulate(rep, wl.prompt_len, wl.output_len, rate_per_s=rate, seed=0), runs)
    return wall, cpu, sim.steps


def web(runs: int = 30) -> dict:
    """The page's figures (calc.web.local.speed), printed."""
    from calc.web import local

    with local.running() as base:
        fig = local.speed(base, runs)
    print(f"web: estimate request {fig['estimate_ms']:.1f} ms server time (median of {runs}; target <= 20 ms); "
          f"Explore's 4 curves x 200 points {fig['explore_ms']:.1f} ms (target <= 50 ms)")
    print(f"  CPU per answer, in process: estimate {fig['estimate_cpu_ms']:.1f} ms, Explore {fig['explore_cpu_ms']:.1f} ms")
    load = fig["first_load_ms"]
    print("web: Estimate page's first load in headless Chromium, cache off: " +
          (f"{load[0]:.0f} ms to its numbers, {load[1]:.0f} ms to its charts (median of 5; target <= 1000 ms)"
           if load is not None else "not measured: no /usr/bin/chromium and chromedriver"))
    return fig


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} CPUs"


def main(argv: list[str] | None = None) -> None:
    quick = "--quick" in (argv if argv is not None else sys.argv[1:])
    r = 1 if quick else 3
    print(f"roofline bench: {_load()}")
    deps, est, ratio, floor = cold_estimate(3 if quick else 9)
    print(f"cold `roofline estimate`: {est:.3f} s vs `{DEPS}` {deps:.3f} s: "
          f"{ratio:.2f}x (median of paired runs; target <= 1.3x)")
    print(f"  for scale, in the same runs: that import plus one pydantic model class: {floor:.2f}x")
    wall, cpu, n = grid_estimates(2 if quick else 5)
    print(f"whole-request estimate, one call over {n:,} (B, T, G) grid scenarios: {n / wall / 1e6:.2f} M/s "
          f"({wall:.3f} s wall, {cpu:.3f} s CPU, median; target >= 3 M/s)")
    wall, n = list_estimates(runs=r)
    print(f"  the same over {n:,} random scenarios in a list (no grid to share work): {n / wall / 1e6:.2f} M/s")
    files = sweep_to_files(r)
    for suffix, target in ((".csv", 5.0), (".parquet", 3.0)):
        wall, cpu = files[suffix]
        print(f"calc.sweep over {files['rows']:,} scenarios -> {suffix}: {wall:.2f} s wall, {cpu:.2f} s CPU "
              f"(median of {r}; target <= {target:g} s)")
    web(10 if quick else 30)
    if not (REPO_ROOT / "reports" / "plans" / "workloads").is_dir():
        print("plans and the simulation: the example workloads are in the repository (reports/plans/); run it there")
        print(f"done: {_load()}")
        return
    for name, wall, cpu, sims, reqs, out_wall in plans():
        print(f"plan {name}: {wall:.1f} s wall, {cpu:.1f} s CPU ({sims} simulations of {reqs:,} requests; "
              f"target <= 5 s); with --out (report and charts): {out_wall:.1f} s wall (target <= 3 s)")
    wall, cpu, steps = simulation(runs=r)
    print(f"50,000-request simulation: {wall:.2f} s wall, {cpu:.2f} s CPU ({steps:,} steps; target <= 2 s)")
    print(f"done: {_load()}")


if __name__ == "__main__":
    main()
