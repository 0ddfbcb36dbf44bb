"""Signals at random moments across the commands that write files: SIGKILL, SIGINT and SIGTERM.

    python tests/fuzz/kills.py --kills 30            # every command, the three signals in turn
    python tests/fuzz/kills.py --kills 3 --only sweep

Each command is run once to completion into a scratch folder (the old files), then started again
in a session of its own and sent a signal after a random delay. Afterwards:

- every output file is the old one or a complete new one (a PNG to its IEND, JSON / YAML
  parsing, CSV rows whole, HTML to ``</html>``): never a torn file;
- after SIGINT or SIGTERM no temp file is left (the writer removes its own); after SIGKILL, which
  nothing can catch, the next run of the command removes the dead writer's temp file;
- no process of the command's session is left running (validate-comm's workers included);
- an interrupted run says one line and exits 130 (SIGINT) or 143 (SIGTERM), unless it had
  already finished (exit 0);
- a rerun succeeds.

The counts go to stdout (and, with --summary, to a JSON file written atomically).
"""

from __future__ import annotations

import argparse
import collections
import csv
import io
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(HERE)]

CLI = [sys.executable, "-c", "from calc.cli.entry import main; main()"]  # the console script's path
# the same, with a mark on stderr once calc.cli.entry is loaded: a signal before it lands in
# Python's own start-up, Python's to report (tests/calc/cli/test_interrupt.py does the same)
MARKED = [sys.executable, "-c", "import sys; from calc.cli.entry import main; sys.stderr.write('up\\n'); "
          "sys.stderr.flush(); sys.exit(main())"]
SIGNALS = (signal.SIGKILL, signal.SIGINT, signal.SIGTERM)
EXPECTED = {signal.SIGINT: (130, "roofline: interrupted"), signal.SIGTERM: (143, "roofline: terminated")}


def _complete(path: Path) -> bool:
    """A whole file of its kind (a half-written one fails)."""
    data = path.read_bytes()
    if not data:
        return False
    suffix = path.suffix
    try:
        if suffix == ".png":
            return data.startswith(b"\x89PNG\r\n\x1a\n") and data.endswith(b"IEND\xaeB`\x82")
        if suffix == ".json":
            json.loads(data)
        elif suffix == ".jsonl":
            [json.loads(x) for x in data.splitlines()]
        elif suffix in (".yaml", ".yml"):
            import yaml

            yaml.safe_load(data)
        elif suffix == ".csv":
            rows = list(csv.reader(io.StringIO(data.decode())))
            return bool(rows) and all(len(r) == len(rows[0]) for r in rows) and data.endswith(b"\n")
        elif suffix == ".html":
            return data.rstrip().endswith(b"</html>")
        elif suffix == ".svg":
            return data.rstrip().endswith(b"</svg>")
        return True
    except (ValueError, UnicodeDecodeError):
        return False
    except Exception:  # noqa: BLE001 (yaml errors)
        return False


def commands(folder: Path) -> dict[str, tuple[list[str], float]]:
    """name -> (argv, a guess at its run time in s; run_kills replaces it by the measured one)."""
    wl = ROOT / "reports" / "plans" / "workloads" / "chat-llama-3.1-8b.yaml"
    kernels = ROOT / "reports" / "validation" / "cpu-heldout-1thread" / "kernels"
    bench = ROOT / "tests" / "fixtures" / "bench"
    runs = [str(bench / "vllm-serve-rate4-detailed.json"), str(bench / "guidellm.json"), "--hardware", "h100-sxm"]
    return {
        "plan": (["plan", str(wl), "--out", str(folder / "plan"), "--requests", "300", "-q"], 4.0),
        "sweep": (["sweep", "--batch", "1:200", "--prompt-len", "64:4096:64", "--out", str(folder / "s.csv"), "-q"], 3.0),
        "accuracy": (["accuracy", "--no-fit", "-q", "--out", str(folder / "acc"),
                      "--bands-out", str(folder / "bands.yaml")], 10.0),
        "calibrate": (["calibrate", "--kernels", str(kernels), "--hardware", "cpu-generic-2core",
                       "--out", str(folder / "cal.yaml")], 2.0),
        "compare": (["compare", *runs, "--out", str(folder / "cmp")], 1.5),
        "compare-fit": (["compare", *runs, "--fit", "--fit-out", str(folder / "fit.yaml")], 2.0),
        "validate-comm": (["validate-comm", "--world-size", "2", "--quick", "--backend", "gloo",
                           "--out", str(folder / "comm")], 3.0),
    }


def targets(argv: list[str]) -> list[Path]:
    return [Path(argv[argv.index(opt) + 1]) for opt in ("--out", "--bands-out", "--fit-out") if opt in argv]


def outputs(paths: list[Path]) -> list[Path]:
    out = []
    for t in paths:
        if t.is_dir():
            out += sorted(p for p in t.rglob("*") if p.is_file() and not p.name.startswith("."))
        elif t.exists():
            out.append(t)
    return out


def temps(paths: list[Path]) -> list[Path]:
    found = set()
    for t in paths:
        for folder in {t if t.is_dir() else t.parent, t.parent}:
            found.update(folder.rglob(".*.tmp") if folder.is_dir() else ())
    return sorted(found)


