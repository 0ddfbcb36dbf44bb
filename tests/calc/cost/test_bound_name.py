"""The bound rule in scalars labels a step as the array rule does, ties to the first."""

import numpy as np
import pytest

from calc.cost.roofline import bound_name, bound_of


@pytest.mark.parametrize("shares", [(3.0, 1.0, 0.5), (1.0, 3.0, 0.5), (1.0, 1.0, 3.0), (2.0, 2.0, 1.0),
                                    (1.0, 2.0, 2.0), (1.0, 1.0, 1.0), (0.0, 0.0, 0.0)])
def test_bound_name_is_bound_of_in_scalars(shares):
    expected = ["compute", "memory", "communication"][int(np.argmax(shares))]  # numpy's argmax: the first largest
    assert bound_name(*shares) == bound_of(np.array(shares)) == expected
