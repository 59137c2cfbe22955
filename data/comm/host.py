"""Host collectives for the data pipeline: MPI under an MPI launcher, gloo under torchrun.

The padding exchange ([Zeng], section IV-B) runs on the CPU in the prefetch thread while the
GPU trains the previous step: each rank all-gathers the raw local batches of its group, every
rank computes the same assignment (data/order/strategies.py) and keeps its share. Only the prefetch
thread calls these collectives, so they never interleave with the training step's NCCL calls.

    HostComm.allgather_obj(obj) -> list          one picklable object per rank (setup only)
    HostComm.allgather_array(a, sizes) -> list   1-D arrays of one dtype, sizes may differ
    HostComm.split(color) -> HostComm            ranks of equal color, in rank order (nodes)
    HostComm.alltoallv(send, send_counts, recv_counts) -> bytes from every rank, in rank order
                                                 (the sparse transport, data/comm/sparse.py)

Implementations:
    LocalComm  world of one: no communication.
    MPIComm    mpi4py, when the job was started by mpirun/mpiexec or srun --mpi (see
               `mpi_launched`). MPI is initialized with MPI_THREAD_MULTIPLE requested; at least
               MPI_THREAD_SERIALIZED is required because the prefetch thread, not the main
               thread, makes the calls.
    GlooComm   a gloo process group of its own (`new_group(backend="gloo")`), so host traffic
               never shares the NCCL group of the training step.

The step exchange, `allgather_batch`, first all-gathers the fixed-size per-sample metadata
(lengths included), then the token payloads whose sizes the metadata gives (data/comm/wire.py).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Sequence

import numpy as np

from data.comm.mpi import load_mpi, mpi_launched
from data.comm.wire import GlobalBatch, encode, payload_size


class HostComm:
    """A group of ranks doing host-side all-gathers (see module docstring)."""

    rank: int = 0
    size: int = 1

    def allgather_obj(self, obj: Any) -> list:
        raise NotImplementedError

    def allgather_array(
        self, array: np.ndarray, sizes: Sequence[int] | None = None
    ) -> list[np.ndarray]:
        """Every rank's 1-D `array` (same dtype everywhere), in rank order.

        `sizes` (elements per rank), when the caller already knows them, saves a round trip.
        """
        raise NotImplementedError

    def split(self, color: int) -> "HostComm":
        """Collective over this comm: the sub-group of ranks that passed the same color."""
        raise NotImplementedError

    def alltoallv(
        self, send: np.ndarray, send_counts: Sequence[int], recv_counts: Sequence[int]
    ) -> np.ndarray:
        """Collective: `send` (uint8) holds send_counts[d] bytes for each rank d, in rank order;
        returns the recv_counts[s] bytes from each rank s, concatenated in rank order."""
        raise NotImplementedError(f"{type(self).__name__} has no all-to-all-v")


class LocalComm(HostComm):
    """World of one."""

    def allgather_obj(self, obj: Any) -> list:
        return [obj]

    def allgather_array(self, array, sizes=None):
        return [np.ascontiguousarray(array)]

    def split(self, color: int) -> "LocalComm":
        return self

    def alltoallv(self, send, send_counts, recv_counts):
        return np.array(send, dtype=np.uint8)  # a copy, as the collectives return


def _as_bytes(array: np.ndarray) -> np.ndarray:
    """A contiguous 1-D array viewed as uint8 (collectives move bytes, whatever the dtype)."""
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def displacements(counts) -> np.ndarray:
    """Where each rank's part starts in a buffer of parts of `counts` bytes, (W,) int64."""
    return np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)


class MPIComm(HostComm):
    """mpi4py communicator."""

    def __init__(self, comm):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()

    @classmethod
    def world(cls) -> "MPIComm":
        return cls(load_mpi().COMM_WORLD)

    def allgather_obj(self, obj: Any) -> list:
        return self.comm.allgather(obj)

    def allgather_array(self, array, sizes=None):
        send = _as_bytes(array)
        itemsize = np.asarray(array).dtype.itemsize
        if sizes is None:
            counts = np.array(self.comm.allgather(send.size), dtype=np.int64)
        else:
            counts = np.asarray(sizes, dtype=np.int64) * itemsize
        displs = displacements(counts)
        recv = np.empty(int(counts.sum()), dtype=np.uint8)
        MPI = load_mpi()
        self.comm.Allgatherv([send, MPI.BYTE], [recv, (counts, displs), MPI.BYTE])
        dtype = np.asarray(array).dtype
        return [recv[d : d + c].view(dtype) for d, c in zip(displs, counts)]

    def split(self, color: int) -> "MPIComm":
        return MPIComm(self.comm.Split(color, self.rank))

    def alltoallv(self, send, send_counts, recv_counts):
        MPI = load_mpi()
        sc, rc = np.asarray(send_counts, np.int64), np.asarray(recv_counts, np.int64)
        recv = np.empty(int(rc.sum()), dtype=np.uint8)
        self.comm.Alltoallv(
            [_as_bytes(send), (sc, displacements(sc)), MPI.BYTE],
            [recv, (rc, displacements(rc)), MPI.BYTE],
        )
        return recv


