"""roofline's calculator: specs -> operators -> roofline -> latency/memory -> capacity.

Pure numpy; never imports torch, matplotlib or pandas at module level.
"""

from __future__ import annotations

__all__ = ["HardwareSpec", "ModelSpec", "SpecError", "estimate", "load_hardware", "load_model", "sweep"]

# The facade's names load on first use (PEP 562), so `import calc` itself is instant: the console
# script (calc.cli.entry) imports this package before it can catch an interrupt, and a command
# that needs no spec schema does not build one. Plain imports, so tests/calc/test_layers.py sees them.


def __getattr__(name: str):
    if name == "SpecError":
        from calc.core.errors import SpecError as value
    elif name in ("load_hardware", "load_model"):
        from calc.spec import catalog

        value = getattr(catalog, name)
    elif name == "HardwareSpec":
        from calc.spec.hardware import HardwareSpec as value
    elif name == "ModelSpec":
        from calc.spec.model import ModelSpec as value
    else:
        raise AttributeError(f"module 'calc' has no attribute {name!r}")
    globals()[name] = value
    return value


def estimate(model, hardware, batch=1, prompt_len=512, output_len=128, *, engine=None, **options):
    """Library entry: names or specs in, a calc.cost.latency.Estimate out (arrays broadcast);
    ``engine`` names a serving-engine preset to use instead of the profile's own; ``options`` are
    the scenario options of calc.cost.setup.Setup.of (dtypes, group_size, attention, ideal, tp...)."""
    from calc.cost.latency import estimate as _estimate
    from calc.cost.setup import Setup
    from calc.spec.catalog import load_hardware, load_model

    hw = load_hardware(hardware).with_engine(engine)
    return _estimate(load_model(model), hw, batch, prompt_len, output_len, Setup.of(**options))


def sweep(model="llama-3.1-8b", hardware="h100-sxm", *args, engine=None, **kwargs):
    """Every combination of the given values -> a pandas DataFrame (see calc.cost.sweep.sweep);
    model and hardware take names, paths or specs, one or a list."""
    from calc.cost.sweep import sweep as _sweep
    from calc.spec.catalog import load_hardware, load_model

    def specs(refs, load):
        return [load(r) for r in refs] if isinstance(refs, (list, tuple)) else load(refs)

    hw = specs(hardware, load_hardware)
    hw = [h.with_engine(engine) for h in hw] if isinstance(hw, list) else hw.with_engine(engine)
    return _sweep(specs(model, load_model), hw, *args, **kwargs)
