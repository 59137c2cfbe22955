"""Ranks as threads: a host comm over shared slots and a barrier, standing in for MPI/gloo.

Used by tests/unit/test_pipeline.py (the pipeline's all-gathers and node splits),
tests/integration/test_bucketing_pipeline.py and tests/unit/test_sparse_exchange.py (the sparse
transport's all-to-all-v). Every collective of data/comm/host.py's HostComm is here; `received`
counts the bytes a rank gets from the others. `open_pipeline` opens a rank's data pipeline as the
trainer does, on such a comm (or alone).
"""

from __future__ import annotations

import threading

import numpy as np

from bert.train.run_shape import RunShape
from data.comm.host import HostComm, LocalComm, displacements
from data.pipeline import TrainPipeline

# bounded only to fail instead of hanging; a loaded machine stalls threads for seconds
BARRIER_TIMEOUT_S = 120


class _Slots:
    """What the members of one group share: one slot each and a barrier."""

    def __init__(self, size: int):
        self.values = [None] * size
        self.barrier = threading.Barrier(size, timeout=BARRIER_TIMEOUT_S)

    def exchange(self, rank: int, value) -> list:
        self.barrier.wait()  # nobody still reads the previous round
        self.values[rank] = value
        self.barrier.wait()
        return list(self.values)


class ThreadComm(HostComm):
    """One thread-rank of a group; `registry` holds the shared slots of each group."""

    def __init__(self, members: tuple[int, ...], rank: int, registry: dict, lock):
        self.members, self.rank, self.size = members, rank, len(members)
        self._registry, self._lock = registry, lock
        with lock:
            self._slots = registry.setdefault(members, _Slots(len(members)))
        self.received = 0  # bytes of arrays that came from other ranks

    def allgather_obj(self, obj) -> list:
        return self._slots.exchange(self.rank, obj)

    def allgather_array(self, array, sizes=None):
        out = [np.array(a) for a in self.allgather_obj(np.array(array))]
        self.received += sum(a.nbytes for r, a in enumerate(out) if r != self.rank)
        return out

    def split(self, color: int) -> "ThreadComm":
        colors = self.allgather_obj(color)
        members = tuple(m for m, c in zip(self.members, colors) if c == color)
        return ThreadComm(
            members, members.index(self.members[self.rank]), self._registry, self._lock
        )

    def alltoallv(self, send, send_counts, recv_counts):
        parts = self.allgather_obj(
            [send[s : s + c].copy() for s, c in zip(displacements(send_counts), send_counts)]
        )
        mine = [parts[src][self.rank] for src in range(self.size)]
        assert [m.size for m in mine] == [int(c) for c in recv_counts]
        self.received += sum(m.nbytes for src, m in enumerate(mine) if src != self.rank)
        return np.concatenate(mine)


def run_thread_ranks(world: int, rank_main) -> list:
    """rank_main(rank, comm) on `world` threads sharing one ThreadComm world: their results in
    rank order. The first failure aborts the others' barriers and is raised here."""
    registry, lock, errors = {}, threading.Lock(), []
    results: list = [None] * world

    def guarded(rank: int) -> None:
        try:
            results[rank] = rank_main(rank, ThreadComm(tuple(range(world)), rank, registry, lock))
        except BaseException as err:  # noqa: BLE001 - raised below
            errors.append(err)
            with lock:
                for slots in registry.values():
                    slots.barrier.abort()

    threads = [threading.Thread(target=guarded, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(3 * BARRIER_TIMEOUT_S)  # a hang detector, not a speed limit
    assert not any(t.is_alive() for t in threads), "a thread-rank hung"
    if errors:
        raise errors[0]
    return results


def open_pipeline(
    cfg,
    rank: int,
    world: int,
    seed: int,
    comm: HostComm | None = None,
    ranks_per_node: int = 0,
    **kwargs,
) -> TrainPipeline:
    """The pipeline as the trainer opens it: the data config and the run shape (its node size:
    data.ranks_per_node, else `ranks_per_node` as the launcher's, else the world)."""
    return TrainPipeline(
        cfg.data,
        RunShape.build(cfg, world, ranks_per_node),
        rank,
        seed,
        "cpu",
        comm or LocalComm(),
        **kwargs,
    )
