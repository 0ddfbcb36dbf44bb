"""Fit a profile's analytical curves to its kernel tables (never to whole passes); torch-free.

Against the measured roofs the profile states: the peak per dtype is the best matmul rate
measured (probes or tables), the bandwidth the best of the copy/read probes and the
streaming kernels moving >= 32 MB (smaller ones may run from the caches): so no fitted
efficiency exceeds 1 against a measurement, and a cached kernel faster than the bandwidth
is clamped to it (said in the profile's notes). Per compute dtype:

- memory: the median rate of streaming kernels moving >= 32 MB, over the bandwidth;
- kernel_overhead_us: the median over streaming tables of the smallest kernel's time less
  its bytes at that rate (bound: never above the smallest measured kernel time);
- compute: the median rate of the matmuls at the largest M, over the peak;
- gemm_m_half: the M at which a matmul reaches half of that, by least squares on
  log(modelled / measured) over every matmul cell (a grid over 0 and 0.1 .. 1e4);
- attention: the median share of the roofline rate the attention kernels reach (<= 1).

The profile keeps the tables (``kernel_tables:``); the curves serve operators without one.
"""

from __future__ import annotations

import datetime as _dt
import stat
from pathlib import Path

import numpy as np

from calc.core.errors import SpecError
from calc.core.files import check_path, stat_of
from calc.core.units import DTYPE_BYTES, GB, MICRO, TB, TERA
from calc.cost.kernels import work
from calc.spec.hardware import HardwareSpec
from calc.spec.kernel_tables import KernelTable, load_kernel_table


