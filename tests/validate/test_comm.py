"""The communication model against torch.distributed (gloo, 2 CPU processes)."""

import csv
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

pytest.importorskip("torch")

from calc import load_model  # noqa: E402
from calc.cli.app import app  # noqa: E402
from calc.cost.latency import estimate  # noqa: E402
from calc.cost.setup import Setup
from calc.spec.catalog import HARDWARE_DIR, build  # noqa: E402
from calc.spec.hardware import HardwareSpec  # noqa: E402
from validate.comm import fit, validate_comm, worker_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_fit_recovers_a_known_link():
    # synthetic ring all-reduce at 10 GB/s and 5 us per hop over 4 ranks
    sizes = [2**k for k in range(10, 25)]
    times = [2 * 3 / 4 * s / 10e9 + 6 * 5e-6 for s in sizes]
    bw, hop = fit(sizes, times, 4, "all_reduce")
    assert bw == pytest.approx(10e9, rel=1e-6) and hop == pytest.approx(5e-6, rel=1e-6)


def test_validate_comm_gloo_two_processes(tmp_path):
    out = tmp_path / "comm"
    r = CliRunner().invoke(app, ["validate-comm", "--world-size", "2", "--quick", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "measured vs modelled" in r.output and "all_reduce" in r.output
    rows = list(csv.DictReader((out / "comm.csv").open()))
    assert {row["op"] for row in rows} == {"all_reduce", "all_to_all"}
    for row in rows:
        assert float(row["measured_s"]) > 0 and float(row["modelled_s"]) > 0
    # the fitted block plugs into a hardware profile and drives a TP=2 estimate
    block = yaml.safe_load((out / "interconnect.yaml").read_text())["interconnect"]
    assert block["bandwidth_gb_s_per_direction"] > 0 and block["latency_us"] >= 0
    data = yaml.safe_load((HARDWARE_DIR / "cpu-generic-2core.yaml").read_text())
    hw = build(HardwareSpec, {**data, "interconnect": block}, "measured.yaml")
    est = estimate(load_model("tiny-decoder"), hw, 2, 128, 16, Setup.of(tp=2))
    assert float(est.decode.comm_s) > 0


def test_validate_comm_bad_input():
    r = CliRunner().invoke(app, ["validate-comm", "--world-size", "1"])
    assert r.exit_code == 2 and "at least 2" in r.output
    r = CliRunner().invoke(app, ["validate-comm", "--backend", "mpi"])
    assert r.exit_code == 2 and "--backend" in r.output


def _loopback(text: str) -> bool:
    import ipaddress

    ip = ipaddress.ip_address(text.split("%")[0])
    mapped = getattr(ip, "ipv4_mapped", None)  # ::ffff:127.0.0.1
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def test_workers_stay_on_loopback(tmp_path, monkeypatch):
    # environment: no caller's rendezvous address leaks through; gloo bound to the loopback interface
    monkeypatch.setenv("MASTER_ADDR", "example.invalid")
    env = worker_env(2, "gloo", tmp_path / "store", 7)
    assert env["ROOFLINE_COMM_LAUNCHER_FD"] == "7" and "MASTER_ADDR" not in env and env["ROOFLINE_COMM_STORE"] == str(tmp_path / "store")
    assert env["GLOO_SOCKET_IFNAME"] in ("lo", "lo0") and env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"]
    # every inet socket the two workers held (gloo pairs) is on loopback
    res = validate_comm(2, tmp_path / "comm", "gloo", quick=True, repeats=2)
    assert res["addresses"], "the workers reported no sockets"
    assert all(_loopback(a) for a in res["addresses"]), res["addresses"]


INET = re.compile(r"(connect|sendto|sendmsg|sendmmsg|bind)\((\d+), \{sa_family=AF_INET6?, (sin6?_port)=htons\((\d+)\)"
                  r".*?(inet_addr\(\"([^\"]+)\"\)|inet_pton\(AF_INET6, \"([^\"]+)\")")


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (apt-get install strace)")
def test_traced_run_makes_no_name_lookups_and_stays_on_loopback(tmp_path):
    """Every socket call of the launcher and its workers, UDP included, traced by strace: no
    resolver file is opened, nothing is sent to port 53, every inet address is loopback."""
    trace = tmp_path / "trace.txt"
    code = "from validate.comm import launch; launch(2, [1024, 65536], 2, 'gloo')"
    subprocess.run(["strace", "-f", "-qq", "-s", "0", "-e", "trace=%network,openat", "-o", str(trace),
                    sys.executable, "-c", code], check=True, timeout=300, cwd=ROOT)
    text = trace.read_text()
    calls = INET.findall(text)
    assert calls, "strace saw no inet socket calls (the workers did not talk)"
    for call in calls:
        port, addr = int(call[3]), call[5] or call[6]
        assert _loopback(addr), call
        assert port != 53, call
    assert "resolv.conf" not in text and "nsswitch.conf" not in text


def test_a_killed_launcher_leaves_no_worker_and_no_folder(tmp_path):
    """SIGKILL the launcher while its workers run: they notice, remove the run's folder, exit."""
    import os
    import signal
    import time

    code = ("import sys, tempfile; tempfile.tempdir = sys.argv[1]; from validate.comm import launch; "
            "launch(2, [1 << 22] * 40, 50, 'gloo')")
    launcher = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT)
    deadline = time.time() + 60
    while time.time() < deadline and not list(tmp_path.glob("*/store*")):
        time.sleep(0.1)
    assert list(tmp_path.glob("*/store*")), "the workers never met"
    workers = [int(p) for p in os.listdir("/proc") if p.isdigit() and _is_worker_of(int(p), launcher.pid)]
    assert workers, "no worker process found"
    launcher.send_signal(signal.SIGKILL)
    launcher.wait()
    deadline = time.time() + 60  # a worker polls its parent every 0.2 s; a loaded machine may lag
    while time.time() < deadline and (any(_alive(p) for p in workers) or list(tmp_path.iterdir())):
        time.sleep(0.1)
    left = [p for p in workers if _alive(p)]
    assert not left, f"a worker outlived its launcher: {[_cmdline(p) for p in left]}"
    assert not list(tmp_path.iterdir()), list(tmp_path.iterdir())


def _is_worker_of(pid: int, parent: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return int(stat.rsplit(")", 1)[1].split()[1]) == parent


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return f"{pid} (gone)"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_worker_started_after_its_launcher_died_exits(tmp_path):
    """A worker whose launcher was gone before the worker began to watch (a slow import on a
    loaded machine) still notices: the launcher's pipe reads as closed however long ago it went."""
    import os
    import time

    folder = tmp_path / "run"
    folder.mkdir()
    alive, held = os.pipe()
    os.close(held)  # the launcher is gone before the worker starts
    code = ("import sys, time; from validate.comm import watch_parent; watch_parent(sys.argv[1], 0.05); "
            "time.sleep(60)")
    env = {**os.environ, "ROOFLINE_COMM_LAUNCHER_FD": str(alive)}
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-c", code, str(folder)], cwd=ROOT, env=env, pass_fds=(alive,), timeout=50)
    os.close(alive)
    assert time.time() - t0 < 30, "the worker slept on: it never saw its launcher gone"
    assert proc.returncode == -9  # killed by its watch
    assert not folder.exists()


def test_a_worker_blocked_holding_the_gil_is_still_stopped(tmp_path):
    """The watch is a process: a worker stuck in a call that never lets go of the GIL (as torch's
    FileStore constructor retries the open of a removed file) is killed all the same. A thread
    watching from inside the worker never ran here (the launcher-kill test above hung on it)."""
    import os
    import time

    folder = tmp_path / "run"
    folder.mkdir()
    alive, held = os.pipe()
    # re.match of a catastrophic pattern: seconds of C code that never releases the GIL
    code = ("import re, sys; from validate.comm import watch_parent; watch_parent(sys.argv[1], 0.05); "
            "print('ready', flush=True); re.match(r'(a*)*b', 'a' * 40)")
    env = {**os.environ, "ROOFLINE_COMM_LAUNCHER_FD": str(alive)}
    proc = subprocess.Popen([sys.executable, "-c", code, str(folder)], cwd=ROOT, env=env, pass_fds=(alive,),
                            stdout=subprocess.PIPE, text=True)
    os.close(alive)
    try:
        assert proc.stdout.readline().strip() == "ready"
        t0 = time.time()
        os.close(held)  # the launcher goes
        assert proc.wait(timeout=50) == -9
        assert time.time() - t0 < 30 and not folder.exists()
    finally:
        proc.kill()  # a failed watch leaves the match running for ever
        proc.wait()
