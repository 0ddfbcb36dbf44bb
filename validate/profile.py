"""`roofline profile`: probes, then kernel tables, then a profile fitted to them, in DIR.

DIR/kernels/<kernel>[-<op>]-<dtype>.yaml (hardware_profiles/kernels/FORMAT.md) and
DIR/profile.yaml, a HardwareSpec that points to them by relative path (the folder moves
as one) with its analytical curves fitted to them (validate/kernelfit.py). Every file is
written atomically; the profile last, so a profile never names a table not yet written.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import yaml

from calc.core.errors import SpecError
from calc.core.files import atomic_write
from calc.spec.catalog import load_hardware
from calc.spec.hardware import HardwareSpec
from calc.spec.kernel_tables import KernelTable

from .kernelfit import fitted_profile


class _Flow(yaml.SafeDumper):
    """Lists of numbers on one line (a table's axes and seconds stay readable)."""


_Flow.add_representer(list, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v,
                                                              flow_style=all(isinstance(x, (int, float)) for x in v)))


def table_yaml(t: KernelTable) -> str:
    head = [f"# {t.kernel}{'/' + t.op if t.op else ''} {t.dtype or ''}: seconds per call over the grid of axes, "
            "row-major (last axis fastest); hardware_profiles/kernels/FORMAT.md",
            f"# source: {t.provenance.source}; {t.provenance.device_name or t.provenance.device}, {t.provenance.date}"]
    body = yaml.dump(t.model_dump(mode="json", exclude_none=True), Dumper=_Flow, sort_keys=False, width=4096)
    return "\n".join(head) + "\n" + body


def table_name(t: KernelTable) -> str:
    return "-".join(x for x in (t.kernel, t.op, t.dtype) if x) + ".yaml"


def write_profile_folder(out: Path, tables: list[KernelTable], make_profile,
                         filename: str = "profile.yaml") -> tuple[HardwareSpec, Path]:
    """Write the tables, then ``make_profile(relative paths)`` as ``filename``; return it as loaded."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "kernels").mkdir(exist_ok=True)
    rel = []
    for t in tables:
        atomic_write(out / "kernels" / table_name(t), table_yaml(t))
        rel.append(f"kernels/{table_name(t)}")
    hw = make_profile(rel)
    path = out / filename
    from .calibrate import profile_yaml

    atomic_write(path, profile_yaml(hw, "Measured by `roofline profile`: peaks and bandwidth are the best measured (probes, tables); "
                                        "efficiencies fitted to the kernel tables beside it.\n"
                                        f"source: {hw.efficiency.source}\nUse it with --hardware {path}"))
    return load_hardware(str(path)), path


BUSY_WARN = 0.5  # cores other programs used on average, above which the profile warns


def run_profile(device: str, out: Path, threads: int | None = None, quick: bool = False,
                dtypes: tuple[str, ...] = ("fp32", "bf16"), exclude: tuple[str, ...] = (), say=print,
                filename: str = "profile.yaml", graphs: bool = False):
    """Probe, measure every table, fit and write. Returns (the profile as loaded, its path, probe, seconds).
    ``graphs``: tables timed as CUDA graph replays (validate.timing.graph_replay)."""
    from . import kernels as km
    from . import probes
    from .timing import _cpu_busy_s, busy_cores, check_device, check_graphs, idle_threads

    torch = check_device(device)
    check_graphs(device, graphs)
    if threads is None and not device.startswith("cuda"):
        threads = idle_threads(say)
    if threads is not None:
        if device.startswith("cuda"):
            raise SpecError("--threads", None, "sets CPU threads; it does not apply to --device cuda")
        torch.set_num_threads(threads)
    threads = torch.get_num_threads() if not device.startswith("cuda") else None
    t0 = time.perf_counter()
    name = probes.device_name(device)
    say(f"roofline profile: {device} ({name}){f', {threads} threads' if threads else ''}, "
        f"{'quick' if quick else 'full'}{', CUDA graphs' if graphs else ''} -> {out}")
    probe = probes.run_probes(device, quick=True)
    say("probes: " + "; ".join(probe.lines()[1:]))
    before, w0 = _cpu_busy_s(), time.perf_counter()
    tables = km.measure_tables(device, dtypes, quick, threads, name, exclude, say, graphs=graphs)
    others = busy_cores(before, _cpu_busy_s(), time.perf_counter() - w0)
    prov = km.provenance(device, name, threads, quick, graphs)
    if others is not None:
        prov["notes"] = f"other programs kept {others:.2f} CPU cores busy on average while the tables were measured"
        if not device.startswith("cuda") and others >= BUSY_WARN:
            say(f"warning: other programs kept {others:.1f} of {os.cpu_count()} CPU cores busy while the tables were "
                "measured; small kernels may read slow (cells checked against their neighbours were measured again, "
                "see each table's notes). Advice: stop them and profile again, or give --threads fewer than the idle "
                "cores.")
    kind = "gpu" if device.startswith("cuda") else "cpu"
    peaks = {d: probe.peak_flops_per_s(d) for d in dtypes if probe.peak_flops_per_s(d)}

    def make(rel):
        return fitted_profile(tables, rel, f"profile-{device.replace(':', '')}", kind, probe.memory_bytes, peaks,
                              probe.bandwidth_bytes_per_s, threads,
                              f"Kernel profile of {name}" + (f" at {threads} threads" if threads else ""),
                              {**prov, "probes": probe.to_dict()})

    hw, path = write_profile_folder(Path(out), tables, make, filename)
    return hw, path, probe, time.perf_counter() - t0
