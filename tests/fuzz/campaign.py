"""The fuzz campaign (not run in CI): 10,000+ generated inputs under memory and time caps, plus
random SIGKILLs of commands that write files; prints the counts.

    python tests/fuzz/campaign.py                      # 10,000 inputs, 1 worker, 24 kills (kills.py)
    python tests/fuzz/campaign.py --n 500 --kills 0    # a quick look

Inputs: ``fuzz_seeds.SEEDS`` (issue 17's reproducers), then ``fuzz_inputs.generate`` with seeded randoms.
Each worker process runs its share in-process (typer's CliRunner) under RLIMIT_AS
(``--mem-gb``) and a SIGALRM time cap (``--time-cap``); a case whose peak RSS grows past
``--rss-gb`` or that raises MemoryError counts as a memory blow-up, and a worker that dies
marks its case so and is restarted after it.

Families: the hand-written generators of fuzz_inputs.py for every subcommand, and (half the
inputs) the schema-driven ones of fuzz_families.py and fuzz_extra.py: workloads (disaggregation,
speculative, prefix blocks), kernel tables and the profiles pointing to them, benchmark results
of every fixture format, odd output paths, guard variables, gentle near-valid inputs, the web
API, catalog folders and the long commands' argument checks.

A memory blow-up in a worker that ran other cases first is rerun in a fresh worker, whose verdict
stands (RLIMIT_AS counts the address space earlier cases left).

Kills (``--kills N``): tests/fuzz/kills.py, SIGKILL / SIGINT / SIGTERM at random moments across
the commands that write files.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(HERE)]  # this checkout's calc, not an installed one

LABELS = ["ok", "suspect", "one_line", "multi_line", "traceback", "hang", "memory", "damaged"]
TITLES = {"ok": "exit 0, sane", "suspect": "exit 0 with NaN/inf/null/negative (silent nonsense)",
          "one_line": "exit 1/2, one line naming where and what", "multi_line": "exit 1/2, multi-line or unprefixed",
          "traceback": "traceback", "hang": "hang past the time cap", "memory": "memory blow-up",
          "damaged": "a device node or FIFO replaced by a writer"}


def case_for(index: int, seed: int):
    from fuzz_inputs import generate
    from fuzz_seeds import SEEDS

    if index < len(SEEDS):
        return SEEDS[index]
    return generate(random.Random(seed * 1_000_003 + index))


# --------------------------------------------------------------------------- worker


def worker(start: int, stop: int, seed: int, log: Path, time_cap: float, rss_gb: float, mem_gb: float,
           retry: bool = False) -> None:
    limit = int(mem_gb * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    from fuzz_run import Outcome, run_case

    import calc.cli.app  # noqa: F401  (imported once, before the clock starts)

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with log.open("a") as fh:
        for i in range(start, stop):
            fh.write(json.dumps({"start": i}) + "\n")
            fh.flush()
            case = case_for(i, seed)
            t0 = time.perf_counter()
            with tempfile.TemporaryDirectory() as tmp:
                try:
                    out = run_case(case, Path(tmp), time_cap_s=time_cap)
                except MemoryError:
                    out = Outcome(case.kind, "memory", None, "", "MemoryError outside the command")
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            if rss - base > rss_gb * (1 << 30) and out.label != "memory":
                out = Outcome(case.kind, "memory", out.exit_code, out.stderr, f"peak RSS {(rss - base) / 2**30:.1f} GiB over the worker's start")
            fh.write(json.dumps({"index": i, "retried": retry and i == start, "kind": out.kind, "label": out.label,
                                 "exit": out.exit_code,
                                 "detail": out.detail[:300], "stderr": out.stderr[:300], "args": case.args[:12],
                                 "s": round(time.perf_counter() - t0, 3)}) + "\n")
            fh.flush()
            if out.label == "memory":
                return  # the peak RSS no longer tells the next case's; the parent restarts us


def run_inputs(n: int, workers: int, seed: int, time_cap: float, rss_gb: float, mem_gb: float,
               folder: Path | None = None) -> list[dict]:
    """Split [0, n) over ``workers`` processes; a dead worker's case is a memory blow-up
    (killed over RLIMIT_AS or by a signal) and the worker restarts after it. The workers' logs
    (one JSON line per case) stay in ``folder``."""
    folder = folder or Path(tempfile.mkdtemp(prefix="fuzz-campaign-"))
    folder.mkdir(parents=True, exist_ok=True)
    bounds = [(n * k // workers, n * (k + 1) // workers) for k in range(workers)]
    results: dict[int, dict] = {}
    pending = [(k, (a, b), False) for k, (a, b) in enumerate(bounds)]
    running: dict[int, tuple[subprocess.Popen, Path, int]] = {}
    while pending or running:
        while pending and len(running) < workers:
            k, (a, b), retry = pending.pop(0)
            if a >= b:
                continue
            log = folder / f"w{k}-{a}{'-retry' if retry else ''}.jsonl"
            p = subprocess.Popen([sys.executable, __file__, "--worker", str(a), str(b), "--seed", str(seed),
                                  *(["--retry"] if retry else []),
                                  "--log", str(log), "--time-cap", str(time_cap), "--rss-gb", str(rss_gb),
                                  "--mem-gb", str(mem_gb)], cwd=ROOT, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE)
            running[k] = (p, log, a, b, retry)
        time.sleep(0.5)
        for k, (p, log, a, b, retry) in list(running.items()):
            if p.poll() is None:
                continue
            del running[k]
            last_start, done = None, set()
            for line in log.read_text().splitlines() if log.exists() else []:
                rec = json.loads(line)
                if "start" in rec:
                    last_start = rec["start"]
                else:
                    results[rec["index"]] = rec
                    done.add(rec["index"])
            resume, again = ((max(done) + 1) if done else None), False
            if last_start is not None and last_start not in done:  # died during a case
                case = case_for(last_start, seed)
                err = (p.stderr.read() or b"").decode(errors="replace").strip().splitlines()
                results[last_start] = {"index": last_start, "kind": case.kind, "label": "memory",
                                       "detail": f"worker died (exit {p.returncode}): {err[-1][:200] if err else ''}",
                                       "args": case.args[:12], "stderr": "", "exit": None, "s": None,
                                       "retried": retry and last_start == a}
                resume = last_start + 1
            # a memory blow-up in a worker that ran other cases before may be theirs (RLIMIT_AS
            # counts the address space they left, torch's included): the case runs again, first
            # in a fresh worker, and that run's verdict stands
            last = results.get((resume or 0) - 1)
            if last is not None and last["label"] == "memory" and not last.get("retried") and not retry_of(last, a):
                resume, again = last["index"], True
            if resume is not None and resume < b:
                pending.insert(0, (k, (resume, b), again))
        done_count = len(results)
        if done_count and done_count % 500 < workers:
            print(f"  {done_count:,} / {n:,} inputs", file=sys.stderr, flush=True)
    return [results[i] for i in sorted(results)]


def retry_of(rec: dict, first: int) -> bool:
    """Whether ``rec`` was the first case of its worker (a fresh process: no other case's memory)."""
    return rec["index"] == first


# --------------------------------------------------------------------------- report


def summary(results: list[dict], wall_s: float, seed: int) -> dict:
    """The campaign's counts, by outcome and by kind, with the first example of each problem."""
    by_kind = collections.defaultdict(collections.Counter)
    for r in results:
        by_kind[r["kind"]][r["label"]] += 1
    problems = collections.OrderedDict()
    for r in results:
        if r["label"] not in ("ok", "one_line"):
            problems.setdefault((r["label"], r["kind"], (r["detail"] or r["stderr"])[:90]),
                                {"label": r["label"], "kind": r["kind"], "what": (r["detail"] or r["stderr"])[:300],
                                 "args": r["args"]})
    return {"inputs": len(results), "seed": seed, "wall_s": round(wall_s, 1),
            "load_average": round(os.getloadavg()[0], 2),
            "outcomes": {label: sum(1 for r in results if r["label"] == label) for label in LABELS},
            "by_kind": {k: dict(v) for k, v in sorted(by_kind.items())}, "problems": list(problems.values())}


def write_summary(path: Path, data: dict) -> None:
    """The summary as JSON, atomically (a temp file beside it, then os.replace)."""
    from calc.core.files import atomic_write

    atomic_write(path, json.dumps(data, indent=1) + "\n", option="--summary")


def report(results: list[dict], wall_s: float, kills: dict | None) -> None:
    counts = collections.Counter(r["label"] for r in results)
    print(f"\nfuzz campaign: {len(results):,} inputs in {wall_s:.0f} s (load {os.getloadavg()[0]:.1f})\n")
    print("| outcome | inputs |\n|---|---|")
    for label in LABELS:
        print(f"| {TITLES[label]} | {counts.get(label, 0):,} |")
    by_kind = collections.defaultdict(collections.Counter)
    for r in results:
        by_kind[r["kind"]][r["label"]] += 1
    print("\n| kind | " + " | ".join(LABELS) + " |\n|---|" + "---|" * len(LABELS))
    for kind in sorted(by_kind):
        print(f"| {kind} | " + " | ".join(str(by_kind[kind].get(x, 0)) for x in LABELS) + " |")
    bad = [r for r in results if r["label"] not in ("ok", "one_line")]
    distinct = collections.OrderedDict()
    for r in bad:
        key = (r["label"], r["kind"], (r["detail"] or r["stderr"])[:90])
        distinct.setdefault(key, r)
    if distinct:
        print(f"\n{len(distinct)} distinct problems (first example of each):")
        for (label, kind, what), r in list(distinct.items())[:60]:
            print(f"- {label} [{kind}] {what!r}\n    roofline {' '.join(r['args'])[:160]}")
    slow = sorted((r for r in results if r.get("s")), key=lambda r: -r["s"])[:3]
    print("\nslowest: " + "; ".join(f"{r['s']:.1f} s {' '.join(r['args'])[:60]}" for r in slow))
    if kills is not None:
        report_kills(kills)


def report_kills(kills: dict) -> None:
    print("\n| kills | count |\n|---|---|")
    for key, value in sorted(kills["stats"].items()):
        print(f"| {key} | {value} |")
    for note in kills["notes"][:20]:
        print(f"- {note}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000, help="inputs (the seeds first)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--logs", type=Path, help="folder for the workers' JSON-lines logs (default: a temp folder)")
    ap.add_argument("--summary", type=Path, help="write the counts as JSON here (atomically)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-cap", type=float, default=60.0, help="seconds per input before it counts as a hang")
    ap.add_argument("--rss-gb", type=float, default=4.0,
                    help="peak RSS growth (GiB) that counts as a memory blow-up (issue 25: past 4 GiB)")
    ap.add_argument("--mem-gb", type=float, default=6.0, help="RLIMIT_AS of each worker")
    ap.add_argument("--kills", type=int, default=24, help="random SIGKILLs of plan/sweep/plot/calibrate/validate")
    ap.add_argument("--worker", nargs=2, type=int, help=argparse.SUPPRESS)
    ap.add_argument("--log", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--retry", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(*args.worker, args.seed, args.log, args.time_cap, args.rss_gb, args.mem_gb, args.retry)
        return
    t0 = time.perf_counter()
    results = run_inputs(args.n, args.workers, args.seed, args.time_cap, args.rss_gb, args.mem_gb, args.logs)
    wall = time.perf_counter() - t0
    report(results, wall, None)
    if args.summary:
        write_summary(args.summary, summary(results, wall, args.seed))
    if args.kills:
        from kills import run_kills

        report_kills(run_kills(args.kills, args.seed))


if __name__ == "__main__":
    main()
