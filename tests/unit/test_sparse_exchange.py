"""Tests for data/comm/sparse.py, node_swap's transport.

In one process: the wire sizes against wire.py's encoding, the send/receive plan, and the whole
exchange with the ranks as threads (tests/thread_comm.py). Across processes (marked
distributed): the exchange under torchrun (gloo) and mpiexec (MPI) at 2 and 4 ranks, each rank
one process running tests/sparse_exchange_worker.py: every rank ends with exactly the samples
the assignment (data/order/strategies.py's node_swap, the simulator's) gives it, byte for byte,
every sample once, and receives exactly the bytes `received_bytes` (the simulator's host cost)
predicts.
"""

from __future__ import annotations

import pickle
from collections import Counter

import numpy as np
import pytest

from data.comm import sparse as sx
from data.comm.host import HostComm, LocalComm
from data.comm.wire import encode
from data.order import strategies as bal
from data.order.node_balance import node_swap_rows

import sparse_exchange_worker as worker
from launchers import launch
from exchange_samples import random_samples
from thread_comm import run_thread_ranks


# --------------------------------------------------------------------------------------------
# Ranks as threads
# --------------------------------------------------------------------------------------------


def run_threads(per_rank, origins, ranks_per_node):
    """The sparse exchange on every thread-rank: [(samples, origin, received bytes)]."""

    def rank_main(rank, comm):
        got = sx.exchange(
            comm, per_rank[rank], origins[rank], ranks_per_node, rows_for=node_swap_rows
        )
        return (*got, comm.received)

    return run_thread_ranks(len(per_rank), rank_main)


def assert_same_sample(got, want) -> None:
    """Byte for byte in the file dtypes (received segment ids are int16 views, values 0/1)."""
    for g, w in zip(got[:4], want[:4]):
        assert np.asarray(g).astype(w.dtype).tobytes() == w.tobytes()
    assert got[4] == want[4]


