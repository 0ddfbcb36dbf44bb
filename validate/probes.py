"""Device probes: what this device's kernels actually reach.

- matmul FLOP/s per dtype: a large square [N,N]x[N,N] and skinny decode-like
  [B,H]x[H,4H] shapes (fp32 and bf16; fp16 and fp8 on CUDA where supported)
- memory bandwidth: a large copy (read + write bytes) and a large sum (read bytes)
- per-kernel overhead: the time of a tiny elementwise op, back to back

The measured profile states the measured numbers AS its peaks, with efficiencies
of 1: it says what this device did, not what a data sheet promises. (A calibrated
profile, validate/calibrate.py, instead keeps the base profile's data-sheet peaks
and fits efficiencies against them.) Peak FLOP/s per dtype is the best of the
shapes; bandwidth the better of copy and read; kernel overhead the tiny op's time;
each the fastest of its repeats.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import time
from dataclasses import asdict, dataclass

import torch

from calc.core.limits import host_available_bytes
from calc.core.units import GB, TB, TERA
from calc.spec.hardware import HardwareSpec

TORCH = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class MatmulProbe:
    dtype: str
    m: int
    k: int
    n: int
    seconds: float

    @property
    def flops_per_s(self) -> float:
        return 2.0 * self.m * self.k * self.n / self.seconds


@dataclass(frozen=True)
class ProbeResult:
    device: str
    device_name: str
    threads: int
    matmuls: tuple[MatmulProbe, ...]
    copy_bytes_per_s: float
    read_bytes_per_s: float
    kernel_overhead_s: float
    memory_bytes: float

    def peak_flops_per_s(self, dtype: str) -> float | None:
        rates = [p.flops_per_s for p in self.matmuls if p.dtype == dtype]
        return max(rates) if rates else None

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return max(self.copy_bytes_per_s, self.read_bytes_per_s)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["matmuls"] = [{**asdict(p), "tflops": p.flops_per_s / TERA} for p in self.matmuls]
        return d

    def lines(self) -> list[str]:
        out = [f"device {self.device} ({self.device_name}), {self.threads} threads"]
        for p in self.matmuls:
            out.append(f"matmul {p.dtype:5s} [{p.m},{p.k}]x[{p.k},{p.n}]: {p.flops_per_s / 1e9:8.1f} GFLOP/s")
        out.append(f"copy {self.copy_bytes_per_s / GB:.1f} GB/s, read {self.read_bytes_per_s / GB:.1f} GB/s, "
                   f"tiny-kernel overhead {self.kernel_overhead_s * 1e6:.1f} us")
        return out


@dataclass(frozen=True)
class Speed:
    """How fast the device runs now: the median time of a square matmul and of a read beyond the
    caches (speed_check). Two of them, taken apart in time, say whether the device's speed moved:
    on a shared host other machines can slow a whole run by 20% with no sign in its load average."""

    matmul_s: float
    read_s: float

    def against(self, ref: Speed) -> tuple[float, float]:
        """(matmuls, memory): ``ref``'s times over these; below 1 the device runs slower than at ``ref``."""
        return ref.matmul_s / self.matmul_s, ref.read_s / self.read_s


