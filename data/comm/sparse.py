"""Sparse host transport (node_swap, data/order/node_balance.py): only samples that change rank
travel.

One step, on every rank of the world (collective):
1. All-gather the sizes of the global batch: per sample its length and masked count, two
   int16 (4 bytes a sample, against about 1.2 kB of payload). The lengths are all the
   assignment needs; the masked counts let every rank size every message in advance.
2. Compute the assignment (node_balance): the same on every rank. A rank needs only the rows
   of its own node and of the nodes its samples go to (`node_swap_rows`), which are the rows
   of the whole assignment (`assign_node_swap`, what the simulator and the tests use).
3. One all-to-all-v: each rank sends every sample it read but does not train to the rank that
   trains it, and receives the samples it trains but did not read. A message from rank s to
   rank d holds those samples in ascending global index as the wire format encodes a batch
   (data/comm/wire.py: meta rows (k, 5) int64, then the int16 payload), padded to 8 bytes so that
   the next message's meta stays aligned. Everything else stays where it was read.

The all-to-all is the host comm's `alltoallv` (data/comm/host.py): MPI_Alltoallv under MPI,
all_to_all_single on the gloo group under torchrun.

`received_bytes` counts what each rank receives with this format; scripts/simulate_balance.py
reports it and tests/unit/test_sparse_exchange.py checks it against the bytes that really arrive.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import numpy as np

from data.comm.host import HostComm, displacements
from data.comm.wire import META_WIDTH, GlobalBatch, encode
from data.sample import Sample

SIZE_BYTES = 2 * np.dtype(np.int16).itemsize  # all-gathered per sample: length, masked count
META_BYTES = META_WIDTH * np.dtype(np.int64).itemsize  # wire meta row of a moved sample
ALIGN = np.dtype(np.int64).itemsize  # messages start where an int64 meta row may
_INT16_MAX = int(np.iinfo(np.int16).max)

# (lengths (W*B,), world size, ranks per node, rank) -> (ranks (K,), their rows (K, B))
RowsFor = Callable[[np.ndarray, int, int, int], tuple[np.ndarray, np.ndarray]]


# ---------------------------------------------------------------------------------------------
# Sizes (shared by the transport and the simulator)
# ---------------------------------------------------------------------------------------------


def payload_bytes(lengths, num_masked) -> np.ndarray:
    """Wire payload bytes of each sample: ids and segment ids (l each), masked positions and
    ids (m each), all int16 (data/comm/wire.py)."""
    return 2 * (2 * np.asarray(lengths, np.int64) + 2 * np.asarray(num_masked, np.int64))


def _padded(nbytes):
    """Message size once padded to ALIGN bytes."""
    return -(-np.asarray(nbytes, np.int64) // ALIGN) * ALIGN


def messages(lengths: np.ndarray, num_masked: np.ndarray, assignment: np.ndarray):
    """The non-empty messages of step 3 under assignment (W, B): (sender, receiver, bytes),
    each (K,), ordered by sender then receiver. Bytes as wire.py encodes the samples, padded.
    lengths, num_masked (W*B,)."""
    world, local = assignment.shape
    rows = assignment.reshape(-1)
    trainer = np.repeat(np.arange(world, dtype=np.int64), local)
    reader = rows // local
    moved = reader != trainer
    key = reader[moved] * world + trainer[moved]
    each = META_BYTES + payload_bytes(lengths[rows[moved]], num_masked[rows[moved]])
    order = np.argsort(key, kind="stable")
    key, each = key[order], each[order]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if key.size else key
    total = np.add.reduceat(each, starts) if key.size else each
    sender, receiver = np.divmod(key[starts], world)
    return sender, receiver, _padded(total)


def received_bytes(lengths, num_masked, assignment: np.ndarray) -> np.ndarray:
    """Bytes (..., W) each rank receives in one step: the others' sizes in the all-gather,
    then the samples it trains but another rank read. Shapes as in data/order/strategies.py."""
    world, local = assignment.shape[-2:]
    flat_a = assignment.reshape((-1, world, local))
    flat_l = np.asarray(lengths).reshape((-1, world * local))
    flat_m = np.asarray(num_masked).reshape((-1, world * local))
    out = np.full((flat_a.shape[0], world), (world - 1) * local * SIZE_BYTES, dtype=np.int64)
    for t in range(flat_a.shape[0]):
        _, receiver, size = messages(flat_l[t], flat_m[t], flat_a[t])
        np.add.at(out[t], receiver, size)
    return out.reshape(assignment.shape[:-2] + (world,))


# ---------------------------------------------------------------------------------------------
# Who sends what
# ---------------------------------------------------------------------------------------------


class Plan(NamedTuple):
    """One rank's part of step 3, in global sample indices."""

    send_rows: np.ndarray  # the samples this rank read but does not train, by receiver, then index
    send_to: np.ndarray  # the rank that trains each
    recv_rows: np.ndarray  # the samples this rank trains but did not read, by sender, then index
    recv_from: np.ndarray  # the rank that read each