def session_alive(sid: int) -> list[int]:
    """Live (not zombie) processes of session ``sid``."""
    alive = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[3]) == sid:  # state, ppid, pgrp, session
            alive.append(int(d.name))
    return alive


def one_kill(name: str, argv: list[str], typical: float, sig: int, rng: random.Random, stats, notes) -> None:
    paths = targets(argv)
    old = {p: p.read_bytes() for p in outputs(paths)}
    p = subprocess.Popen(MARKED + argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         start_new_session=True)
    p.stderr.read(3)  # "up\n": the app's code is running
    time.sleep(rng.uniform(0.0, typical))  # somewhere in a run of typical length
    try:
        os.kill(p.pid, sig)
    except ProcessLookupError:
        pass
    try:
        said, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        stats["did not exit within 60 s of the signal"] += 1
        notes.append(f"{name}: {signal.Signals(sig).name}: still running 60 s later")
        os.killpg(p.pid, signal.SIGKILL)
        said, err = p.communicate()
    stats["kills"] += 1
    stats[f"kills by {signal.Signals(sig).name}"] += 1
    deadline = time.monotonic() + 5.0
    while session_alive(p.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = session_alive(p.pid)
    if left:
        stats["orphan processes"] += len(left)
        notes.append(f"{name}: {signal.Signals(sig).name}: {len(left)} process(es) of its session still running")
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    code, lines = p.returncode, [ln for ln in err.decode(errors="replace").splitlines() if ln.strip()]
    finished = b"wrote " in said + err  # the command's last word: its files are written
    if sig in EXPECTED and code == -sig and finished:
        # the signal landed in Python's shutdown, after the work: finalisation puts the default
        # handlers back (CPython's _PySignal_Fini), so the process ends by the signal, files whole
        stats["signals during Python's shutdown, after the work"] += 1
    elif sig in EXPECTED and code != 0:
        status, line = EXPECTED[sig]
        if code != status or lines[-1:] != [line] or any("Traceback" in ln for ln in lines):
            stats["interrupts not said in one line with 130/143"] += 1
            notes.append(f"{name}: {signal.Signals(sig).name}: exit {code}: {lines[-3:]}")
    if code == 0:
        stats["finished before the signal"] += 1
    for f in outputs(paths):
        stats["files checked"] += 1
        if not (old.get(f) == f.read_bytes() or _complete(f)):
            stats["damaged files"] += 1
            notes.append(f"{name}: {f.name} damaged after {signal.Signals(sig).name}")
    leftover = temps(paths)
    if sig == signal.SIGKILL:
        stats["temp files a SIGKILL left (for the next run)"] += len(leftover)
    elif leftover:
        stats["temp files left after SIGINT/SIGTERM"] += len(leftover)
        notes.append(f"{name}: {signal.Signals(sig).name} left {', '.join(t.name for t in leftover)}")
    rerun = subprocess.run(CLI + argv, cwd=ROOT, capture_output=True, timeout=600)
    if rerun.returncode != 0:
        stats["reruns failed"] += 1
        notes.append(f"{name}: rerun exit {rerun.returncode}: {rerun.stderr.decode()[-200:]}")
    stale = temps(paths)
    stats["stale temp files after the rerun"] += len(stale)
    if stale:
        notes.append(f"{name}: {', '.join(t.name for t in stale)} after the rerun")
    for f in outputs(paths):
        if not _complete(f):
            stats["incomplete after the rerun"] += 1
            notes.append(f"{name}: {f.name} incomplete after the rerun")


def run_kills(n: int, seed: int, only: list[str] | None = None) -> dict:
    rng = random.Random(seed)
    stats, notes = collections.Counter(), []
    with tempfile.TemporaryDirectory(prefix="roofline-kills-") as tmp:
        table = commands(Path(tmp))
        names = [k for k in table if not only or k in only]
        for name in names:  # the old files, and each command's run time (the signals land within it)
            t0 = time.perf_counter()
            r = subprocess.run(MARKED + table[name][0], cwd=ROOT, capture_output=True, timeout=600)
            if r.returncode != 0:
                raise SystemExit(f"{name} fails before any kill: {r.stderr.decode()[-300:]}")
            table[name] = (table[name][0], time.perf_counter() - t0)
            stats[f"run time of {name} (ms)"] = round(table[name][1] * 1e3)
        for i in range(n):
            name = names[i % len(names)]
            sig = SIGNALS[(i // len(names)) % len(SIGNALS)] if len(names) > 1 else SIGNALS[i % len(SIGNALS)]
            one_kill(name, *table[name], sig, rng, stats, notes)
            stats[f"kills of {name}"] += 1
    return {"seed": seed, "stats": dict(stats), "notes": notes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=21)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", nargs="*", help="command names (default: all)")
    ap.add_argument("--summary", type=Path, help="write the counts as JSON here (atomically)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    res = run_kills(args.kills, args.seed, args.only)
    res["wall_s"], res["load_average"] = round(time.perf_counter() - t0, 1), round(os.getloadavg()[0], 2)
    print("| kills | count |\n|---|---|")
    for key, value in sorted(res["stats"].items()):
        print(f"| {key} | {value} |")
    for note in res["notes"][:40]:
        print(f"- {note}")
    if args.summary:
        from campaign import write_summary

        write_summary(args.summary, res)


if __name__ == "__main__":
    main()
