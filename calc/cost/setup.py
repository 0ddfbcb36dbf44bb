"""How a model is run: the dtypes asked for, the split over GPUs, the attention kernel, ideal or not.

A ``Setup`` is the scenario besides its shape (batch and lengths): every estimator takes one
instead of a dozen loose options. ``resolve`` turns it into what the formulas use for one
model on one profile, the one place that is done: the dtypes with the model's defaults
filled in, the preset's pass options, the checked split and the efficiencies.
"""

from __future__ import annotations

from dataclasses import dataclass

from calc.core.units import DEFAULT_GROUP_SIZE
from calc.cost.dtypes import Dtypes
from calc.cost.efficiency import Efficiency, pass_options
from calc.cost.parallel import SINGLE, Parallel, check, link
from calc.spec.engine import gemm_dtype_of
from calc.spec.hardware import HardwareSpec
from calc.spec.model import ModelSpec


@dataclass(frozen=True)
class Resolved:
    """A Setup for one model on one profile: what the formulas read."""

    dtypes: Dtypes
    attention: str  # fused | unfused
    logits: int  # prompt positions per sequence that reach lm_head in prefill
    parallel: Parallel
    efficiency: Efficiency


@dataclass(frozen=True)
class Setup:
    """Dtypes (None: the model's), quantisation group, attention kernel (None: the preset's),
    the pure roofline or not, and the TP x PP x EP split."""

    weight_dtype: str | None = None
    kv_dtype: str | None = None
    compute_dtype: str | None = None
    group_size: int = DEFAULT_GROUP_SIZE
    attention: str | None = None
    ideal: bool = False
    parallel: Parallel = SINGLE

    @classmethod
    def of(cls, *, weight_dtype=None, kv_dtype=None, compute_dtype=None, group_size: int = DEFAULT_GROUP_SIZE,
           attention: str | None = None, ideal: bool = False, tp: int = 1, pp: int = 1, ep: int = 1,
           imbalance: float = 1.0) -> Setup:
        """From the options as the CLI and the library spell them."""
        return cls(weight_dtype, kv_dtype, compute_dtype, group_size, attention, ideal,
                   Parallel(int(tp), int(pp), int(ep), float(imbalance)))

    def resolve(self, model: ModelSpec, hw: HardwareSpec) -> Resolved:
        """Defaults filled in and everything checked; errors name the option."""
        dt = Dtypes.resolve(model, self.weight_dtype, self.kv_dtype, self.compute_dtype, self.group_size,
                            gemm_dtype_of(None if self.ideal else hw.preset))
        attention, logits = pass_options(model, hw, self.ideal, self.attention)
        par = check(model, self.parallel)
        link(hw, par)  # a split on hardware without a link is an input error, raised here
        return Resolved(dt, attention, logits, par, Efficiency.of(hw, self.ideal))


DEFAULT = Setup()