class GlooComm(HostComm):
    """A gloo process group; `ranks` are the global ranks of its members, in order."""

    def __init__(self, group, ranks: Sequence[int], timeout_s: float | None = None):
        import torch.distributed as dist

        self.group = group
        self.ranks = list(ranks)
        self.rank = self.ranks.index(dist.get_rank())
        self.size = len(self.ranks)
        self.timeout_s = timeout_s

    @classmethod
    def world(cls, timeout_s: float | None = None) -> "GlooComm":
        """A new gloo group over all ranks (collective: every rank must call it).
        timeout_s: how long its collectives wait for the slowest rank (the run's
        dist.timeout_s); None: torch's default for a new group (30 minutes)."""
        import torch.distributed as dist

        ranks = list(range(dist.get_world_size()))
        return cls(_new_gloo_group(ranks, timeout_s), ranks, timeout_s)

    def allgather_obj(self, obj: Any) -> list:
        import torch.distributed as dist

        out: list = [None] * self.size
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def allgather_array(self, array, sizes=None):
        import torch
        import torch.distributed as dist

        send = _as_bytes(array)
        itemsize = np.asarray(array).dtype.itemsize
        if sizes is None:
            counts = self.allgather_obj(int(send.size))
        else:
            counts = [int(s) * itemsize for s in sizes]
        # gloo all-gathers equal sizes only: pad every buffer to the largest, trim after.
        width = max(max(counts), 1)
        padded = torch.zeros(width, dtype=torch.uint8)
        padded.numpy()[: send.size] = send
        out = [torch.empty(width, dtype=torch.uint8) for _ in range(self.size)]
        dist.all_gather(out, padded, group=self.group)
        dtype = np.asarray(array).dtype
        return [t.numpy()[:c].view(dtype) for t, c in zip(out, counts)]

    def split(self, color: int) -> "GlooComm":
        """Sub-groups by color. Every rank of the default group must call this (torch creates
        each group collectively), so only split a world-wide GlooComm."""
        colors = self.allgather_obj(int(color))
        mine = None
        for c in sorted(set(colors)):
            members = [r for r, rc in zip(self.ranks, colors) if rc == c]
            group = _new_gloo_group(members, self.timeout_s)
            if c == color:
                mine = GlooComm(group, members, self.timeout_s)
        return mine

    def alltoallv(self, send, send_counts, recv_counts):
        """gloo's all_to_all_single (its list form all_to_all is not on every torch version)."""
        import torch
        import torch.distributed as dist

        out = torch.empty(int(sum(recv_counts)), dtype=torch.uint8)
        dist.all_to_all_single(
            out,
            torch.from_numpy(_as_bytes(send)),
            output_split_sizes=[int(c) for c in recv_counts],
            input_split_sizes=[int(c) for c in send_counts],
            group=self.group,
        )
        return out.numpy()


def _new_gloo_group(ranks: list[int], timeout_s: float | None):
    import torch.distributed as dist

    timeout = None if timeout_s is None else timedelta(seconds=timeout_s)
    return dist.new_group(ranks=ranks, backend="gloo", timeout=timeout)


def make_host_comm(world_size: int, timeout_s: float | None = None) -> HostComm:
    """The host comm for this job: MPI when MPI started it, else gloo, else local.

    Collective when world_size > 1 (every rank must call it at the same point). timeout_s
    bounds gloo's waits (a new group does not inherit init_process_group's timeout); MPI's
    collectives have none, its launcher ends a job whose rank died.
    """
    if world_size == 1:
        return LocalComm()
    if mpi_launched():
        comm = MPIComm.world()
        if comm.size != world_size:
            raise RuntimeError(
                f"MPI sees {comm.size} ranks but the job has {world_size}: "
                f"launch every rank with the same mpirun/srun --mpi command"
            )
        return comm
    import torch.distributed as dist

    if not dist.is_initialized():
        raise RuntimeError(
            f"world size {world_size} without MPI or an initialized "
            f"torch.distributed process group: no way to exchange data"
        )
    return GlooComm.world(timeout_s)


def allgather_batch(comm: HostComm, samples, origin: np.ndarray) -> GlobalBatch:
    """All ranks' raw local batches (B samples each, origin (B, 2)) as one GlobalBatch.

    Two all-gathers: the metadata (the same size on every rank, as B is), then the payloads,
    whose sizes the metadata gives.
    """
    meta, payload = encode(samples, origin)
    gathered = comm.allgather_array(meta.reshape(-1), sizes=[meta.size] * comm.size)
    metas = [m.reshape(-1, meta.shape[1]) for m in gathered]
    payloads = comm.allgather_array(payload, sizes=[payload_size(m) for m in metas])
    return GlobalBatch(metas, payloads)
