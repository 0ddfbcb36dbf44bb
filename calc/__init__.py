"""roofline's calculator: specs -> operators -> roofline -> latency/memory -> capacity.

Pure numpy; never imports torch, matplotlib or pandas at module level.
"""

from calc.spec.catalog import load_hardware, load_model
from calc.core.errors import SpecError
from calc.spec.model import ModelSpec
from calc.spec.hardware import HardwareSpec

__all__ = ["HardwareSpec", "ModelSpec", "SpecError", "estimate", "load_hardware", "load_model", "sweep"]


def estimate(model, hardware, batch=1, prompt_len=512, output_len=128, **options):
    """Library entry: names or specs in, a calc.cost.latency.Estimate out (arrays broadcast)."""
    from calc.cost.latency import estimate as _estimate

    return _estimate(load_model(model), load_hardware(hardware), batch, prompt_len, output_len, **options)


def sweep(*args, **kwargs):
    """Every combination of the given values -> a pandas DataFrame (see calc.cost.sweep.sweep)."""
    from calc.cost.sweep import sweep as _sweep

    return _sweep(*args, **kwargs)
