"""``random.SampleDraws``: per-sample streams, independent of the batch they are drawn in."""

import numpy as np
import pytest

from minidl.random import SampleDraws


def test_a_row_draws_the_same_numbers_in_any_batch():
    together = SampleDraws([(0, 1, 5), (0, 1, 9)])
    alone = SampleDraws([(0, 1, 9)])
    for draw in ("random", "standard_normal"):
        assert (
            getattr(together, draw)((2, 3))[1].tolist() == getattr(alone, draw)((1, 3))[0].tolist()
        )
    assert together.integers(0, 10, size=2)[1] == alone.integers(0, 10, size=1)[0]


def test_the_draws_have_the_moments_of_their_distributions():
    """20,000 rows: mean and variance within 5 standard errors of 1/2, 1/12, 0 and 1."""
    draws = SampleDraws([(7, 0, i) for i in range(20000)])
    u, z = draws.random(20000), draws.standard_normal((20000, 4))
    k = draws.integers(0, 4, size=20000)
    assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / 20000) and abs(u.var() - 1 / 12) < 0.003
    assert abs(z.mean()) < 5 / np.sqrt(80000) and abs(z.std() - 1) < 0.01
    assert np.all(np.abs(np.bincount(k) / 20000 - 0.25) < 0.02)
    assert not np.array_equal(draws.random(20000), u)  # the next draw is a new one


def test_a_draw_must_give_each_row_its_numbers():
    with pytest.raises(ValueError, match="size=\\(rows, ...\\) with rows = 2"):
        SampleDraws([(0, 0, 1), (0, 0, 2)]).random(3)
