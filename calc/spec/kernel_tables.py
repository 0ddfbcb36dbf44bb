"""Kernel tables: measured kernel times over a grid of shapes, as data (hardware_profiles/kernels/FORMAT.md).

A table is one kernel kind at one dtype (and, for streaming kernels and collectives, one
operation): its ``axes`` name the shape dimensions and list the measured values of each,
and ``seconds`` holds one time per grid cell, row-major (the last axis varies fastest).
A hardware profile names its tables in ``kernel_tables:`` by path, relative to the profile's
folder; ``load_kernel_tables`` reads them here, in the spec layer, and the profile carries
them as a value (``HardwareSpec.kernel_set``): the cost layer reads no files.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from calc.core.errors import SpecError
from calc.core.files import check_path, exists
from calc.core.units import canonical_dtype
from calc.spec.model import _Spec
from calc.spec.yamlio import build, read_yaml

FORMAT = "roofline-kernels/1"

# The shape axes each kernel kind may be tabulated over (a table may use a subset: its time
# is then taken as independent of the axes it leaves out). Letters follow DESIGN.md.
KERNEL_AXES: dict[str, tuple[str, ...]] = {
    "matmul": ("M", "K", "N"),  # x[M, K] @ W[K, N]
    "attention_prefill": ("B", "T", "Hq", "Hkv", "D", "W"),  # causal over T fresh tokens, window W
    "attention_decode": ("B", "S", "Hq", "Hkv", "D"),  # one query per sequence over S + 1 cached positions
    "stream": ("bytes",),  # an elementwise kernel (op: norm, rope, act, add), bytes as calc counts them
    "embedding": ("bytes",),  # gather of B*n rows: rows read + written
    "sample": ("bytes",),  # greedy argmax over fp32 logits: logits read + indices written
    "collective": ("bytes", "world"),  # message bytes per device, devices in the group
}
# The axes a table must have: its time per unit of work (FLOPs or bytes) is interpolated, and the
# work of a grid cell needs these. A prefill table without W was measured without a window.
REQUIRED_AXES: dict[str, tuple[str, ...]] = {
    "matmul": ("M", "K", "N"), "attention_prefill": ("B", "T", "Hq", "D"), "attention_decode": ("B", "S", "Hq", "D"),
    "stream": ("bytes",), "embedding": ("bytes",), "sample": ("bytes",), "collective": ("bytes",),
}
STREAM_OPS = ("norm", "rope", "act", "add")
COLLECTIVE_OPS = ("all_reduce", "all_to_all")


class Provenance(_Spec):
    """Where a table's numbers come from: the device, its software, threads, the date and how."""

    device: str = Field(min_length=1)  # cpu, cuda, or a catalog hardware name for published data
    device_name: str = ""
    software: dict[str, str] = Field(default_factory=dict)  # e.g. torch: 2.13.0, python: 3.11.9
    threads: int | None = Field(default=None, ge=1)  # CPU threads the kernels ran with
    date: str
    source: str = Field(min_length=1)  # "measured by roofline profile", or a citation
    notes: str = ""  # e.g. how many samples other programs descheduled while it was measured

    @field_validator("date", mode="before")
    @classmethod
    def _date_text(cls, v: object) -> object:
        return v.isoformat() if isinstance(v, (_dt.date, _dt.datetime)) else v


# A measured kernel call lasts from a nanosecond (no launch completes faster; the shortest GPU
# kernels take about a microsecond) to an hour; a time outside is a unit slip, and fitting it
# would give a bandwidth of 6.7e25 TB/s (seconds of 1e-30).
MIN_KERNEL_S, MAX_KERNEL_S = 1e-9, 3600.0


