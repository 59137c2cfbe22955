"""Tests for data/order/node_balance.py, the node_swap assignment. CPU, a few seconds.

The transport that carries it out is tested in tests/unit/test_sparse_exchange.py; the general
properties every strategy shares (a permutation, batched = one at a time) also run for node_swap
in tests/unit/test_balance.py.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from data.order import lengths as ln
from data.order import node_balance as nb
from data.order import strategies as bal

# (world, local, ranks_per_node): one node, one rank per node, odd sizes, local batch 1
SHAPES = [
    (1, 1, 1),
    (1, 7, 8),
    (2, 3, 1),
    (3, 1, 8),
    (4, 1, 2),
    (4, 5, 2),
    (6, 5, 3),
    (8, 16, 8),
    (16, 3, 4),
    (32, 16, 8),
    (64, 2, 1),
]


def _moved_fraction(assignment: np.ndarray, local: int, per_node: int) -> float:
    """Share of samples trained on another node than the one that read them."""
    node_of_rank = np.arange(assignment.shape[-2]) // per_node
    return float(np.mean(assignment // (per_node * local) != node_of_rank[:, None]))


def _spread(lengths: np.ndarray, assignment: np.ndarray) -> np.ndarray:
    tokens = bal.tokens_per_rank(lengths, assignment)
    return tokens.max(axis=-1) - tokens.min(axis=-1)


@pytest.mark.parametrize("world,local,rpn", SHAPES)
def test_every_sample_exactly_once_and_equal_counts(world, local, rpn):
    rng = np.random.default_rng(world * 1000 + local * 10 + rpn)
    lengths = ln.sample_lengths((3, world * local), 512, rng)
    a = nb.assign_node_swap(lengths, world, rpn)
    assert a.shape == (3, world, local)  # equal count per rank by shape
    for row in a:
        np.testing.assert_array_equal(np.sort(row.ravel()), np.arange(world * local))


def test_deterministic_whatever_the_input_layout():
    """Every rank must compute the same assignment: no dependence on dtype, memory layout or
    earlier calls (state), only on the lengths."""
    rng = np.random.default_rng(1)
    lengths = ln.sample_lengths(64 * 16, 512, rng)
    first = nb.assign_node_swap(lengths, 64, 8)
    padded = np.zeros(2 * lengths.size, dtype=np.int32)
    padded[::2] = lengths  # a strided view
    for variant in (lengths.astype(np.int16), padded[::2], lengths.tolist(), lengths.copy()):
        np.testing.assert_array_equal(nb.assign_node_swap(variant, 64, 8), first)


def test_batched_trials_equal_one_at_a_time():
    lengths = ln.sample_lengths((4, 32 * 16), 512, np.random.default_rng(2))
    batched = nb.assign_node_swap(lengths, 32, 8)
    for t in range(4):
        np.testing.assert_array_equal(batched[t], nb.assign_node_swap(lengths[t], 32, 8))


@pytest.mark.parametrize("world,local,rpn", [(64, 16, 8), (32, 3, 1), (8, 5, 8), (16, 4, 4)])
def test_a_ranks_rows_equal_the_whole_assignments(world, local, rpn):
    """The transport computes only the rows a rank exchanges; they must be the simulator's."""
    lengths = ln.sample_lengths(world * local, 512, np.random.default_rng(world + local))
    full = nb.assign_node_swap(lengths, world, rpn)
    for rank in range(world):
        ranks, rows = nb.node_swap_rows(lengths, world, rpn, rank)
        np.testing.assert_array_equal(rows, full[ranks])
        assert rank in ranks  # its own row, and a row for every sample it read
        assert np.isin(np.arange(rank * local, (rank + 1) * local), rows).all()


def test_long_for_short_swaps_even_out_two_nodes():
    # node 0 read only long samples, node 1 only short ones: two swaps of 490 tokens each
    # give both nodes 2 x 500 + 2 x 10, and each rank one of each
    lengths = np.array([500, 500, 500, 500, 10, 10, 10, 10])
    a = nb.assign_node_swap(lengths, 4, 2)
    np.testing.assert_array_equal(bal.tokens_per_rank(lengths, a), [510, 510, 510, 510])
    assert _moved_fraction(a, 2, 2) == 0.5


