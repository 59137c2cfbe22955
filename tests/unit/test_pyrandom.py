"""The generator in data/prepare/instance_loop.py makes the draws of Python's own
`random.Random`, bit for bit, and leaves the generator where Python's would be."""

from __future__ import annotations

import random

import numpy as np
import pytest
from numba import njit

from data.prepare import instance_loop as pyrandom
from data.prepare.instance_loop import mask_count_for

# Bounds around every edge of _randbelow: 1 (one bit, redrawn on 1), powers of two and their
# neighbours (one bit more, up to half the draws rejected), the vocabulary size, the largest
# bound of one word (2**32 - 1).
BOUNDS = [1, 2, 3, 4, 5, 7, 8, 9, 255, 256, 257, 30522, 2**31 - 1, 2**31, 2**31 + 1, 2**32 - 1]


@njit
def _draw_sequence(state, bounds, lengths):
    """random(), randint(0, b - 1) for each bound, then a shuffle of each length, repeated
    until more than 624 words (a refill) have gone by."""
    floats, ints, shuffled = [], [], []
    for _ in range(40):
        floats.append(pyrandom.uniform(state))
        for b in bounds:
            ints.append(pyrandom.randint(state, 0, b - 1))
        for n in lengths:
            values = np.arange(n)
            pyrandom.shuffle(state, values)
            shuffled.append(values)
    return floats, ints, shuffled


@pytest.mark.parametrize("seed", [0, 12345, 2**40 + 7])
def test_draws_and_final_state_equal_python_random(seed):
    lengths = [0, 1, 2, 3, 4, 5, 17, 142, 509, 1000]
    rng, python = random.Random(seed), random.Random(seed)
    state = pyrandom.take_state(rng)
    floats, ints, shuffled = _draw_sequence(
        state, np.array(BOUNDS, np.int64), np.array(lengths, np.int64)
    )
    pyrandom.give_state(rng, state)
    expected_floats, expected_ints, expected_shuffled = [], [], []
    for _ in range(40):
        expected_floats.append(python.random())
        expected_ints += [python.randint(0, b - 1) for b in BOUNDS]
        for n in lengths:
            values = list(range(n))
            python.shuffle(values)
            expected_shuffled.append(values)
    assert list(floats) == expected_floats
    assert list(ints) == expected_ints
    assert [s.tolist() for s in shuffled] == expected_shuffled
    assert rng.getstate() == python.getstate()
    assert rng.random() == python.random()  # and it goes on from there as Python's would


def test_state_round_trip_keeps_gauss_and_rejects_other_versions():
    rng = random.Random(3)
    rng.gauss(0, 1)  # leaves a cached second normal in the state
    before = rng.getstate()
    pyrandom.give_state(rng, pyrandom.take_state(rng))
    assert rng.getstate() == before
    with pytest.raises(ValueError, match="version"):
        pyrandom.take_state(_VersionTwo())


class _VersionTwo(random.Random):
    def getstate(self):
        return (2, (0,) * 625, None)


def test_mask_count_rounds_as_python():
    """round(l * p) is half to even on the same double; np.rint in compiled code equals it."""
    for prob in (0.15, 0.1, 0.2, 0.3, 0.5):
        for length in range(1, 1025):
            expected = min(76, max(1, int(round(length * prob))))
            assert mask_count_for(length, 76, prob) == expected, (length, prob)
