"""A CPU run that names no thread count leaves other programs their cores (validate.timing.idle_threads)."""

import pytest

from validate import timing


def _fake_proc(monkeypatch, others_cores: float, cores: int = 2):
    # /proc/stat readings 0.5 s apart: all processes used others_cores x 0.5 s more CPU than this one
    readings = iter([(100.0, 1.0), (100.0 + others_cores * 0.5, 1.0)])
    clock = iter([10.0, 10.5])
    monkeypatch.setattr(timing, "_cpu_busy_s", lambda: next(readings))
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(timing.time, "sleep", lambda s: None)
    monkeypatch.setattr(timing.os, "cpu_count", lambda: cores)


@pytest.mark.parametrize("others,cores,threads", [
    (0.9, 2, 1),   # one core held: the idle one (2 - ceil(0.9 - 0.5))
    (0.3, 2, None),  # under half a core: torch's default
    (1.6, 4, 2),   # 4 - ceil(1.1)
    (3.9, 4, 1),   # never fewer than one
])
def test_idle_threads_by_hand(monkeypatch, others, cores, threads):
    _fake_proc(monkeypatch, others, cores)
    said = []
    assert timing.idle_threads(said.append) == threads
    assert bool(said) == (threads is not None)
    if said:
        assert f"{threads} thread" in said[0] and "--threads" in said[0]