def test_a_balanced_batch_moves_nothing():
    # every rank already holds 5 tokens: each keeps its own two samples
    lengths = np.array([1, 4, 2, 3, 4, 1, 3, 2])
    a = nb.assign_node_swap(lengths, 4, 4)
    for rank, row in enumerate(a):
        assert sorted(row.tolist()) == [2 * rank, 2 * rank + 1]


def test_nodes_with_equal_totals_exchange_nothing():
    rng = np.random.default_rng(3)
    node = ln.sample_lengths(8 * 16, 512, rng)
    lengths = np.concatenate([rng.permutation(node) for _ in range(16)])  # same multiset
    a = nb.assign_node_swap(lengths, 128, 8)
    assert _moved_fraction(a, 16, 8) == 0.0
    assert _spread(lengths, a) <= 8


def test_node_totals_end_inside_the_tolerance():
    rng = np.random.default_rng(4)
    lengths = ln.sample_lengths((2, 128, 8 * 16), 512, rng)
    members = nb.even_out_nodes(lengths, 8)
    for t in range(2):
        held = lengths[t].reshape(-1)[members[t]]
        totals = held.sum(axis=1)
        deviation = np.abs(128 * totals - totals.sum())  # scaled by the 128 nodes, exact
        assert deviation.max() <= 128 * 8 * nb.NODE_TOLERANCE
        np.testing.assert_array_equal(np.sort(members[t].ravel()), np.arange(128 * 128))


def test_partition_beats_a_snake_deal():
    rng = np.random.default_rng(5)
    lengths = ln.sample_lengths((200, 8 * 16), 512, rng)
    groups = nb.partition_nodes(lengths, 8)
    loads = np.take_along_axis(lengths, groups.reshape(200, -1), axis=1).reshape(200, 8, 16)
    ranges = loads.sum(axis=2).max(axis=1) - loads.sum(axis=2).min(axis=1)
    snake = bal.balance("serpentine", lengths, 8, 8)  # one node: serpentine is the snake
    snake_ranges = _spread(lengths, snake)
    assert ranges.mean() < snake_ranges.mean() / 10  # about 1.5 against about 70 tokens
    assert ranges.max() <= 8


def test_issue_15_targets_at_1024_ranks():
    """1,024 ranks, 8 per node, 16 samples each, REFERENCE 2 lengths: spread at
    most twice serpentine's and under 72 tokens, under 10 % of samples off their node. It
    reaches about 6 tokens (serpentine about 34) with about 3.4 % moved."""
    lengths = ln.sample_lengths((3, 1024 * 16), 512, np.random.default_rng(6))
    a = nb.assign_node_swap(lengths, 1024, 8)
    serpentine = _spread(lengths, bal.balance("serpentine", lengths, 1024, 8))
    spread = _spread(lengths, a)
    assert spread.mean() <= min(72, 2 * serpentine.mean())
    assert spread.mean() < serpentine.mean()  # it even beats serpentine
    assert _moved_fraction(a, 16, 8) <= 0.10


def test_stratified_draws_move_fewer_samples():
    pmf, edges = ln.length_pmf(512), ln.strata_edges(512)
    rng = np.random.default_rng(7)
    plain = ln.sample_lengths((2, 1024 * 16), 512, rng)
    strat = ln.sample_stratified_lengths(2, 1024, 16, rng, pmf, edges)
    moved_plain = _moved_fraction(nb.assign_node_swap(plain, 1024, 8), 16, 8)
    moved_strat = _moved_fraction(nb.assign_node_swap(strat, 1024, 8), 16, 8)
    assert moved_strat < moved_plain / 2  # about 1.3 % against 3.4 %


def test_fast_enough_for_the_prefetch_thread():
    """Every rank computes its rows every step: about 5 ms at 1,024 ranks on one core, 10 ms
    for the whole assignment (the issue asks for well under 50 ms). The bound here is loose,
    for a busy test machine; thread time, so waiting for a core does not count."""
    lengths = ln.sample_lengths((3, 1024 * 16), 512, np.random.default_rng(8))
    times = []
    for rank, row in enumerate(lengths):
        start = time.thread_time()
        nb.node_swap_rows(row, 1024, 8, rank)
        times.append(time.thread_time() - start)
    assert min(times) < 0.1


def test_bad_shapes_are_rejected():
    with pytest.raises(ValueError, match="does not split"):
        nb.assign_node_swap(np.ones(5, int), 2, 2)
    with pytest.raises(ValueError, match="whole number"):
        nb.assign_node_swap(np.ones(12, int), 12, 8)
