"""`roofline validate`: counts, probes, timed grid, calibration and report, in that order.

Every user mistake is a SpecError (one line, exit 2): no CUDA for --device cuda, a
model too large for the device at full depth (with a --layers suggestion), bad
--layers or --dtype. A grid point that runs out of memory is skipped and said so;
measurements.csv is rewritten after every point, so an interrupted run keeps them.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from calc.core.errors import SpecError
from calc.core.progress import Reporter
from calc.core.units import GB, canonical_dtype
from calc.spec.catalog import hardware_catalog, load_hardware
from calc.spec.hardware import HardwareSpec
from calc.spec.model import ModelSpec
from validate import calibrate as cal
from validate.fitting import calibrate_run
from validate.measurements import SEED, Row, predict_point, request_prediction, resolve_spec, write_rows
from validate.timing import Point

GRIDS = {  # batches, prompt lengths (prefill), decode contexts
    "default": ((1, 2, 4, 8), (16, 32, 64, 128, 256, 512), (16, 64, 256, 1024)),
    "quick": ((1, 4), (16, 32, 64, 128, 256), (16, 64, 256, 512)),
}
BUDGET_S = {"default": 150.0, "quick": 12.0}  # timing budget for the whole grid
MAX_CALL_S = {"default": 2.0, "quick": 0.5}  # a point whose single call is slower is skipped
ROUNDS = {"default": 3, "quick": 2}  # passes over the grid; each point's samples are pooled


@dataclass
class Options:
    model: str
    out: Path
    device: str = "cpu"
    layers: int | None = None
    dtypes: tuple[str, ...] = ("fp32", "bf16")
    quick: bool = False
    hardware: str | None = None
    threads: int | None = None
    budget_s: float | None = None
    impl: str = "reference"  # or "hf": transformers' LlamaForCausalLM (validate/hf.py)

    @property
    def mode(self) -> str:
        return "quick" if self.quick else "default"


@dataclass
class Run:
    """Everything a run produced (what report.py renders)."""

    opts: Options
    spec: ModelSpec
    base: HardwareSpec
    device_name: str = ""
    threads: int = 0
    rows: list[Row] = field(default_factory=list)
    counts: list = field(default_factory=list)
    probes: object = None
    requests: list[dict] = field(default_factory=list)
    fits: dict = field(default_factory=dict)
    calibrated: HardwareSpec | None = None
    errors: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0


def check_device(device: str):
    try:
        import torch
    except ImportError:
        raise SpecError("--device", None, "torch is not installed; pip install 'roofline[torch]'") from None
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise SpecError("--device", None, f"CUDA is not available (torch {torch.__version__}); "
                                              "use --device cpu") from None
    elif device != "cpu":
        raise SpecError("--device", None, f"expected cpu or cuda, got {device!r}")
    return torch


def default_base(device: str, name: str) -> str | None:
    """The catalog profile for this device: cpu-generic-2core on CPU; on CUDA the catalog
    name whose first word (h200, a100, l40s, ...) is a word of the device name."""
    cat = hardware_catalog()
    if not device.startswith("cuda"):
        return "cpu-generic-2core" if "cpu-generic-2core" in cat else None
    words = set("".join(c if c.isalnum() else " " for c in name.lower()).split())
    hits = sorted(n for n in cat if n.split("-")[0] in words)
    return hits[0] if hits else None


def grid(spec: ModelSpec, mode: str, dtypes) -> list[Point]:
    batches, prompts, contexts = GRIDS[mode]
    T = [t for t in prompts if t <= spec.max_context] or [max(1, spec.max_context // 2)]
    S = [s for s in contexts if s + 1 <= spec.max_context] or [max(1, spec.max_context // 2)]
    pts = []
    for d in dtypes:
        pts += [Point(d, "prefill", b, t) for b in batches for t in T]
        pts += [Point(d, "decode", b, s) for b in batches for s in S]
    return pts


def check_fits(spec: ModelSpec, dtypes, points: list[Point], device: str, available: float) -> None:
    """A model too large for the device at this depth is an input error, with a --layers hint."""
    from validate.reference import reduced

    widest = max(dtypes, key=lambda d: {"fp32": 4, "bf16": 2, "fp16": 2}.get(d, 2))
    B = max(p.batch for p in points)
    n = max(max(p.size + 1 for p in points), SEED[1] + SEED[2])
    act = 6 * B * max(p.size for p in points if p.phase == "prefill") * max(
        spec.hidden_size, spec.mlp.intermediate_size or 0) * 4.0

    def need(s: ModelSpec) -> float:
        return float(s.weight_bytes(widest) + s.kv_cache_bytes(n, B, widest)) + act

    total = need(spec)
    if total <= 0.8 * available:
        return
    one = need(reduced(spec, 1)) if spec.num_layers > 1 else total
    per_layer = (total - one) / max(spec.num_layers - 1, 1)
    fit = int((0.8 * available - one) // per_layer) + 1 if per_layer > 0 and one <= 0.8 * available else 0
    if fit >= 1:
        hint = f"; try --layers {max(1, min(fit, spec.num_layers - 1))}"
    elif widest == "fp32" and one / 2 <= 0.8 * available:
        hint = "; try --layers 1 --dtype bf16 (one fp32 layer with its embedding and lm_head is too large)"
    else:
        hint = "; even --layers 1 does not fit (its embedding and lm_head alone are too large)"
    raise SpecError("--model", None, f"{spec.name} ({spec.num_layers} layers, {widest}) needs about "
                                     f"{total / GB:.1f} GB; {device} has {available / GB:.1f} GB available{hint}")


def _is_oom(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, MemoryError) or "out of memory" in text or "can't allocate" in text \
        or "cannot allocate" in text or type(exc).__name__ == "OutOfMemoryError"


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
    from validate import counts as counts_mod
    from validate import probes as probes_mod
    from validate import timing
    from validate.reference import build_decoder

    dtypes = tuple(dict.fromkeys(canonical_dtype(d) for d in opts.dtypes))
    bad = [d for d in dtypes if d not in ("fp32", "bf16", "fp16")]
    if bad:
        raise SpecError("--dtype", None, f"the reference decoder runs fp32, bf16 or fp16, not {', '.join(bad)}")
    spec = resolve_spec(opts.model, opts.layers)
    if opts.impl == "hf":
        from validate.hf import HFDecoder, llama_config

        llama_config(spec)  # a SpecError now, not after the probes
        builder = HFDecoder
    elif opts.impl == "reference":
        builder = build_decoder
    else:
        raise SpecError("--impl", None, f"expected reference or hf, got {opts.impl!r}")
    device = opts.device
    cuda = device.startswith("cuda")
    threads = opts.threads or (torch.get_num_threads() if cuda else max(1, (os.cpu_count() or 2) // 2))
    if not cuda:
        torch.set_num_threads(threads)
    name = probes_mod.device_name(device)
    points = grid(spec, opts.mode, dtypes)
    check_fits(spec, dtypes, points, device, probes_mod.available_bytes(device))
    base_ref = opts.hardware or default_base(device, name)
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    say(f"roofline validate: {spec.name} ({spec.num_layers} layers) on {device} ({name}), "
        f"{threads} threads, dtypes {', '.join(dtypes)}, {opts.mode} grid -> {out}")

    # 1. probes -> the measured profile (and the base, if the catalog has none for this device)
    probe = probes_mod.run_probes(device, quick=True)
    measured = probes_mod.measured_profile(probe)
    cal.write_profile(measured, out / "probes.yaml", "Measured by roofline validate's probes: peaks are achieved.")
    base = load_hardware(base_ref) if base_ref else measured
    state = Run(opts, spec, base, name, threads, probes=probe)
    if not base_ref:
        state.notes.append(f"no catalog profile for {name}: the probes' measured profile is the base")
    if opts.impl == "hf":
        state.notes.append("timed transformers' LlamaForCausalLM (StaticCache, SDPA, logits_to_keep=1); the FLOP "
                           "and KV checks run on the reference decoder (roofline validate without --impl)")
    say(f"base profile {base.name}; probes: " + "; ".join(probe.lines()[1:3]) + " ...")
    (out / "model.yaml").write_text(cal.yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True),
                                                       sort_keys=False))
    csv_path = out / "measurements.csv"
    budget = opts.budget_s or BUDGET_S[opts.mode]
    per_point = budget / max(len(points), 1)
    max_call = MAX_CALL_S[opts.mode]
    sync = timing.synchronizer(device)
    bar = _Points(progress if progress is not None else Reporter(), len(points))
    meta = {"model": spec.name, "layers": spec.num_layers, "device": device, "threads": threads}
    max_len = max(max(p.size + 1 for p in points), SEED[1] + SEED[2])
    splits = dict(zip(points, cal.split(points), strict=True))
    try:
        for d in dtypes:
            mine = [p for p in points if p.dtype == d]
            try:
                model = builder(spec, max_len, d, device)
            except Exception as exc:  # noqa: BLE001 - OOM while building: skip the dtype
                if not _is_oom(exc):
                    raise
                say(f"out of memory building {spec.name} at {d}: skipped {len(mine)} points (try --layers)")
                state.rows += [Row(**meta, point=p, split=splits[p], status="oom") for p in mine]
                bar.finish(None, len(mine))
                continue
            # 2. counts (FLOPs and KV bytes) on the same model (the reference decoder's structure)
            if opts.impl == "reference":
                rep = counts_mod.check_counts(spec, d, device, batch=2, prompt_len=min(32, spec.max_context - 3),
                                              decode_steps=3, decoder=model)
                state.counts.append(rep)
                for line in rep.lines():
                    say(f"  count {d}: {line}")
            # 3. the seed experiment (a whole request), prediction first; skipped when long
            if _request_fits(spec, base, d, budget / len(dtypes) / 4):
                state.requests.append(_request(model, spec, base, d, device, opts.quick, say))
            else:
                say(f"  request {d}: skipped (its predicted time exceeds a quarter of the budget)")
            # 4. the grid, in rounds (a slow spell of the machine spreads over every point)
            state.rows += _measure_grid(model, spec, base, mine, splits, meta, sync, per_point, max_call,
                                        ROUNDS[opts.mode], bar, csv_path, state.rows, device, threads, torch, say)
            del model
            if cuda:
                torch.cuda.empty_cache()
    except KeyboardInterrupt:
        write_rows(csv_path, state.rows)
        say(f"interrupted: {len(state.rows)} points kept in {csv_path}")
        raise
    # 5. calibration, then every prediction again through calc with the written profile
    calibrate_run(state, ko_prior=probe.kernel_overhead_s)
    write_rows(csv_path, state.rows)
    state.wall_s = time.perf_counter() - t_start
    return state


def _measure_grid(model, spec, base, points, splits, meta, sync, per_point, max_call, rounds, bar, csv_path,
                  done_rows, device, threads, torch, say) -> list[Row]:
    """Time ``points`` (one dtype) in ``rounds`` passes over the grid; each point's samples from all
    rounds are pooled. The prediction is printed before the last round's measurement."""
    rows = {}
    for p in points:
        pred, bound = predict_point(spec, base, p)
        rows[p] = Row(**meta, point=p, split=splits[p], predicted_default_s=pred, bound_default=bound)
    pooled: dict[Point, list] = {p: [] for p in points}
    dead: dict[Point, str] = {}
    for rnd in range(rounds):
        last = rnd == rounds - 1
        if not last:
            say(f"  round {rnd + 1}/{rounds} over {len(points)} {points[0].dtype} points ...")
        for b in sorted({p.batch for p in points}):
            mine = [p for p in points if p.batch == b]
            try:
                model.setup(b, next(model.parameters()).dtype, device)
            except Exception as exc:  # noqa: BLE001 - OOM for this batch's cache: skip its points
                if not _is_oom(exc):
                    raise
                for p in mine:
                    dead.setdefault(p, "oom")
                say(f"out of memory allocating the KV cache for batch {b}: its points skipped")
            for p in mine:
                head = f"{p.label:<30s} predicted {rows[p].predicted_default_s * 1e3:9.3f} ms"
                if last:
                    bar.timing(head)
                if p not in dead:
                    got = _time_point(model, spec, p, sync, per_point / rounds, max_call, device, threads, torch,
                                      dead, points)
                    if isinstance(got, str):
                        dead[p] = got
                    else:
                        pooled[p].append(got)
                if last:
                    if p in dead:
                        bar.finish(f"{head} -> {dead[p]}")
                    else:
                        t = _pool(pooled[p])
                        rows[p] = rows[p].timed(t)
                        flags = t.flags()
                        bar.finish(f"{head} -> measured {t.median_s * 1e3:9.3f} ms "
                                   f"({100 * (rows[p].predicted_default_s / t.median_s - 1):+6.1f}%)"
                                   + (f"  [{'; '.join(flags)}]" if flags else ""))
                    write_rows(csv_path, done_rows + [rows[q] for q in points if q in dead or
                                                      rows[q].status == "ok"])
    return [replace(rows[p], status=dead[p]) if p in dead else rows[p] for p in points]


