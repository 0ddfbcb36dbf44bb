"""`roofline validate`: a kernel profile first, then held-out whole passes predicted, then measured.

1. The kernel profile (validate/profile.py): probes and kernel tables measured on this
   device, at the widths of the catalog's models except the ones validated here, with a
   profile fitted to them, written as DIR/calibrated.yaml (usable as --hardware) beside
   DIR/kernels/; or an existing one (--profile).
2. For each held-out model (real widths, --layers depth) and dtype: the FLOP and KV count
   checks (reference decoder), then prefill at B x T and decode steps at B x S, each
   predicted with the base profile and with the kernel profile before it is timed.

Whole passes only validate: nothing is fitted to them. Every user mistake is a SpecError
(one line, exit 2); a grid point that runs out of memory is skipped and said so;
measurements.csv is rewritten after every point, so an interrupted run keeps them.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from calc.core.errors import SpecError
from calc.core.files import atomic_write
from calc.core.progress import Reporter
from calc.core.units import canonical_dtype
from calc.spec.catalog import load_hardware
from calc.spec.hardware import HardwareSpec
from calc.spec.model import ModelSpec

from .calibrate import error_stats, write_profile
from .grid import GRIDS, check_fits, default_base, grid
from .measure import is_oom, measure_grid
from .measurements import Row, resolve_spec, write_rows
from .timing import check_device, check_graphs

# held out of the kernel profile's shapes: a Llama-style GQA model (tied embeddings), a Qwen2-style
# one (q/k/v biases, tied embeddings, narrow hidden, wide MLP) and a MoE (128 experts, top-8)
HELD_OUT = ("llama-3.2-1b", "qwen2.5-0.5b", "qwen3-30b-a3b")
BUDGET_S = {"default": 120.0, "quick": 24.0}  # timing budget for the whole grid of all models
MAX_CALL_S = {"default": 5.0, "quick": 3.0}  # a point whose single call is slower is skipped
ROUNDS = {"default": 3, "quick": 2}  # passes over the grid; each point's samples are pooled
DEFAULT_LAYERS = 2


@dataclass
class Options:
    models: tuple[str, ...]
    out: Path
    device: str = "cpu"
    layers: int | None = None
    dtypes: tuple[str, ...] = ("fp32", "bf16")
    quick: bool = False
    hardware: str | None = None
    threads: int | None = None
    budget_s: float | None = None
    impl: str = "reference"  # or "hf": transformers' LlamaForCausalLM (validate/hf.py)
    profile: str | None = None  # an existing kernel profile (skips stage 1)
    graphs: bool = False  # CUDA: kernels and passes timed as CUDA graph replays, as engines run decode
    grid: str | None = None  # a grid of validate.grid.GRIDS; default: quick with --quick, else default

    @property
    def mode(self) -> str:
        """The timing settings (budget, call cap, rounds): quick or default."""
        return "quick" if self.quick else "default"

    @property
    def grid_name(self) -> str:
        return self.mode if self.grid is None else self.grid


@dataclass
class Run:
    """Everything a run produced (what report.py renders)."""

    opts: Options
    specs: list[ModelSpec]
    base: HardwareSpec
    kernel: HardwareSpec | None = None
    device_name: str = ""
    threads: int | None = None
    rows: list[Row] = field(default_factory=list)
    counts: list = field(default_factory=list)
    probes: object = None
    errors: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    profile_s: float = 0.0
    wall_s: float = 0.0
    band_coverage: dict = field(default_factory=dict)
    spent: dict[str, float] = field(default_factory=dict)  # wall seconds by part of the run (where the time goes)
    passes_spent: dict[str, float] = field(default_factory=dict)  # the passes' timing by measure.PARTS
    speed: list[tuple[str, object]] = field(default_factory=list)  # (when, probes.Speed), in order

    def drift(self) -> list[tuple[str, float, float]]:
        """(when, matmuls, memory): each speed check against the first (probes.Speed.against). Below 1:
        the device ran slower than at the first."""
        return [(when, *s.against(self.speed[0][1])) for when, s in self.speed[1:]]

    def where_the_time_went(self) -> str:
        """"kernel profile 60 s, model builds 8 s, ..., the rest 3 s" (of wall_s)."""
        parts = [f"{k} {v:.0f} s" for k, v in self.spent.items()]
        return ", ".join([*parts, f"the rest {max(0.0, self.wall_s - sum(self.spent.values())):.0f} s"])

    def where_the_passes_went(self) -> str | None:
        """"held-out passes 60 s: samples kept 30 s, ..." (the rest: predictions, caches, CSV writes)."""
        total = self.spent.get("held-out passes")
        if not total or not self.passes_spent:
            return None
        parts = [f"{k} {v:.0f} s" for k, v in self.passes_spent.items()]
        return (f"held-out passes {total:.0f} s: " + ", ".join(parts)
                + f", the rest {max(0.0, total - sum(self.passes_spent.values())):.0f} s")

    @contextmanager
    def clock(self, part: str):
        t = time.perf_counter()
        try:
            yield
        finally:
            self.spent[part] = self.spent.get(part, 0.0) + time.perf_counter() - t


def _builder(impl: str, spec: ModelSpec):
    if impl == "hf":
        from .hf import HFDecoder, llama_config

        llama_config(spec)  # a SpecError for what transformers' Llama cannot express
        return HFDecoder
    if impl == "reference":
        from .reference import build_decoder

        return build_decoder
    raise SpecError("--impl", None, f"expected reference or hf, got {impl!r}")


class _Points:
    """The grid's progress: the bar's label while a point is timed, one logged line when it is done."""

    def __init__(self, report: Reporter, total: int):
        self.report, self.total, self.done = report, total, 0

    def timing(self, label: str) -> None:
        self.report(self.done, self.total, label)

    def finish(self, line: str | None, points: int = 1) -> None:
        self.done += points
        if line is not None:
            self.report.log(line)
        self.report(self.done, self.total, "")


def run(opts: Options, say=print, progress: Reporter | None = None) -> Run:
    """The whole validation. ``say`` prints the summary lines; each timed point is logged through
    ``progress`` (stderr; a bar in a terminal)."""
    t_start = time.perf_counter()
    torch = check_device(opts.device)
    from . import counts as counts_mod
    from . import probes as probes_mod
    from . import timing

    dtypes = tuple(dict.fromkeys(canonical_dtype(d) for d in opts.dtypes))
    bad = [d for d in dtypes if d not in ("fp32", "bf16", "fp16")]
    if bad or not dtypes:
        raise SpecError("--dtype", None, f"the reference decoder runs fp32, bf16 or fp16, not {', '.join(bad) or 'none'}")
    if not opts.models:
        raise SpecError("--model", None, "name at least one model to validate")
    specs = [resolve_spec(m, opts.layers or min(DEFAULT_LAYERS, _depth(m))) for m in opts.models]
    builders = {}
    for spec in specs:
        try:
            builders[spec.name] = _builder(opts.impl, spec)
        except SpecError:
            if opts.impl != "hf" or len(specs) == 1:
                raise
    device, cuda = opts.device, opts.device.startswith("cuda")
    if opts.threads is not None and cuda:
        raise SpecError("--threads", None, "sets CPU threads; it does not apply to --device cuda")
    check_graphs(device, opts.graphs)
    if opts.graphs and opts.impl != "reference":
        raise SpecError("--cuda-graphs", None, "times the reference decoder (--impl reference) only")
    name = probes_mod.device_name(device)
    if opts.grid_name not in GRIDS:
        raise SpecError("--grid", None, f"expected one of {', '.join(GRIDS)}, got {opts.grid!r}")
    points = {s.name: grid(s, opts.grid_name, dtypes) for s in specs}
    avail = probes_mod.available_bytes(device)
    for s in specs:
        check_fits(s, dtypes, points[s.name], device, avail)
    base_ref = opts.hardware or default_base(device, name)
    kernel_hw = load_hardware(opts.profile) if opts.profile else None
    if kernel_hw is not None and not kernel_hw.kernel_set:
        raise SpecError("--profile", None, f"{opts.profile} points to no kernel tables (make one with roofline profile)")
    # threads are chosen once the inputs are known good: a refused run says one line, nothing more
    auto_threads = opts.threads is None and not cuda
    if auto_threads:
        opts = replace(opts, threads=timing.idle_threads(say))  # None: every core is idle
    if opts.threads is not None:
        torch.set_num_threads(opts.threads)
    threads = None if cuda else torch.get_num_threads()  # torch's default unless --threads
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    say(f"roofline validate: {', '.join(s.name for s in specs)} on {device} ({name})"
        f"{f', {threads} threads' if threads else ''}, dtypes {', '.join(dtypes)}, {opts.grid_name} grid -> {out}")

    # 1. the kernel profile (never sees the held-out models' widths)
    state = Run(opts, specs, load_hardware(base_ref) if base_ref else None, kernel_hw, name, threads)
    if auto_threads and opts.threads is not None:
        state.notes.append(f"other programs kept cores busy at the start: timed with {opts.threads} thread(s) on the "
                           "idle cores, not torch's default (--threads N chooses)")
    if kernel_hw is None:
        from .profile import run_profile

        # the thread count chosen above (the busy-core check ran once), not a second check
        held = tuple(m for m in opts.models) + tuple(s.name.split("@")[0] for s in specs)
        kernel_hw, path, probe, state.profile_s = run_profile(device, out, threads, opts.quick, dtypes, held,
                                                              say, filename="calibrated.yaml", graphs=opts.graphs)
        state.kernel, state.probes = kernel_hw, probe
        state.spent["kernel profile"] = state.profile_s
        write_profile(probes_mod.measured_profile(probe), out / "probes.yaml",
                      "Measured by roofline validate's probes: peaks are achieved.")
        say(f"kernel profile: {path} ({len(kernel_hw.kernel_tables)} tables, {state.profile_s:.0f} s)")
    else:
        # the tables come along into DIR/kernels/, so the run's folder moves as one
        src = Path(opts.profile).resolve().parent
        (out / "kernels").mkdir(exist_ok=True)
        rel = []
        for k in kernel_hw.kernel_tables:
            path = Path(k) if Path(k).is_absolute() else src / k
            atomic_write(out / "kernels" / path.name, path.read_bytes())
            rel.append(f"kernels/{path.name}")
        write_profile(kernel_hw.model_copy(update={"kernel_tables": rel}), out / "calibrated.yaml",
                      f"The kernel profile {opts.profile}, as validated here (its tables copied into kernels/)")
        state.notes.append(f"kernel profile: {opts.profile} (given with --profile)")
    if state.base is None:
        state.base = load_hardware(str(out / "probes.yaml")) if (out / "probes.yaml").exists() else kernel_hw
        state.notes.append(f"no catalog profile for {name}: the probes' measured profile is the base")
    if opts.impl == "hf":
        state.notes.append("timed transformers' LlamaForCausalLM (StaticCache, SDPA, logits_to_keep=1); the FLOP "
                           "and KV checks run on the reference decoder (roofline validate without --impl)")
        for s in specs:
            if s.name not in builders:
                state.notes.append(f"{s.name}: skipped, transformers' Llama cannot express it")

    # 2. held-out whole passes: predicted with both profiles, then measured
    csv_path = out / "measurements.csv"
    todo = [s for s in specs if s.name in builders]
    if opts.impl == "reference" and not cuda:  # CPU: every model's weights in one arena, its pages faulted in
        # once, not per model (CUDA's caching allocator reuses its memory already, and an arena sized for
        # the largest model would turn one dtype's out-of-memory into every dtype's)
        from .arena import WeightArena
        from .reference import build_decoder, weight_bytes

        arena = WeightArena(max(weight_bytes(s, max(p.positions for p in points[s.name]), d) for s in todo
                                for d in dtypes), device)
        for s in todo:
            builders[s.name] = partial(build_decoder, arena=arena)
    if cuda and not opts.graphs:
        state.notes.append("passes and kernel tables timed eagerly: on a GPU each kernel waits on Python's launch "
                           "(an H200's eager passes of small models took about 2 ms whatever their shape); "
                           "--cuda-graphs times them as engines run decode")
    if opts.graphs:
        state.notes.append("passes and kernel tables timed as CUDA graph replays (--cuda-graphs), as engines run "
                           "decode: the GPU's work without Python's launch of each kernel")
        for s in [s for s in todo if s.moe and s.moe.num_experts]:
            todo.remove(s)
            state.notes.append(f"{s.name}: skipped, the reference MoE's per-expert token lists are data-dependent "
                               "shapes, which a CUDA graph cannot capture")
    n_points = sum(len(points[s.name]) for s in todo)
    state.speed.append(("before the passes", probes_mod.speed_check(device)))  # just after the kernel profile
    budget = opts.budget_s or BUDGET_S[opts.mode]
    per_point = budget / max(n_points, 1)
    sync = timing.synchronizer(device)
    bar = _Points(progress if progress is not None else Reporter(), n_points)
    try:
        for spec in todo:
            meta = {"model": spec.name, "layers": spec.num_layers, "device": device, "threads": threads or 0}
            max_len = max(p.positions for p in points[spec.name])
            for d in dtypes:
                mine = [p for p in points[spec.name] if p.dtype == d]
                try:
                    with state.clock("model builds"):
                        model = builders[spec.name](spec, max_len, d, device)
                except Exception as exc:  # noqa: BLE001 - OOM while building: skip the dtype
                    if not is_oom(exc):
                        raise
                    say(f"out of memory building {spec.name} at {d}: skipped {len(mine)} points (try --layers)")
                    state.rows += [Row(**meta, point=p, split="held-out", status="oom") for p in mine]
                    bar.finish(None, len(mine))
                    continue
                if opts.impl == "reference":
                    with state.clock("FLOP and KV checks"):
                        rep = counts_mod.check_counts(spec, d, device, batch=2, prompt_len=min(32, spec.max_context - 3),
                                                      decode_steps=3, decoder=model)
                    state.counts.append((spec.name, rep))
                    say(f"  counts {spec.name} {d}: {'ok' if rep.ok else 'MISMATCH'}")
                with state.clock("held-out passes"):
                    state.rows += measure_grid(model, spec, state.base, kernel_hw, mine, meta, sync, per_point,
                                                MAX_CALL_S[opts.mode], ROUNDS[opts.mode], bar, csv_path, state.rows,
                                                device, threads, torch, say, state.passes_spent, opts.graphs)
                del model
                if cuda:
                    torch.cuda.empty_cache()
    except KeyboardInterrupt:
        write_rows(csv_path, state.rows)
        say(f"interrupted: {len(state.rows)} points kept in {csv_path}")
        raise
    state.speed.append(("after the passes", probes_mod.speed_check(device)))
    write_rows(csv_path, state.rows)
    state.errors = errors_of(state.rows)
    _bands(state, out, say)
    state.wall_s = time.perf_counter() - t_start
    return state


def _bands(state: Run, out: Path, say) -> None:
    """calibrated.yaml rewritten with the bands of this validation (validate/bands.py)."""
    from calc.spec.bands import MIN_ROWS

    from .bands import profile_bands, write_with_bands

    table, state.band_coverage = profile_bands(state.rows, state.kernel, state.specs)
    if table is None:
        state.notes.append(f"no prediction bands: {state.band_coverage['n']} timed points, fewer than the "
                           f"{MIN_ROWS} a group needs")
        return
    written = load_hardware(str(out / "calibrated.yaml"))  # as written (its tables' paths relative to out)
    write_with_bands(written, table, out / "calibrated.yaml",
                     "The kernel profile validated here, with the prediction bands of its held-out validation "
                     f"(report.md): {', '.join(table.groups)}")
    state.kernel = state.kernel.model_copy(update={"bands": table})
    c = state.band_coverage
    checked = (f"their 80% band covers {100 * c['coverage']:.0f}% of {c['banded']} points, each checked against "
               "bands without its model") if c["banded"] else (
        f"their coverage is unchecked: without any one model, fewer than the {MIN_ROWS} points a band needs are left")
    say(f"prediction bands written into calibrated.yaml ({len(table.groups)} groups); {checked}")


def _depth(ref: str) -> int:
    from calc.spec.catalog import load_model

    return load_model(ref).num_layers


def errors_of(rows: list[Row]) -> dict:
    """|relative error| stats with the base and the kernel profile: per (model, dtype, phase), and per
    (dtype, phase) and phase over every model (keys with "all" in place of model / dtype)."""
    groups: dict[tuple, list[Row]] = {}
    for r in rows:
        if r.status == "ok" and r.measured_s:
            for key in ((r.model, r.point.dtype, r.point.phase), ("all", r.point.dtype, r.point.phase),
                        ("all", "all", r.point.phase)):
                groups.setdefault(key, []).append(r)
    return {k: {"base": error_stats([r.predicted_default_s for r in v], [r.measured_s for r in v]),
                "kernel": error_stats([r.predicted_calibrated_s for r in v], [r.measured_s for r in v]),
                "kernel_fastest": error_stats([r.predicted_calibrated_s for r in v], [r.min_s for r in v])}
            for k, v in groups.items()}


__all__ = ["Options", "Run", "run"]
