"""validate/reference.py's random fill: weights (and the kernel profile's matmul pool) tiled from one
block of normal draws."""

import pytest

torch = pytest.importorskip("torch")

from validate.reference import RANDOM_BLOCK, fill_tiled  # noqa: E402


def test_fill_tiled_writes_every_element_as_runs_of_the_block():
    gen = torch.Generator().manual_seed(3)
    block = torch.randn(RANDOM_BLOCK, generator=gen).repeat(2)
    n = 2 * RANDOM_BLOCK + 12345  # two whole runs and a short one
    flat = fill_tiled(torch.full((n,), torch.nan), block, gen)
    assert not flat.isnan().any()
    starts = []
    for at in range(0, n, RANDOM_BLOCK):
        run = flat[at:at + RANDOM_BLOCK]
        (start,) = torch.nonzero(block[:RANDOM_BLOCK] == run[0]).flatten().tolist()  # draws are distinct
        assert torch.equal(run, block[start:start + run.numel()])
        starts.append(start)
    assert len(set(starts)) == 3  # each run starts at its own random offset
    assert abs(float(flat.std()) - 1.0) < 0.01
