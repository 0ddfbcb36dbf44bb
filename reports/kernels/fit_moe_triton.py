"""Fit the early-2025 Triton fused-MoE kernel (block-scaled FP8) to its published timings.

Source: vllm-project/vllm pull request #13932 (2025-02-26, "Add option to use DeepGemm contiguous
grouped gemm kernel for fused MoE operations"), "H100 results": `benchmarks/kernels/benchmark_moe.py
--dtype=fp8_w8a8 -tp TP --model deepseek-ai/DeepSeek-V3` on an H100 80GB HBM3, the Triton column
(vLLM's fused_moe, the kernel vLLM 0.7.x ran and SGLang 0.4.x adapted: its fused_moe_triton/fused_moe.py
says "Adapted from" vLLM's), microseconds per fused-MoE call of E = 256 experts, top-8, K = 7168,
N = 2 x 2048 / TP, over 128 to 2048 tokens at TP 1, 2, 4 and 8, and 3072 tokens at TP 1 (the
table's later rows are cut off where it was read). vLLM 0.7.3 ships no tuned config
for this shape on H100 (its fused_moe/configs hold E=256,N=128 for H100 and E=256,N=256 for H200),
so these are the kernel's default tiles.

The fit is relative to the model's own routed-expert operator (calc.cost.operators.moe_ops'
``moe.experts``: both expert GEMMs and the activation, 3 kernels) on the catalog h100-sxm profile
under the vllm preset at fp8, as the calculator times it without the kernel family:

    t = max(flops / (P c rc f(M)), memory / rm) + fixed + kernels x fixed_us,  f(M) = M / (M + m_half)

(flops / (P c): that operator's compute term before the curve's M ramp, M its tokens per expert;
memory, fixed: its other terms; rc, rm, m_half, fixed_us: the calc.spec.engine.MoeKernel fields,
m_half the kernel's own ramp in place of the curve's), least squares on log t by a refining grid
(numpy only). It prints the fit and each
point's error; ``--check`` exits 1 when calc/data/engines.yaml's kernel of this name differs from
the refit (at the 3 significant digits it is written with).

  python reports/kernels/fit_moe_triton.py
  python reports/kernels/fit_moe_triton.py --check
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

NAME = "triton-fp8-block-2025-02"
BATCH = (128, 256, 512, 1024, 1536, 2048)  # tokens per call
TRITON_US = {  # PR #13932, H100 results, "Triton TP=N" columns
    1: (12480.49, 12782.98, 13017.54, 13322.31, 13777.98, 19839.38),
    2: (6025.39, 6164.44, 6631.64, 6800.41, 7037.34, 10111.40),
    4: (3121.16, 3236.88, 3433.29, 3546.83, 3677.90, 5230.76),
    8: (1732.33, 1728.73, 1810.36, 1892.75, 1988.70, 2818.65),
}
MORE_US = {(1, 3072): 27189.87}  # (TP, tokens): the 3072-token row's Triton TP=1 cell


def terms() -> np.ndarray:
    """Rows (tp, tokens, measured s, compute s before the M ramp, memory s, fixed s, kernels, M) of
    the model's operator."""
    from calc.cost.breakdown import phase_for
    from calc.cost.curves import saturation
    from calc.cost.efficiency import ROUTED_EXPERTS, Efficiency
    from calc.cost.setup import Setup
    from calc.spec.catalog import load_hardware, load_model

    model = load_model("deepseek-v3")
    hw = load_hardware("h100-sxm").with_engine("vllm")
    eff = Efficiency.of(hw)
    ramp = eff.curves.gemm_for("fp8").m_half
    points = [(tp, n, us) for tp, times in TRITON_US.items() for n, us in zip(BATCH, times, strict=True)]
    points += [(tp, n, us) for (tp, n), us in MORE_US.items()]
    rows = []
    for tp, tokens, us in points:
        cost, _ = phase_for(model, hw, "prefill", 1, tokens, Setup.of(weight_dtype="fp8", tp=tp))
        o = next(t for t in cost.ops if t.op.name == ROUTED_EXPERTS)
        M = float(o.op.rows)
        rows.append((tp, tokens, us * 1e-6, float(o.compute_s) * float(saturation(M, ramp)), float(o.memory_s),
                     float(o.overhead_s), eff.kernels_of(o.op), M))
    return np.array(rows)


def predict(p, rows: np.ndarray) -> np.ndarray:
    rc, rm, fx, h = p
    C0, M, F, K, m = rows[:, 3], rows[:, 4], rows[:, 5], rows[:, 6], rows[:, 7]
    return np.maximum(C0 * (m + h) / (m * rc), M / rm) + F + K * fx * 1e-6


def fit(rows: np.ndarray) -> tuple[float, float, float, float]:
    """(rc, rm, fixed_us, m_half) minimising the squared log error, by a grid refined six times."""
    meas, C0, M, F, K, m = rows[:, 2], rows[:, 3], rows[:, 4], rows[:, 5], rows[:, 6], rows[:, 7]
    lo, hi = np.array([1e-3, 1e-3, 0.0, 0.0]), np.array([1.0, 1.0, 200.0, 200.0])
    floor = np.array([1e-4, 1e-4, 0.0, 0.0])
    best = None
    for _ in range(7):
        g = [np.linspace(a, b, 17) for a, b in zip(lo, hi, strict=True)]
        fx, h = np.meshgrid(g[2], g[3], indexing="ij")
        for rc in g[0]:
            comp = C0[None, None, :] * (m + h[..., None]) / (m * rc)
            for rm in g[1]:
                pred = np.maximum(comp, M / rm) + F + K * fx[..., None] * 1e-6
                loss = np.sum(np.log(pred / meas) ** 2, axis=-1)
                i = np.unravel_index(int(np.argmin(loss)), loss.shape)
                if best is None or loss[i] < best[0]:
                    best = (float(loss[i]), float(rc), float(rm), float(fx[i]), float(h[i]))
        step, centre = (hi - lo) / 16, np.array(best[1:])
        lo, hi = np.maximum(centre - 2 * step, floor), centre + 2 * step
    return best[1], best[2], best[3], best[4]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if engines.yaml's kernel differs from the refit")
    args = ap.parse_args()
    rows = terms()
    rc, rm, fx, h = fit(rows)
    err = predict((rc, rm, fx, h), rows) / rows[:, 2] - 1
    for r, e in zip(rows, err, strict=True):
        print(f"TP{int(r[0])} {int(r[1]):5d} tokens: measured {r[2] * 1e6:8.0f} us, fitted {r[2] * 1e6 * (1 + e):8.0f} us"
              f" ({e:+.1%})")
    fitted = {"compute": float(f"{rc:.3g}"), "memory": float(f"{rm:.3g}"), "fixed_us": float(f"{fx:.3g}"),
              "m_half": float(f"{h:.3g}")}
    print(f"{NAME}: {fitted}; |error| median {np.median(np.abs(err)):.1%}, max {np.max(np.abs(err)):.1%} "
          f"over {len(err)} points")
    if args.check:
        from calc.spec.engine import engines

        bad = []
        for name, preset in engines().items():
            k = preset.moe_kernels.get(NAME)
            if k is not None and {f: getattr(k, f) for f in fitted} != fitted:
                bad.append(f"{name}: {k.model_dump(include=set(fitted))} != {fitted}")
        for line in bad:
            print(f"differs: {line}", file=sys.stderr)
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