def cells(t: KernelTable) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(axis -> value per cell, seconds per cell), row-major as the file stores them."""
    mesh = np.meshgrid(*(np.asarray(v, float) for v in t.axes.values()), indexing="ij")
    return {k: m.ravel() for k, m in zip(t.axes, mesh, strict=True)}, np.asarray(t.seconds, float)


def rates(t: KernelTable) -> np.ndarray:
    ax, s = cells(t)
    return work(t.kernel, ax) / s


DRAM_BYTES = 32e6  # a streaming kernel moving less may run from the caches: not a memory-bandwidth figure


def dram_rates(t: KernelTable) -> np.ndarray:
    """Bytes/s of a streaming table's kernels that move >= DRAM_BYTES (else its largest one's)."""
    ax, _ = cells(t)
    r = rates(t)
    big = ax["bytes"] >= DRAM_BYTES
    return r[big] if big.any() else r[ax["bytes"] == ax["bytes"].max()]


def _attention_bytes(t: KernelTable, ax: dict[str, np.ndarray]) -> np.ndarray:
    a = DTYPE_BYTES[t.dtype or "fp32"]
    B, Hq, D = ax["B"], ax["Hq"], ax["D"]
    Hkv = ax.get("Hkv", Hq)
    if t.kernel == "attention_prefill":
        T = ax["T"]
        return B * T * D * (2 * Hq + 4 * Hkv) * a  # q, out; k, v read and written to the cache
    return B * D * (2 * Hq + 2 * Hkv * (ax["S"] + 1)) * a


def fit_dtype(tables: list[KernelTable], dtype: str, peak: float, bandwidth: float) -> dict:
    """The analytical curves of one dtype (SI inside; the profile's units on the way out)."""
    mine = [t for t in tables if t.dtype == dtype]
    streams = [t for t in mine if t.kernel == "stream"]
    out: dict = {}
    memory = 1.0
    ko = 0.0
    if streams:
        big = np.concatenate([dram_rates(t) for t in streams])
        memory = float(min(1.0, np.median(big) / bandwidth)) if big.size else 1.0
        firsts = [(cells(t)[1][0], cells(t)[0]["bytes"][0]) for t in streams]
        ko = float(np.median([max(0.0, s - b / (bandwidth * memory)) for s, b in firsts]))
        out.update(memory=round(memory, 4), kernel_overhead_us=round(ko / MICRO, 3))
    mm = next((t for t in mine if t.kernel == "matmul"), None)
    compute = 1.0
    if mm is not None:
        ax, s = cells(mm)
        r = rates(mm)
        compute = float(min(1.0, np.median(r[ax["M"] == ax["M"].max()]) / peak))
        a = DTYPE_BYTES[dtype]
        nbytes = (ax["K"] * ax["N"] + ax["M"] * (ax["K"] + ax["N"])) * a
        flops = work("matmul", ax)
        best, half = np.inf, 0.0
        for h in np.concatenate([[0.0], np.logspace(-1, 4, 101)]):
            pred = np.maximum(flops * (1 + h / ax["M"]) / (peak * compute), nbytes / (bandwidth * memory)) + ko
            loss = float(np.sum(np.log(pred / s) ** 2))
            if loss < best:
                best, half = loss, float(h)
        out.update(compute=round(compute, 4), gemm_m_half=round(half, 3))
    shares = []
    for t in mine:
        if t.kernel.startswith("attention"):
            ax, s = cells(t)
            unit = np.maximum(work(t.kernel, ax) / (peak * compute), _attention_bytes(t, ax) / (bandwidth * memory))
            shares.append(unit / s)
    if shares:
        out["attention"] = round(float(np.clip(np.median(np.concatenate(shares)), 1e-3, 1.0)), 4)
    return out


def fitted_profile(tables: list[KernelTable], paths: list[str], name: str, kind: str, memory_bytes: float,
                   probe_peaks: dict[str, float], probe_bandwidth: float, threads: int | None,
                   description: str, provenance: dict) -> HardwareSpec:
    """A profile pointing to ``paths`` (relative to its folder), its curves fitted to ``tables``.
    ``probe_peaks``: FLOP/s per dtype; ``probe_bandwidth``: bytes/s."""
    dtypes = sorted({t.dtype for t in tables if t.dtype}, key=lambda d: (d != "fp32", d))
    if not dtypes:
        raise SpecError("--kernels", None, "no kernel tables with a dtype to fit")
    peaks, notes = {}, []
    for d in dtypes:
        mm = [float(rates(t).max()) for t in tables if t.dtype == d and t.kernel == "matmul"]
        peaks[d] = max([probe_peaks.get(d) or 0.0, *mm])
        if peaks[d] <= 0:
            raise SpecError("--kernels", None, f"no matmul table or probe for {d}: no peak to fit against")
        if mm and max(mm) > (probe_peaks.get(d) or 0.0):
            notes.append(f"{d} peak: a table's matmul ({max(mm) / TERA:.4g} TFLOP/s) beat the probes' "
                         f"({(probe_peaks.get(d) or 0.0) / TERA:.4g}), so it is the measured peak")
    big = [float(dram_rates(t).max()) for t in tables if t.kernel == "stream"]
    bandwidth = max([probe_bandwidth, *big])
    if big and max(big) > probe_bandwidth:
        notes.append(f"bandwidth: a streaming kernel moving >= {DRAM_BYTES / 1e6:.0f} MB ({max(big) / 1e9:.4g} GB/s) "
                     f"beat the copy/read probes ({probe_bandwidth / 1e9:.4g} GB/s), so it is the measured bandwidth")
    fast = sum(int((rates(t) > bandwidth).sum()) for t in tables if t.kernel == "stream")
    if fast:
        notes.append(f"{fast} smaller streaming cells ran above that bandwidth (from the caches); the roofline "
                     "clamps them to it")
    fits = {d: fit_dtype(tables, d, peaks[d], bandwidth) for d in dtypes}
    top, rest = fits[dtypes[0]], {d: fits[d] for d in dtypes[1:]}
    efficiency = {**top, "step_overhead_us": 0.0,
                  "source": f"fitted to the kernel tables beside this file (validate/kernelfit.py), "
                            f"{_dt.date.today().isoformat()}; peaks and bandwidth are the best measured (probes, tables)"}
    if rest:
        efficiency["by_dtype"] = rest
    bounds = [f"kernel overhead {f.get('kernel_overhead_us', 0):.3g} us ({d}) <= the smallest measured kernel's time"
              for d, f in fits.items()]
    return HardwareSpec(
        name=name, description=description, kind=kind,
        sources={"kernels": provenance.get("source", "kernel tables")},
        memory_gb=round(memory_bytes / GB, 3), memory_bandwidth_tb_s=float(f"{bandwidth / TB:.6g}"),
        peak_tflops={d: float(f"{p / TERA:.6g}") for d, p in peaks.items()},
        efficiency=efficiency, threads=threads, kernel_tables=list(paths),
        calibration={"kind": "kernels", **provenance, "notes": notes + bounds},
    )


def load_folder(folder: Path) -> tuple[list[KernelTable], list[Path]]:
    """The tables in ``folder`` (or its kernels/ subfolder), sorted by file name."""
    folder = check_path(folder, "--kernels")  # a name too long: one line, not ENAMETOOLONG
    sub = folder / "kernels"
    info = stat_of(sub, "--kernels")
    where = sub if info is not None and stat.S_ISDIR(info.st_mode) else folder
    files = sorted(where.glob("*.yaml"))
    if not files:
        raise SpecError("--kernels", None, f"no kernel tables (*.yaml) in {where}")
    return [load_kernel_table(p) for p in files], files


def refit_folder(folder: Path, base_ref: str, out: Path) -> HardwareSpec:
    """`roofline calibrate`: the base profile's curves refitted to the tables in ``folder``, written to
    ``out`` (atomically) with table paths relative to its folder; tables outside that folder are
    copied into OUT_STEM-kernels/ beside it first (a profile's tables resolve inside its own folder,
    calc.spec.kernel_tables.table_path); returns it as loaded."""
    import os

    from calc.core.files import atomic_write, check_writable, out_folder
    from calc.spec.catalog import load_hardware

    from .calibrate import profile_yaml

    base = load_hardware(base_ref)
    tables, files = load_folder(folder)
    out = check_writable(Path(out), "--out")
    home = out.resolve().parent
    if not all(f.resolve().is_relative_to(home) for f in files):
        copies = out_folder(out.parent / f"{out.stem}-kernels", "--out")
        for f in files:
            atomic_write(copies / f.name, f.read_bytes(), "--out")
        files = [copies / f.name for f in files]
    rel = [os.path.relpath(f.resolve(), home) for f in files]
    peaks = {d: base.peak_flops_per_s(d) for d in {t.dtype for t in tables if t.dtype}}
    prov = {"source": f"roofline calibrate: {base.name}'s curves refitted to the tables in {folder}",
            "base_profile": base.name, "tables": [t.provenance.model_dump(mode="json") for t in tables[:1]]}
    hw = fitted_profile(tables, rel, f"{base.name}-kernels", base.kind, base.memory_bytes, peaks,
                        base.memory_bandwidth_bytes_per_s, tables[0].provenance.threads,
                        f"{base.description or base.name}, curves fitted to kernel tables", prov)
    data = hw.model_dump(mode="json", exclude_none=True)
    for key in ("sources", "interconnect", "pcie", "price", "tdp_w", "l2_cache_mb", "vendor"):
        if getattr(base, key, None):
            data[key] = base.model_dump(mode="json", exclude_none=True)[key] if key != "sources" else \
                {**base.sources, **hw.sources}
    hw = HardwareSpec(**data)
    atomic_write(out, profile_yaml(hw, f"Refitted by `roofline calibrate` from {folder}; source: {hw.efficiency.source}"))
    return load_hardware(str(out))