def _pool(timings):
    from validate.timing import Timing

    return Timing(tuple(s for t in timings for s in t.samples_s), min(t.inner for t in timings),
                  sum(t.contended for t in timings), float(np.mean([t.others_cores for t in timings])))


def _time_point(model, spec, p: Point, sync, budget, max_call, device, threads, torch, dead, points):
    """A Timing, or a status string: "skipped: ..." when one call exceeds ``max_call`` (then the
    larger points of the same dtype, phase and batch are skipped too), "oom" when memory runs out."""
    from validate import timing

    try:
        fn = timing.prefill_fn(model, p.batch, p.size, spec.vocab_size, device) if p.phase == "prefill" \
            else timing.decode_fn(model, p.batch, p.size, device)
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        first = time.perf_counter() - t0
        if first > max_call:
            status = f"skipped: one call took {first:.2f} s (cap {max_call:g} s; use --layers)"
            for q in points:
                if (q.phase, q.batch) == (p.phase, p.batch) and q.size > p.size:
                    dead.setdefault(q, "skipped: a smaller point was too slow")
            return status
        slow = first > 0.05  # the first call was the warm-up; take what the budget allows
        return timing.time_call(fn, sync, budget, min_samples=1 if first > budget / 2 else 2 if slow else 5,
                                max_samples=30, warmup=2, cpu_threads=threads if device == "cpu" else None,
                                warm_call_s=first if slow else None)
    except Exception as exc:  # noqa: BLE001 - OOM at one point: skip it, keep going
        if not _is_oom(exc):
            raise
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
        return "oom"