def speed_check(device: str) -> Speed:
    """Medians, not the fastest (what runs typically, not what it can): a 512^3 fp32 matmul (4096^3 on
    CUDA) 30 times after 5 warm-ups, and a sum over 256 MiB (1 GiB on CUDA) 15 times after 3. About 0.3 s
    on a CPU. Back to back in one process they repeat within 2% (matmul) and 10% (read) on this
    project's 2-vCPU VM; the quick probes' fastest-of-5 on small shapes moved by 20% (matmuls) and
    90% (32 MiB, partly cached)."""
    from .timing import synchronizer

    sync = synchronizer(device)
    cuda = device.startswith("cuda")
    n = 4096 if cuda else 512
    with torch.inference_mode():
        a = torch.randn(n, n, device=device)
        x = torch.ones((2**30 if cuda else 2**28) // 4, device=device)
        return Speed(_median(lambda: a @ a, sync, 30, 5), _median(lambda: x.sum(), sync, 15, 3))


def _times(fn, sync, reps: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return times


def _median(fn, sync, reps: int, warmup: int) -> float:
    return sorted(_times(fn, sync, reps, warmup))[reps // 2]


def _timeit(fn, sync, reps: int, warmup: int = 2) -> float:
    """Fastest of ``reps`` calls after ``warmup`` (what the device can do: other programs only slow
    a call down, and the kernel tables keep their fastest sample too)."""
    return min(_times(fn, sync, reps, warmup))


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return name


def memory_bytes(device: str) -> float:
    if device.startswith("cuda"):
        return float(torch.cuda.get_device_properties(torch.device(device)).total_memory)
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def available_bytes(device: str) -> float:
    """Memory free for a run now (CUDA: free device memory; CPU: MemAvailable)."""
    if device.startswith("cuda"):
        return float(torch.cuda.mem_get_info(torch.device(device))[0])
    return host_available_bytes() or memory_bytes(device)


def probe_dtypes(device: str) -> list[str]:
    if not device.startswith("cuda"):
        return ["fp32", "bf16"]
    out = ["fp32", "bf16", "fp16"]
    if torch.cuda.get_device_capability(torch.device(device)) >= (8, 9) and hasattr(torch, "float8_e4m3fn"):
        out.append("fp8")
    return out


def _matmul(dtype: str, m: int, k: int, n: int, device: str, sync, reps: int) -> MatmulProbe | None:
    if dtype == "fp8":
        a = torch.randn(m, k, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=device).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=device)
        try:
            fn = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
            fn()
        except (RuntimeError, TypeError):
            return None
    else:
        a = torch.randn(m, k, device=device, dtype=TORCH[dtype])
        b = torch.randn(k, n, device=device, dtype=TORCH[dtype])
        fn = lambda: a @ b  # noqa: E731
    return MatmulProbe(dtype, m, k, n, _timeit(fn, sync, reps))


def run_probes(device: str = "cpu", quick: bool = False) -> ProbeResult:
    """Measure matmul FLOP/s, bandwidth and kernel overhead on ``device`` (seconds, not minutes)."""
    from .timing import synchronizer

    sync = synchronizer(device)
    cuda = device.startswith("cuda")
    square = (8192 if cuda else 1024) if not quick else (4096 if cuda else 512)
    H = (8192 if cuda else 2048) if not quick else (4096 if cuda else 1024)
    reps = 5 if quick else 9
    probes = []
    with torch.inference_mode():
        for dtype in probe_dtypes(device):
            for m, k, n in [(square, square, square), *[(b, H, 4 * H) for b in (1, 8, 64)]]:
                p = _matmul(dtype, m, k, n, device, sync, reps)
                if p is not None:
                    probes.append(p)
        nbytes = (2 * 2**30 if cuda else 2**27) if not quick else (2**28 if cuda else 2**25)
        x = torch.ones(nbytes // 4, device=device)
        y = torch.empty_like(x)
        copy_s = _timeit(lambda: y.copy_(x), sync, reps)
        read_s = _timeit(lambda: x.sum(), sync, reps)
        x = y = None  # free the buffers before the next probe
        tiny = torch.ones(8, device=device)
        loops = 200 if quick else 1000

        def launches():
            for _ in range(loops):
                tiny.add_(0.0)

        overhead = _timeit(launches, sync, 3) / loops
    return ProbeResult(device, device_name(device), torch.get_num_threads(), tuple(probes),
                       2.0 * nbytes / copy_s, nbytes / read_s, overhead, memory_bytes(device))


def measured_profile(result: ProbeResult, name: str | None = None) -> HardwareSpec:
    """A HardwareSpec whose peaks ARE the measurements (efficiency 1, kernel overhead measured)."""
    peaks = {d: result.peak_flops_per_s(d) / TERA for d in ("fp32", "bf16", "fp16", "fp8")
             if result.peak_flops_per_s(d)}
    return HardwareSpec(
        name=name or f"measured-{result.device.replace(':', '')}",
        description=f"Measured by roofline's probes on {result.device_name} ({result.threads} threads)",
        kind="gpu" if result.device.startswith("cuda") else "cpu",
        sources={"probes": f"validate/probes.py, torch {torch.__version__}, "
                           f"{_dt.date.today().isoformat()}: best matmul per dtype, better of copy and read"},
        memory_gb=result.memory_bytes / GB,
        memory_bandwidth_tb_s=result.bandwidth_bytes_per_s / TB,
        peak_tflops=peaks,
        efficiency={"compute": 1.0, "memory": 1.0, "kernel_overhead_us": result.kernel_overhead_s * 1e6,
                    "step_overhead_us": 0.0,
                    "source": "measured: the peaks above are achieved numbers, so efficiencies are 1"},
        calibration={"kind": "probes", "torch": torch.__version__, "date": _dt.date.today().isoformat(),
                     "probes": result.to_dict()},
    )
