"""Check the communication model against torch.distributed on this machine.

`roofline validate-comm --world-size N --out DIR` starts N worker processes (RANK,
LOCAL_RANK and WORLD_SIZE in the environment, as torchrun sets them), which meet through a
FileStore in the run's temporary folder, not a TCP store: torch's TCPStore client formats its
peer with a reverse name lookup (a DNS query for 1.0.0.127.in-addr.arpa to the configured
resolver, seen with strace), and a check must make no name lookups at all. gloo's pairs connect
over the loopback interface, pinned by GLOO_SOCKET_IFNAME. The workers time all-reduce and all-to-all over a
range of message sizes (gloo on CPU, NCCL on GPUs), fits the link bandwidth and
per-hop latency of calc.cost.parallel's models by least squares

    all-reduce(M) = 2 (N-1)/N * M / bw + 2 (N-1) * hop
    all-to-all(M) =   (N-1)/N * M / bw +   (N-1) * hop

and writes DIR/comm.csv (size, measured, modelled, error) and DIR/interconnect.yaml,
an ``interconnect:`` block usable in a hardware profile.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from calc.core.errors import SpecError
from calc.core.files import atomic_write

QUICK_SIZES = [2**k for k in range(10, 23, 2)]  # 1 KiB .. 4 MiB
FULL_SIZES = [2**k for k in range(10, 27)]  # 1 KiB .. 64 MiB


def loopback_interface() -> str:
    """The loopback interface's name (lo on Linux, lo0 on macOS)."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        names = []
    return next((n for n in ("lo", "lo0") if n in names), "lo")


# A caller's rendezvous variables must not reach the workers (they meet through the FileStore).
RENDEZVOUS_VARS = ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCH_DISTRIBUTED_DEBUG")


# The read end of a pipe whose write end only the launcher holds: it reads as closed once the
# launcher is gone, however it went (the kernel closes a killed process's files), for watch_parent.
LAUNCHER_ENV = "ROOFLINE_COMM_LAUNCHER_FD"


def worker_env(world_size: int, backend: str, store: str | Path, launcher_fd: int) -> dict[str, str]:
    """The workers' environment: the world size, the FileStore's path, the launcher's pipe
    (watch_parent), and gloo (and NCCL's bootstrap) bound to the loopback interface by name, so
    that no worker resolves a host name or sends anything off the machine."""
    lo = loopback_interface()
    env = {k: v for k, v in os.environ.items() if k not in RENDEZVOUS_VARS}
    return {**env, "WORLD_SIZE": str(world_size), "ROOFLINE_COMM_STORE": str(store),
            "GLOO_SOCKET_IFNAME": lo, "NCCL_SOCKET_IFNAME": lo, "TP_SOCKET_IFNAME": lo,
            "ROOFLINE_COMM_BACKEND": backend, "OMP_NUM_THREADS": "1", LAUNCHER_ENV: str(launcher_fd)}


def socket_addresses() -> list[str]:
    """The local and peer IP addresses of this process's connected inet sockets (the loopback check)."""
    import stat

    folder = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"
    out = set()
    for name in os.listdir(folder):
        try:
            fd = int(name)
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            with socket.socket(fileno=os.dup(fd)) as sock:
                if sock.family not in (socket.AF_INET, socket.AF_INET6):
                    continue
                try:
                    peer = sock.getpeername()[0]
                except OSError:  # a listening socket (the store's server) has no peer and sends nothing
                    continue
                out.update((sock.getsockname()[0], peer))
        except (OSError, ValueError):
            continue
    return sorted(out)


def _time_op(fn, repeats: int, sync) -> float:
    """Lower-quartile wall time of ``fn`` after two warm-ups, every rank starting together.
    On a shared CPU, loopback collectives have a heavy tail of multi-ms scheduling stalls
    (seen here: 0.3 ms typical, 2-8 ms one time in four); the lower quartile measures the
    link, not the stalls."""
    import torch.distributed as dist

    for _ in range(2):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        dist.barrier()
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return float(np.percentile(times, 25))


