import pytest


@pytest.fixture
def simulate_calls(monkeypatch):
    """The keyword arguments of the last calc.serving.sim.simulate.simulate call (it still runs)."""
    import calc.serving.sim.simulate as simulate_module

    seen = {}
    real = simulate_module.simulate

    def spy(rep, T, G, **kw):
        seen.clear()
        seen.update(kw)
        return real(rep, T, G, **kw)

    monkeypatch.setattr(simulate_module, "simulate", spy)
    return seen
