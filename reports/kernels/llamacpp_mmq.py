"""Fit llama.cpp's MMQ (int8 tensor-core quantised GEMM, builds from b3216 on) as GEMM FLOPs per
INT32 op of the profile's int32_tops, and show what that predicts on GPUs it was not fitted to.

MMQ unpacks the quantised blocks on the CUDA cores before its int8 mma.sync tiles, so its rate
follows the SMs' integer throughput (SMs x 64 INT32 lanes x clock), not the tensor peak: on the
scoreboard below, prefill FLOP/s per INT32 op/s is about the same on Ampere, Ada and Hopper,
while per tensor-core FLOP/s it differs 4x. (This form was chosen after looking at all six GPUs'
rows, so the held-out rows test the constant, not the form.)

Data: the llama.cpp discussion #15013 scoreboard ("Performance of llama.cpp on NVIDIA CUDA", 2025,
Llama 2 7B Q4_0, llama-bench -ngl 99 -fa 0, builds b6059-b7073), rows ``lcpp15013-*`` of
reports/accuracy/published.csv (sources there). Fit: for each GeForce row (RTX 4090, 3090, 3080)
the ``compute`` at which the llama.cpp preset's pp512 equals the measured one (bisection; the
prediction rises with it), the median of the three. Held out: the A100, H100 and H200 rows of the
same thread. ``--check`` exits 1 when calc/data/engines.yaml's MMQ value differs from the fit at
the 2 significant digits it is written with.

  python reports/kernels/llamacpp_mmq.py
  python reports/kernels/llamacpp_mmq.py --check
"""

from __future__ import annotations

import argparse
import statistics
import sys

FIT = ("rtx-4090", "rtx-3090", "rtx-3080")
HELD_OUT = ("a100-80gb-sxm", "h100-sxm", "h200")


def _rows():
    from calc.accuracy.rows import load_rows

    rows, _ = load_rows()
    return {r.hardware: r for r in rows if r.id.startswith("lcpp15013-") and r.metric == "prefill_tokens_per_s"}


def _with_compute(preset, c: float):
    """The preset with its MMQ tables (int8 and int4) at ``c`` GEMM FLOPs per INT32 op."""
    table = {k: w.model_copy(update={"compute": c}) for k, w in preset.weight_only.items()}
    return preset.model_copy(update={"weight_only": table})


def solve(row, preset, lo: float = 0.05, hi: float = 64.0) -> float:
    """The compute at which the row's predicted pp512 equals its measurement (geometric bisection)."""
    from calc.accuracy.predict import predict

    for _ in range(60):
        mid = (lo * hi) ** 0.5
        if predict(row, _with_compute(preset, mid)) < row.value:
            lo = mid
        else:
            hi = mid
    return (lo * hi) ** 0.5


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when engines.yaml's value differs from the fit")
    args = ap.parse_args(argv)
    from calc.accuracy.predict import predict
    from calc.spec.catalog import load_hardware
    from calc.spec.engine import engines

    preset = engines()["llama.cpp"]
    rows = _rows()
    per = {g: solve(rows[g], preset) for g in FIT}
    c = statistics.median(per.values())
    fitted = _with_compute(preset, float(f"{c:.2g}"))
    print(f"MMQ: {c:.3f} GEMM FLOPs per INT32 op (median of {', '.join(f'{g} {v:.2f}' for g, v in per.items())}); "
          f"written as {float(f'{c:.2g}'):g}")
    print(f"{'gpu':15s} {'INT32 TOPS':>10s} {'measured':>9s} {'predicted':>9s} {'error':>7s}")
    for g in (*FIT, *HELD_OUT):
        r = rows[g]
        p = predict(r, fitted)
        tag = "fit" if g in FIT else "held out"
        print(f"{g:15s} {load_hardware(g).int32_tops:10.1f} {r.value:9.0f} {p:9.0f} {p / r.value - 1:+7.1%}  {tag}")
    if args.check:
        have = {w.compute for w in preset.weight_only.values() if w.peak == "int32"}
        if have != {float(f"{c:.2g}")}:
            print(f"engines.yaml llama.cpp MMQ compute {sorted(have)} != fit {c:.2g}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