def watch_parent(folder: str, every_s: float = 0.2) -> int | None:
    """A worker outlives no launcher: once the launcher is gone (a SIGKILLed validate-comm, which
    can clean up nothing), the run's temporary folder is removed and the worker killed.

    The watch is a process of its own, forked before torch is imported, not a thread: torch's
    calls may block holding the GIL (FileStore's constructor retries an open of its file, for
    minutes, once another worker's watch has removed the folder), and a thread then never runs.
    It waits on the pipe the launcher names (LAUNCHER_ENV), which reads as closed whenever the
    launcher is gone: killed, or gone before this worker began to watch. It ends quietly once the
    worker has ended (it is then reparented). Returns the watch's pid (None: no launcher named,
    or no fork on this platform)."""
    import select
    import signal

    named = os.environ.get(LAUNCHER_ENV, "")
    if not named.isdigit() or not hasattr(os, "fork"):
        return None
    fd, worker = int(named), os.getpid()
    pid = os.fork()
    if pid:
        os.close(fd)  # the watch holds it
        return pid
    try:  # the watch: os calls only, and never back into the worker's code
        null = os.open(os.devnull, os.O_RDWR)
        for std in (0, 1, 2):  # the launcher reads the worker's output until every holder closes it
            os.dup2(null, std)
        while os.getppid() == worker:
            ready, _, _ = select.select([fd], [], [], every_s)
            if ready and not os.read(fd, 1):  # closed: the launcher is gone
                if os.getppid() == worker:
                    shutil.rmtree(folder, ignore_errors=True)
                    os.kill(worker, signal.SIGKILL)
                break
    finally:
        os._exit(0)