class KernelTable(_Spec):
    """One kernel kind at one dtype over a grid of shapes; seconds per call, row-major."""

    format: Literal["roofline-kernels/1"]
    kernel: Literal["matmul", "attention_prefill", "attention_decode", "stream", "embedding", "sample",
                    "collective"]
    dtype: str | None = None  # compute dtype (None: any, e.g. collectives)
    op: str | None = None  # stream: norm | rope | act | add; collective: all_reduce | all_to_all
    provenance: Provenance
    axes: dict[str, list[float]]
    seconds: list[float]

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, v: str | None) -> str | None:
        return None if v is None else canonical_dtype(v)

    @model_validator(mode="after")
    def _grid(self) -> KernelTable:
        allowed = KERNEL_AXES[self.kernel]
        if not self.axes:
            raise ValueError("axes: needs at least one axis")
        for name, values in self.axes.items():
            if name not in allowed:
                raise ValueError(f"axes: {self.kernel} tables take {', '.join(allowed)}, not {name!r}")
            if not values or any(not (isinstance(x, (int, float)) and x > 0 and math.isfinite(x)) for x in values):
                raise ValueError(f"axes.{name}: values must be positive numbers")
            if any(b <= a for a, b in zip(values, values[1:], strict=False)):
                raise ValueError(f"axes.{name}: values must increase strictly")
        missing = [a for a in REQUIRED_AXES[self.kernel] if a not in self.axes]
        if missing:
            raise ValueError(f"axes: a {self.kernel} table needs {', '.join(missing)}")
        cells = math.prod(len(v) for v in self.axes.values())
        if len(self.seconds) != cells:
            raise ValueError(f"seconds: {len(self.seconds)} values for a grid of {cells} cells "
                             f"({' x '.join(str(len(v)) for v in self.axes.values())})")
        if any(not (isinstance(s, (int, float)) and MIN_KERNEL_S <= s <= MAX_KERNEL_S) for s in self.seconds):
            raise ValueError(f"seconds: every time must be a number from {MIN_KERNEL_S:g} to {MAX_KERNEL_S:g} s "
                             "(a kernel call)")
        ops = {"stream": STREAM_OPS, "collective": COLLECTIVE_OPS}.get(self.kernel, (None,))
        if self.op not in ops:
            raise ValueError(f"op: {self.kernel} tables take op {' | '.join(map(str, ops))}, got {self.op!r}")
        return self

    @property
    def key(self) -> tuple[str, str | None, str | None]:
        """(kernel, dtype, op): what a lookup asks for."""
        return self.kernel, self.dtype, self.op


class KernelSet:
    """The tables a profile points to, by (kernel, dtype, op); immutable once built."""

    def __init__(self, tables: tuple[KernelTable, ...] = ()):
        self.tables = tuple(tables)
        self._by_key = {t.key: t for t in self.tables}

    def find(self, kernel: str, dtype: str | None, op: str | None = None) -> KernelTable | None:
        """The table for this kernel at ``dtype`` (else one valid for any dtype)."""
        return self._by_key.get((kernel, dtype, op)) or self._by_key.get((kernel, None, op))

    def __bool__(self) -> bool:
        return bool(self.tables)

    def __len__(self) -> int:
        return len(self.tables)


def load_kernel_table(path: str | Path) -> KernelTable:
    """One table file; any problem is a SpecError naming it."""
    data = read_yaml(Path(path))
    if data.get("format") != FORMAT:  # the value is not echoed: the file may be anything
        raise SpecError(path, "format", f"not {FORMAT!r}: not a kernel table")
    return build(KernelTable, data, path)


KERNEL_PATH_ENV = "ROOFLINE_KERNEL_PATH"


def table_path(rel: str, folder: Path, profile: object) -> Path:
    """Where a profile's ``kernel_tables:`` entry lives: inside the profile's folder, or inside a
    folder the user names in ROOFLINE_KERNEL_PATH (os.pathsep-separated), symlinks resolved; an
    entry that leads anywhere else (``../``, an absolute path, a symlink out) is refused, so a
    profile cannot make the tool open /etc/passwd or /proc/self/environ."""
    where = f"kernel_tables entry {_shown(rel)}"
    check_path(rel, where)
    roots = [folder] + [Path(r) for r in os.environ.get(KERNEL_PATH_ENV, "").split(os.pathsep) if r]
    try:
        p = (Path(rel) if Path(rel).is_absolute() else folder / rel).resolve()
        inside = [r for r in roots if p.is_relative_to(check_path(r, KERNEL_PATH_ENV).resolve())]
    except (OSError, RuntimeError) as exc:
        raise SpecError(profile, "kernel_tables", f"{_shown(rel)}: cannot resolve ({exc})") from None
    if not inside:
        raise SpecError(profile, "kernel_tables", f"{_shown(rel)} is outside the profile's folder (tables live "
                                                  f"beside the profile, or in a folder named in {KERNEL_PATH_ENV})")
    if not exists(p):
        raise SpecError(profile, "kernel_tables", f"table {_shown(rel)} not found (looked for {p})")
    return p


def _shown(rel: str) -> str:
    return rel if len(rel) <= 80 else f"{rel[:60]}...({len(rel)} characters)"


def load_kernel_tables(paths: list[str], folder: Path, profile: object, kind: str) -> KernelSet:
    """The tables a profile at ``folder`` names (relative paths resolve against it). Two tables for
    the same (kernel, dtype, op), or one measured on another kind of device, is an error."""
    tables: list[KernelTable] = []
    seen: dict[tuple, Path] = {}
    for rel in paths:
        p = table_path(rel, folder, profile)
        t = load_kernel_table(p)
        dev = t.provenance.device.split(":")[0]
        if (dev == "cpu") != (kind == "cpu") and dev in ("cpu", "cuda"):
            raise SpecError(p, "provenance.device", f"measured on {t.provenance.device}, but the profile is a {kind}")
        if t.key in seen:
            raise SpecError(p, None, f"a second {t.kernel} table for dtype {t.dtype} op {t.op} (first: {seen[t.key]})")
        seen[t.key] = p
        tables.append(t)
    return KernelSet(tuple(tables))
