"""Per-operator tables (`roofline ops`) and the whole-model intensity comparison (`roofline intensity`)."""

from __future__ import annotations

import numpy as np

from calc.cost import firstorder
from calc.cost.dtypes import Dtypes
from calc.cost.efficiency import Efficiency
from calc.cost.latency import decode_cost, prefill_cost
from calc.cost.opcost import Phase
from calc.cost.roofline import PhaseCost
from calc.cost.setup import DEFAULT, Setup
from calc.spec.hardware import HardwareSpec
from calc.spec.model import ModelSpec


def phase_for(model: ModelSpec, hw: HardwareSpec, phase: Phase, batch, seq_len,
              setup: Setup = DEFAULT) -> tuple[PhaseCost, Dtypes]:
    """The PhaseCost of a prefill of seq_len tokens, or a decode step at context seq_len."""
    from calc.core.errors import SpecError

    if seq_len + (phase == "decode") > model.max_context:
        raise SpecError("seq_len", None, f"{seq_len} exceeds {model.name}'s max context {model.max_context}")
    run = setup.resolve(model, hw)
    dt, attention, logits, par, eff = run.dtypes, run.attention, run.logits, run.parallel, run.efficiency
    B, S = np.float64(batch), np.float64(seq_len)
    if phase == "prefill":
        return prefill_cost(model, hw, B, S, dt, eff, attention, par=par, logits=logits)[0], dt
    return decode_cost(model, hw, B, S, dt, eff, attention, par), dt


def ops_records(model, hw, phase, batch, seq_len, setup: Setup = DEFAULT) -> tuple[list[dict], dict]:
    """One dict per operator (one layer's values, then totals), sorted by total time."""
    cost, dt = phase_for(model, hw, phase, batch, seq_len, setup)
    total_time = float(cost.time_s)
    recs = []
    for t in cost.ops:
        op = t.op
        recs.append({
            "op": op.name,
            "kind": op.kind,
            "layers": op.layers,
            "flops": float(op.flops),
            "bytes": float(op.bytes),
            "weight_bytes": float(op.weight_bytes),
            "kv_bytes": float(op.kv_read_bytes + op.kv_write_bytes),
            "act_bytes": float(op.act_read_bytes + op.act_write_bytes),
            "intensity": float(t.intensity),
            "time_s": float(t.time_s),
            "total_time_s": float(t.total_time_s),
            "share": float(t.total_time_s) / total_time if total_time > 0 else 0.0,
            "bound": "measured" if t.measured_s is not None else "communication" if op.kind == "comm"
            else "compute" if bool(t.compute_bound) else "memory",
            "comm_bytes": float(op.comm_bytes),
            "overlappable": op.overlappable,
        })
    if cost.step_overhead_s:
        recs.append({"op": "step_overhead", "kind": "overhead", "layers": 1, "flops": 0.0, "bytes": 0.0,
                     "weight_bytes": 0.0, "kv_bytes": 0.0, "act_bytes": 0.0, "intensity": 0.0,
                     "time_s": cost.step_overhead_s, "total_time_s": cost.step_overhead_s,
                     "share": cost.step_overhead_s / total_time, "bound": "overhead", "comm_bytes": 0.0,
                     "overlappable": False})
    recs.sort(key=lambda r: -r["total_time_s"])
    summary = {
        "model": model.name, "hardware": hw.name, "phase": phase, "batch": batch, "seq_len": seq_len,
        "weight_dtype": dt.weight, "kv_dtype": dt.kv, "compute_dtype": dt.compute,
        "flops": float(cost.flops), "linear_flops": float(cost.linear_flops),
        "attention_flops": float(cost.attention_flops), "other_flops": float(cost.other_flops),
        "bytes": float(cost.bytes), "intensity": float(cost.intensity), "time_s": total_time,
        "step_overhead_s": cost.step_overhead_s, "bound": str(cost.bound),
        "tp": setup.parallel.tp, "pp": setup.parallel.pp, "ep": setup.parallel.ep, "comm_bytes": float(cost.comm_bytes), "comm_s": float(cost.comm_s),
        "ridge_point": hw.ridge_point(dt.compute),
    }
    return recs, summary


def intensity_records(model: ModelSpec, seq_lens, weight_dtype=None, kv_dtype=None) -> list[dict]:
    """First-order vs operator-model whole-pass intensity at B = 1 for each S."""
    dt = Dtypes.resolve(model, weight_dtype, kv_dtype)
    N = model.params_total
    b = model.weight_bytes(dt.weight, dt.group_size) / N  # mean bytes a weight (quantised ones and the rest)
    kappa = model.kv_bytes_per_token(dt.kv)
    S = np.asarray(seq_lens, dtype=float)
    eff = Efficiency()
    from calc.spec.hardware import HardwareSpec

    # Intensity does not depend on the hardware; any profile serves to build the phases.
    hw = HardwareSpec(name="any", kind="other", memory_gb=1, memory_bandwidth_tb_s=1, peak_tflops={"fp32": 1})
    pre = prefill_cost(model, hw, np.float64(1), S, dt, eff)[0]
    dec = decode_cost(model, hw, np.float64(1), S, dt, eff)
    fo_p = firstorder.prefill_intensity(N, b, kappa, S)
    fo_d = firstorder.decode_intensity(N, b, kappa, S)
    return [{
        "seq_len": int(S[i]),
        "first_order_prefill": float(fo_p[i]), "operator_prefill": float(pre.intensity[i]),
        "first_order_decode": float(fo_d[i]), "operator_decode": float(dec.intensity[i]),
        "prefill_attention_flops_share": float(pre.attention_flops[i] / pre.flops[i]),
    } for i in range(len(S))]
