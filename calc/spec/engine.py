"""Serving-engine presets: what an engine changes in the numbers, as data.

Each preset in calc/data/engines.yaml states the kernel-level parameters the engine
brings (attention kernel and its efficiency, small-GEMM and small-transfer
behaviour, per-kernel launch cost with or without CUDA graphs, per-step framework
cost) and where each value comes from. A preset applies on top of a hardware
profile's large-GEMM and streaming efficiencies, which stay the chip's own.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from calc.core.errors import SpecError
from calc.core.units import MB, MICRO

if TYPE_CHECKING:
    from calc.cost.roofline import Efficiency
    from calc.spec.hardware import HardwareSpec

ENGINES_FILE = Path(__file__).resolve().parents[1] / "data" / "engines.yaml"


class EngineSpec(BaseModel):
    """One engine's preset. Scales multiply the profile's efficiencies; the rest replace them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str
    sources: dict[str, str] = Field(default_factory=dict)
    ideal: bool = False
    cuda_graphs: bool = True
    attention_kernel: Literal["fused", "unfused"] = "fused"
    # Logits for every prompt position in prefill (Hugging Face without logits_to_keep),
    # not only the last one as serving engines compute them.
    logits_all_positions: bool = False
    attention: float = Field(default=1.0, gt=0, le=1)
    gemm_m_half: float = Field(default=0.0, ge=0)
    memory_half_mb: float = Field(default=0.0, ge=0)
    kernel_overhead_us: float = Field(default=0.0, ge=0)
    step_overhead_us: float = Field(default=0.0, ge=0)
    # Per request, outside the model: receiving, tokenising, scheduling and answering it.
    # DESIGN keeps such time out of TTFT; it is reported beside it, and added when the
    # accuracy harness compares with measurements that include it (client-side TTFT, e2e).
    request_overhead_us: float = Field(default=0.0, ge=0)
    compute_scale: float = Field(default=1.0, gt=0, le=1)
    memory_scale: float = Field(default=1.0, gt=0, le=1)

    def apply(self, eff: Efficiency) -> Efficiency:
        """These parameters on top of a profile's efficiencies (ideal: none at all)."""
        if self.ideal:
            return type(eff)(engine=self.name)
        return replace(
            eff, engine=self.name, attention=self.attention, gemm_m_half=self.gemm_m_half,
            memory_half_bytes=self.memory_half_mb * MB, kernel_overhead_s=self.kernel_overhead_us * MICRO,
            step_overhead_s=self.step_overhead_us * MICRO, request_overhead_s=self.request_overhead_us * MICRO,
            compute=eff.compute * self.compute_scale,
            memory=eff.memory * self.memory_scale, by_dtype=(),
        )


@lru_cache(maxsize=4)
def engines(path: Path = ENGINES_FILE) -> dict[str, EngineSpec]:
    """All presets, by name."""
    from calc.spec.catalog import build, read_yaml

    data = read_yaml(path)
    return {name: build(EngineSpec, {"name": name, **body}, f"{path}: {name}") for name, body in data.items()}


def with_engine(hw: HardwareSpec, name: str | None) -> HardwareSpec:
    """The profile with ``name`` as its engine preset (None: unchanged); the name is checked."""
    if name is None:
        return hw
    load_engine(name)
    return hw.model_copy(update={"efficiency": hw.efficiency.model_copy(update={"engine": name})})


def load_engine(name: str) -> EngineSpec:
    presets = engines()
    if name not in presets:
        import difflib

        close = difflib.get_close_matches(name, list(presets), n=3, cutoff=0.4)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise SpecError("--engine", None, f"unknown engine {name!r} (known: {', '.join(presets)}){hint}")
    return presets[name]
