import math

import pytest

from clover.bench.aup import aup, quality_weight


def test_one_point_is_its_rectangle():
    assert aup([(2.0, 80.0)], y_max=90.0) == 160.0


def test_a_sweep_that_keeps_its_accuracy_adds_its_whole_trapezoid():
    assert aup([(1.0, 50.0), (3.0, 50.0)], y_max=50.0) == pytest.approx(50 + 2 * 50)


def test_lost_accuracy_is_weighted_down_and_far_drops_are_left_out():
    w = quality_weight(46.0, 50.0)
    assert w == pytest.approx(math.exp(-3 * 0.08)) and quality_weight(60.0, 50.0) == 1.0
    got = aup([(3.0, 46.0), (1.0, 50.0)], y_max=50.0)  # order does not matter
    assert got == pytest.approx(50 + 0.5 * 2 * (50 + 46 * w))
    assert aup([(1.0, 50.0), (3.0, 44.0)], y_max=50.0) == 50.0  # 6 points below the first: dropped
    with pytest.raises(ValueError):
        aup([], 1.0)