def check_result(per_rank, results, ranks_per_node, lengths=None):
    """Each rank holds exactly node_swap's row for it, in its order; each sample once."""
    world, local = len(per_rank), len(per_rank[0])
    flat = [s for rank in per_rank for s in rank]
    lengths = np.array([len(s.input_ids) for s in flat])
    masked = np.array([len(s.masked_positions) for s in flat])
    assignment = bal.balance("node_swap", lengths, world, ranks_per_node)
    expected_bytes = sx.received_bytes(lengths, masked, assignment)
    seen = Counter()
    for rank, (samples, origin, received) in enumerate(results):
        assert len(samples) == local
        for sample, row, org in zip(samples, assignment[rank], origin):
            assert_same_sample(sample, flat[row])
            assert tuple(org) == (row // local, row % local)
            seen[int(row)] += 1
        assert received == expected_bytes[rank]
    assert sorted(seen) == list(range(world * local)) and set(seen.values()) == {1}
    return assignment


# --------------------------------------------------------------------------------------------
# Sizes and plan
# --------------------------------------------------------------------------------------------


def test_wire_sizes_are_the_codecs():
    samples = random_samples(np.random.default_rng(0), 7)
    meta, payload = encode(samples, np.zeros((7, 2), dtype=np.int64))
    lengths = [len(s.input_ids) for s in samples]
    masked = [len(s.masked_positions) for s in samples]
    assert meta.nbytes == 7 * sx.META_BYTES
    assert payload.nbytes == sx.payload_bytes(lengths, masked).sum()
    one_meta, one_payload = encode(samples[:1], np.zeros((1, 2), dtype=np.int64))
    assert one_payload.nbytes == sx.payload_bytes(lengths[0], masked[0])


def test_plan_on_a_hand_assignment():
    # 3 ranks x 2 samples: rank 0 read 0,1; rank 1 read 2,3; rank 2 read 4,5
    assignment = np.array([[0, 3], [2, 5], [4, 1]])
    ranks = np.arange(3)
    plan = sx.plan_for(ranks, assignment, 0, 2)
    assert plan.send_rows.tolist() == [1] and plan.send_to.tolist() == [2]
    assert plan.recv_rows.tolist() == [3] and plan.recv_from.tolist() == [1]
    plan = sx.plan_for(ranks, assignment, 1, 2)
    assert plan.send_rows.tolist() == [3] and plan.send_to.tolist() == [0]
    assert plan.recv_rows.tolist() == [5] and plan.recv_from.tolist() == [2]
    # the rows of rank 1 and of rank 0, which trains its sample 3, are enough for rank 1
    part = sx.plan_for(np.array([1, 0]), assignment[[1, 0]], 1, 2)
    for got, want in zip(part, plan):
        np.testing.assert_array_equal(got, want)


def test_received_bytes_counts_sizes_and_moved_samples_only():
    lengths, masked = np.array([10, 20, 30, 40]), np.array([1, 2, 3, 4])
    stay = np.array([[0, 1], [2, 3]])
    # nothing moves: only the other rank's two sizes (2 samples x 2 int16)
    np.testing.assert_array_equal(sx.received_bytes(lengths, masked, stay), [8, 8])
    swap = np.array([[0, 2], [1, 3]])  # samples 1 and 2 change rank
    one = lambda i: sx.META_BYTES + 2 * (2 * lengths[i] + 2 * masked[i])  # noqa: E731
    pad = lambda n: -(-n // 8) * 8  # noqa: E731
    np.testing.assert_array_equal(
        sx.received_bytes(lengths, masked, swap), [8 + pad(one(2)), 8 + pad(one(1))]
    )


# --------------------------------------------------------------------------------------------
# The exchange, ranks as threads
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "world, local, rpn", [(2, 3, 1), (4, 5, 2), (8, 4, 2), (8, 6, 8), (6, 1, 3)]
)
def test_thread_ranks_end_with_their_assignment(world, local, rpn):
    rng = np.random.default_rng(world * 10 + local)
    per_rank = [random_samples(rng, local, max_len=80) for _ in range(world)]
    origins = [np.array([[r, i] for i in range(local)]) for r in range(world)]
    check_result(per_rank, run_threads(per_rank, origins, rpn), rpn)


def test_only_moved_samples_travel():
    # node 0 (ranks 0, 1) read long samples, node 1 short ones: some must cross, and the
    # bytes received are far below a full all-gather of the payloads
    rng = np.random.default_rng(1)
    per_rank = [random_samples(rng, 8, max_len=300) for _ in range(4)]
    per_rank[0] = [s for s in random_samples(rng, 40, max_len=300) if len(s.input_ids) > 200][:8]
    assert len(per_rank[0]) == 8
    origins = [np.array([[r, i] for i in range(8)]) for r in range(4)]
    results = run_threads(per_rank, origins, 2)
    assignment = check_result(per_rank, results, 2)
    crossed = (assignment // 16) != (np.arange(4) // 2)[:, None]
    assert crossed.any()
    full = sum(encode(s, o)[1].nbytes for s, o in zip(per_rank, origins))
    assert max(r[2] for r in results) < full / 2


def test_world_of_one_keeps_its_batch():
    samples = random_samples(np.random.default_rng(2), 5)
    origin = np.array([[3, i] for i in range(5)])
    got, got_origin = sx.exchange(LocalComm(), samples, origin, 8, rows_for=node_swap_rows)
    (rows,) = bal.balance("node_swap", [len(s.input_ids) for s in samples], 1, 8)
    assert all(g is samples[r] for g, r in zip(got, rows))  # no copy, assignment order
    np.testing.assert_array_equal(got_origin, origin[rows])


def test_a_comm_without_alltoallv_is_refused():
    class GatherOnly(HostComm):
        size, rank = 2, 0

    with pytest.raises(NotImplementedError, match="GatherOnly has no all-to-all-v"):
        GatherOnly().alltoallv(np.zeros(0, np.uint8), [0, 0], [0, 0])


# --------------------------------------------------------------------------------------------
# The exchange across processes: torchrun (gloo) and mpiexec (MPI)
# --------------------------------------------------------------------------------------------


@pytest.mark.distributed
@pytest.mark.parametrize("launcher", ["torchrun", "mpiexec"])
@pytest.mark.parametrize("world", [2, 4])
def test_processes_end_with_their_assignment(tmp_path, launcher, world):
    code, output, _ = launch(launcher, world, [worker.__file__, str(tmp_path)])
    assert code == 0, output[-3000:]
    records = [pickle.loads((tmp_path / f"rank{r}.pkl").read_bytes()) for r in range(world)]
    for scenario in range(len(worker.SCENARIOS)):
        per_rank, origins = zip(*(worker.make_batch(scenario, r) for r in range(world)))
        rpn = worker.ranks_per_node(scenario, world)
        results = []
        for r in range(world):
            rec = records[r][scenario]
            # the oracle's origin is (rank, index); the worker's (100 + rank, 1000*scenario + i)
            origin = np.stack(
                [rec["origin"][:, 0] - 100, rec["origin"][:, 1] - 1000 * scenario], axis=1
            )
            results.append((rec["samples"], origin, rec["received_bytes"]))
        assignment = check_result(list(per_rank), results, rpn)
        kind = worker.SCENARIOS[scenario][0]
        crossed = (assignment // (rpn * worker.LOCAL)) != (np.arange(world) // rpn)[:, None]
        if kind == "one_long_rank":
            assert crossed.any(), "the long rank's node kept all its samples"
        if kind == "all_equal":
            assert not crossed.any()