def plan_for(ranks: np.ndarray, rows: np.ndarray, rank: int, local: int) -> Plan:
    """This rank's sends and receives, from the assignment rows (K, B) of `ranks` (K,): at
    least its own and those of every rank that trains one of its samples."""
    flat = rows.reshape(-1)
    trainer = np.repeat(ranks, rows.shape[1])
    out = (flat // local == rank) & (trainer != rank)
    order = np.lexsort((flat[out], trainer[out]))  # by receiver, then sample
    mine = np.sort(rows[np.flatnonzero(ranks == rank)[0]])
    mine = mine[mine // local != rank]
    return Plan(flat[out][order], trainer[out][order], mine, mine // local)


def _per_rank(world: int, ranks: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """Message sizes (W,) from the bytes of each sample and the rank it goes to or comes from."""
    raw = np.zeros(world, dtype=np.int64)
    np.add.at(raw, ranks, nbytes)
    return _padded(raw)


# ---------------------------------------------------------------------------------------------
# The exchange
# ---------------------------------------------------------------------------------------------


def gather_sizes(comm: HostComm, samples: Sequence[Sample]) -> tuple[np.ndarray, np.ndarray]:
    """(lengths, masked counts) of the world's global batch, each (W*B,) int64 (step 1)."""
    sizes = np.array(
        [[s.input_ids.shape[0], s.masked_positions.shape[0]] for s in samples], dtype=np.int64
    ).reshape(-1, 2)
    if sizes.size and sizes.max() > _INT16_MAX:
        raise ValueError(
            f"a sample of {sizes.max()} tokens or masked positions does not fit "
            f"the int16 size exchange"
        )
    local = sizes.shape[0]
    gathered = comm.allgather_array(
        sizes.astype(np.int16).reshape(-1), sizes=[2 * local] * comm.size
    )
    both = np.concatenate(gathered).reshape(-1, 2).astype(np.int64)
    return both[:, 0], both[:, 1]


def exchange(
    comm: HostComm,
    samples: Sequence[Sample],
    origin: np.ndarray,
    ranks_per_node: int,
    rows_for: RowsFor,
):
    """This rank's balanced local batch: (samples, origin (B, 2)) in assignment order.

    samples, origin: the B samples this rank read and their (file, index). Collective over
    `comm`, the whole world; ranks_per_node as in data/order/strategies.py; rows_for: the
    strategy's `rows` (its record names it: data/order/strategies.py).
    """
    lengths, masked = gather_sizes(comm, samples)
    ranks, rows = rows_for(lengths, comm.size, ranks_per_node, comm.rank)
    plan = plan_for(ranks, rows, comm.rank, len(samples))
    send, send_counts, recv_counts = outgoing(
        samples, origin, lengths, masked, plan, comm.size, comm.rank
    )
    received = comm.alltoallv(send, send_counts, recv_counts)
    mine = rows[np.flatnonzero(ranks == comm.rank)[0]]
    return _unpack(received, recv_counts, plan, samples, origin, mine, comm.rank * len(samples))


def outgoing(samples, origin, lengths, masked, plan: Plan, world: int, rank: int):
    """Rank `rank`'s all-to-all-v arguments: (send buffer (uint8), send counts (W,), receive
    counts (W,)); the messages in receiver order, each padded to its count."""
    first = rank * len(samples)
    wire = META_BYTES + payload_bytes(lengths, masked)  # bytes of each sample on the wire
    send_counts = _per_rank(world, plan.send_to, wire[plan.send_rows])
    recv_counts = _per_rank(world, plan.recv_from, wire[plan.recv_rows])
    send = np.zeros(int(send_counts.sum()), dtype=np.uint8)
    starts = displacements(send_counts)
    for to in np.unique(plan.send_to).tolist():
        picked = (plan.send_rows[plan.send_to == to] - first).tolist()
        meta, payload = encode([samples[i] for i in picked], origin[picked])
        body = np.concatenate([meta.reshape(-1).view(np.uint8), payload.view(np.uint8)])
        send[starts[to] : starts[to] + body.size] = body
    return send, send_counts, recv_counts


def _unpack(
    received: np.ndarray,
    recv_counts: np.ndarray,
    plan: Plan,
    samples,
    origin,
    rows: np.ndarray,
    first: int,
):
    """Samples and origin (B, 2) of `rows` (this rank's assignment row): its own samples as
    they were, the others decoded from the received messages (views into `received`)."""
    metas, payloads = [], []
    starts = displacements(recv_counts)
    for sender in np.unique(plan.recv_from).tolist():
        k = int((plan.recv_from == sender).sum())
        at = int(starts[sender])
        meta = received[at : at + k * META_BYTES].view(np.int64).reshape(k, META_WIDTH)
        size = int(payload_bytes(meta[:, 0], meta[:, 1]).sum())
        metas.append(meta)
        payloads.append(received[at + k * META_BYTES : at + k * META_BYTES + size].view(np.int16))
    pooled = GlobalBatch(metas, payloads) if metas else None
    where = {g: i for i, g in enumerate(plan.recv_rows.tolist())}  # row in `pooled`
    out, out_origin = [], np.empty((len(rows), 2), dtype=np.int64)
    for i, g in enumerate(rows.tolist()):
        if g in where:
            out.append(pooled.samples([where[g]])[0])
            out_origin[i] = pooled.origin[where[g]]
        else:
            out.append(samples[g - first])
            out_origin[i] = origin[g - first]
    return out, out_origin
