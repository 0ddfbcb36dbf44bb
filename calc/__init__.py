"""roofline's calculator: specs -> operators -> roofline -> latency/memory -> capacity.

Pure numpy; never imports torch, matplotlib or pandas at module level.
"""

from calc.catalog import load_hardware, load_model
from calc.errors import SpecError
from calc.specs import HardwareSpec, ModelSpec

__all__ = ["HardwareSpec", "ModelSpec", "SpecError", "load_hardware", "load_model"]
