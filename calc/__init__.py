"""roofline's calculator: specs -> operators -> roofline -> latency/memory -> capacity.

Pure numpy; never imports torch, matplotlib or pandas at module level.
"""

from calc.catalog import load_hardware, load_model
from calc.errors import SpecError
from calc.specs import HardwareSpec, ModelSpec

__all__ = ["HardwareSpec", "ModelSpec", "SpecError", "estimate", "load_hardware", "load_model", "sweep"]


def estimate(model, hardware, batch=1, prompt_len=512, output_len=128, **options):
    """Library entry: names or specs in, a calc.latency.Estimate out (arrays broadcast)."""
    from calc.latency import estimate as _estimate

    return _estimate(load_model(model), load_hardware(hardware), batch, prompt_len, output_len, **options)


def sweep(*args, **kwargs):
    """Every combination of the given values -> a pandas DataFrame (see calc.sweeps.sweep)."""
    from calc.sweeps import sweep as _sweep

    return _sweep(*args, **kwargs)