def worker(sizes: list[int], repeats: int, out_path: str) -> None:
    """One rank: time all_reduce and all_to_all_single over ``sizes`` bytes (fp32 tensors)."""
    watch_parent(str(Path(out_path).parent))
    import torch
    import torch.distributed as dist

    backend = os.environ.get("ROOFLINE_COMM_BACKEND", "gloo")
    store = dist.FileStore(os.environ["ROOFLINE_COMM_STORE"], int(os.environ["WORLD_SIZE"]))
    dist.init_process_group(backend, store=store, rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]))
    rank, world = dist.get_rank(), dist.get_world_size()
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
        device, sync = torch.device("cuda"), torch.cuda.synchronize
    else:
        torch.set_num_threads(1)
        device, sync = torch.device("cpu"), (lambda: None)
    rows = []
    for size in sizes:
        n = max(size // 4, world)
        n -= n % world
        x = torch.ones(n, device=device)
        y = torch.empty_like(x)
        ar = _time_op(lambda x=x: dist.all_reduce(x), repeats, sync)
        a2a = _time_op(lambda x=x, y=y: dist.all_to_all_single(y, x), repeats, sync)
        rows.append({"size_bytes": n * 4, "all_reduce_s": ar, "all_to_all_s": a2a})
    gathered = [None] * world
    dist.all_gather_object(gathered, rows)
    addresses = [None] * world
    dist.all_gather_object(addresses, socket_addresses())
    if rank == 0:
        # the slowest rank's time is the collective's time
        merged = [{k: (max(g[i][k] for g in gathered) if k.endswith("_s") else rows[i][k]) for k in rows[i]}
                  for i in range(len(rows))]
        atomic_write(out_path, json.dumps({"world_size": world, "backend": backend, "rows": merged,
                                           "addresses": sorted({a for ad in addresses for a in ad})}))
    dist.destroy_process_group()


def launch(world_size: int, sizes: list[int], repeats: int, backend: str, timeout_s: float = 300) -> dict:
    """Start ``world_size`` workers as torchrun would and return rank 0's measurements."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "comm.json"
        alive, held = os.pipe()  # the workers watch ``alive``; ``held`` closes when this process ends
        env = worker_env(world_size, backend, Path(tmp) / "store", alive)
        args = [sys.executable, "-m", f"{__package__}.comm", json.dumps(sizes), str(repeats), str(out)]
        try:
            procs = [subprocess.Popen(args, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, pass_fds=(alive,),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for r in range(world_size)]
        finally:
            os.close(alive)
        try:
            return _collect(procs, out, timeout_s)
        finally:
            os.close(held)


def _collect(procs: list[subprocess.Popen], out: Path, timeout_s: float) -> dict:
    """Wait for the workers; rank 0's measurements, or a RuntimeError naming the first failure."""
    errors = []
    for p in procs:
        try:
            _, err = p.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
            errors.append("timed out")
        if p.returncode:
            errors.append(err.strip().splitlines()[-1] if err.strip() else f"exit {p.returncode}")
    if errors or not out.exists():
        raise RuntimeError(f"torch.distributed workers failed: {errors[0] if errors else 'no result'}")
    return json.loads(out.read_text())


def fit(sizes, times, n: int, algo: str) -> tuple[float, float]:
    """Least squares on relative error for (bytes/s, s per hop) of the ring model."""
    frac, hops = (2 * (n - 1) / n, 2 * (n - 1)) if algo == "all_reduce" else ((n - 1) / n, n - 1)
    sizes, times = np.asarray(sizes, float), np.asarray(times, float)
    # t = frac * M * inv_bw + hops * hop; weight rows by 1/t for relative error
    A = np.stack([frac * sizes, np.full_like(sizes, hops)], axis=1) / times[:, None]
    coef, *_ = np.linalg.lstsq(A, np.ones_like(times), rcond=None)
    inv_bw, hop = max(coef[0], 1e-15), max(coef[1], 0.0)
    return 1.0 / inv_bw, hop


def modelled(size, n: int, algo: str, bw: float, hop: float) -> float:
    from calc.cost.parallel import all_to_all, ring_allreduce

    sent, hops = (ring_allreduce if algo == "all_reduce" else all_to_all)(size, n)
    return float(sent / bw + hops * hop)


def validate_comm(world_size: int, out_dir: Path, backend: str = "auto", quick: bool = False,
                  repeats: int | None = None) -> dict:
    """Measure, fit, write DIR/comm.csv and DIR/interconnect.yaml; return a summary."""
    import torch

    if world_size < 2:
        raise SpecError("--world-size", None, f"needs at least 2 processes, got {world_size}")
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= world_size else "gloo"
    if backend == "nccl" and torch.cuda.device_count() < world_size:
        raise SpecError("--backend", None, f"nccl needs {world_size} GPUs, found {torch.cuda.device_count()}")
    sizes = QUICK_SIZES if quick else FULL_SIZES
    data = launch(world_size, sizes, repeats or (12 if quick else 30), backend)
    rows = data["rows"]
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = ["op,size_bytes,measured_s,modelled_s,error"]
    fits = {}
    for algo in ("all_reduce", "all_to_all"):
        s = [r["size_bytes"] for r in rows]
        t = [r[f"{algo}_s"] for r in rows]
        bw, hop = fit(s, t, world_size, algo)
        errs = []
        for size, meas in zip(s, t, strict=True):
            mod = modelled(size, world_size, algo, bw, hop)
            errs.append(mod / meas - 1)
            lines.append(f"{algo},{size},{meas:.6e},{mod:.6e},{mod / meas - 1:+.4f}")
        fits[algo] = {"bandwidth_gb_s_per_direction": bw / 1e9, "latency_us": hop * 1e6,
                      "median_abs_error": float(np.median(np.abs(errs))), "max_abs_error": float(np.max(np.abs(errs)))}
    atomic_write(out_dir / "comm.csv", "\n".join(lines) + "\n")
    ar = fits["all_reduce"]
    block = (
        "# Fitted by `roofline validate-comm` from all-reduce timings "
        f"({data['backend']}, {world_size} processes, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}).\n"
        "interconnect:\n"
        f"  name: measured {data['backend']} x{world_size}\n"
        f"  bandwidth_gb_s_per_direction: {ar['bandwidth_gb_s_per_direction']:.4g}  # source: comm.csv fit\n"
        f"  latency_us: {ar['latency_us']:.4g}  # source: comm.csv fit\n"
    )
    atomic_write(out_dir / "interconnect.yaml", block)
    return {"world_size": world_size, "backend": data["backend"], "fits": fits, "rows": rows,
            "addresses": data.get("addresses", [])}


if __name__ == "__main__":  # a worker, started by launch()
    worker(json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
