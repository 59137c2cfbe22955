"""One rank of the multi-process node_swap exchange test (tests/unit/test_sparse_exchange.py).

    torchrun --nproc_per_node=W tests/sparse_exchange_worker.py OUT_DIR   (gloo)
    mpiexec -n W python tests/sparse_exchange_worker.py OUT_DIR           (MPI)

Each rank makes its raw local batch of every scenario from a seed (`make_batch`, which the test
also calls to build its oracle), runs data/comm/sparse.exchange on it, and pickles what it
ends with, plus the bytes it received, to OUT_DIR/rank<R>.pkl.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from data.comm import sparse as sx  # noqa: E402
from data.comm.host import GlooComm, MPIComm  # noqa: E402
from data.comm.mpi import mpi_launched  # noqa: E402
from data.order.node_balance import node_swap_rows  # noqa: E402
from data.packing import Sample  # noqa: E402

LOCAL = 6  # samples per rank
MAX_LEN = 64
# (how lengths are drawn, ranks per node as a share of the world): several nodes, one node
SCENARIOS = [("random", 2), ("one_long_rank", 2), ("all_equal", 2), ("random", 1)]


def ranks_per_node(scenario: int, world: int) -> int:
    return max(1, world // SCENARIOS[scenario][1])


def _lengths(kind: str, rank: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "one_long_rank":  # rank 0's node must give long samples away
        return rng.integers(56, MAX_LEN + 1, LOCAL) if rank == 0 else rng.integers(2, 9, LOCAL)
    if kind == "all_equal":  # node totals already even: nothing crosses nodes
        return np.full(LOCAL, 20)
    return rng.integers(2, MAX_LEN + 1, LOCAL)


def make_batch(scenario: int, rank: int) -> tuple[list[Sample], np.ndarray]:
    """Rank `rank`'s raw local batch of a scenario and its origin (LOCAL, 2): distinct
    contents, int16 / int8 as read from the files."""
    rng = np.random.default_rng([scenario, rank])
    samples = []
    for length in _lengths(SCENARIOS[scenario][0], rank, rng).tolist():
        m = int(rng.integers(1, max(2, length // 4)))
        ids = rng.integers(0, 30522, length).astype(np.int16)
        seg = (np.arange(length) >= rng.integers(1, length + 1)).astype(np.int8)
        pos = np.sort(rng.choice(length, m, replace=False)).astype(np.int16)
        samples.append(
            Sample(
                ids, seg, pos, rng.integers(0, 30522, m).astype(np.int16), int(rng.integers(0, 2))
            )
        )
    origin = np.stack([np.full(LOCAL, 100 + rank), 1000 * scenario + np.arange(LOCAL)], axis=1)
    return samples, origin


def _counting(comm, received: list[int]):
    """Count the bytes this rank receives from other ranks in both collectives."""
    gather = comm.allgather_array

    def allgather_array(array, sizes=None):
        out = gather(array, sizes)
        received[0] += sum(a.nbytes for r, a in enumerate(out) if r != comm.rank)
        return out

    comm.allgather_array = allgather_array
    alltoallv = comm.alltoallv

    def counted(send, send_counts, recv_counts):
        out = alltoallv(send, send_counts, recv_counts)
        received[0] += out.nbytes  # a rank sends itself nothing
        return out

    comm.alltoallv = counted


def main(out_dir: str) -> None:
    if mpi_launched():
        comm, dist = MPIComm.world(), None
    else:
        import torch.distributed as dist

        dist.init_process_group("gloo")
        comm = GlooComm.world()
    received = [0]
    _counting(comm, received)
    record = []
    for scenario in range(len(SCENARIOS)):
        samples, origin = make_batch(scenario, comm.rank)
        received[0] = 0
        got, got_origin = sx.exchange(
            comm, samples, origin, ranks_per_node(scenario, comm.size), rows_for=node_swap_rows
        )
        record.append(
            {
                "samples": [tuple(np.array(x) for x in s[:4]) + (s.nsp_label,) for s in got],
                "origin": got_origin,
                "received_bytes": received[0],
            }
        )
    (Path(out_dir) / f"rank{comm.rank}.pkl").write_bytes(pickle.dumps(record))
    if dist is not None:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