def _request_fits(spec, base, dtype, budget_s: float) -> bool:
    """Whether the request experiment (warm-ups included, the base profile's prediction x 4) fits ``budget_s``;
    always for the seed model."""
    if spec.name.split("@")[0] == "tiny-decoder":
        return True
    p = request_prediction(spec, base, dtype)
    return 4 * 4 * (p["ttft_s"] + (SEED[2] - 1) * p["tpot_s"]) < budget_s


def _request(model, spec, base, dtype, device, quick, say) -> dict:
    from validate.timing import seed_request

    B, T, G = SEED
    pred = request_prediction(spec, base, dtype)
    label = "seed experiment" if spec.name.split("@")[0] == "tiny-decoder" else "request"
    say(f"  {label} {dtype} prompt [{B},{T}], {G} tokens: predicted TTFT {pred['ttft_s'] * 1e3:.3f} ms, "
        f"TPOT {pred['tpot_s'] * 1e3:.3f} ms ...")
    model.setup(B, next(model.parameters()).dtype, device, max_len=T + G - 1)
    got = seed_request(model, B, T, G, spec.vocab_size, device, warmup=1 if quick else 3)
    say(f"  {label} {dtype}: measured TTFT {got['ttft_s'] * 1e3:.3f} ms, first decode "
        f"{got['first_decode_s'] * 1e3:.3f} ms, TPOT median {got['tpot_median_s'] * 1e3:.3f} ms; "
        f"generated {got['generated_shape']}, final KV (layer 0) {got['kv_shape']}")
    return {"label": label, "dtype": dtype, "batch": B, "prompt_len": T, "output_len": G, "measured": got,
            "predicted_default": pred}


__all__ = ["Options", "Run", "run"]
