"""Host cost of preparing one local batch, per balancing strategy (single process, one core).

What a rank's prefetch thread does per step, minus file reading (done a shard at a time in the
background) and the network: encode its raw local batch for the exchange, decode the gathered
global batch of its group (its node or the world), deal it (the strategy's record,
data/order/strategies.py), take its rows and pack them (data/packing.py). Strategies that
exchange nothing only pack. The all-gather result is given: the raw local batches are encoded
once up front, as every rank would receive them. The sparse transport (node_swap,
data/comm/sparse.py) runs whole on a comm that replays what the other ranks sent: the sizes,
the assignment rows the rank needs, its outgoing messages, decoding the ones it receives. Each
timed iteration plays one rank of one step; the ranks take turns so that each iteration keeps
a different share.

Default: MLPerf BERT-Large on 8 GPUs, global batch 448 = 8 x 56, lengths up to 512 from
REFERENCE 2's histogram, up to 76 masked tokens (15 %), one node of 8 ranks
(--ranks-per-node: smaller nodes, so that node_swap moves samples between them). The stratified
strategies draw their local batches with fixed per-stratum counts, as in training. Target:
>= 20,000 samples/s per rank (about 3 ms per local batch of 56, small next to a GPU step).

    python scripts/bench_pipeline.py [--iters 400] [--ranks-per-node R] [--json out.json]
                                     [--record FILE]

--json writes {strategy: {"samples_per_s_per_rank": x, "us_per_local_batch": y}};
--record writes the same with the machine, date, commit and command (benchmarks/results/).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from bert.submission.system_desc import cpu_model
from bert.tools.common import git_commit
from data.comm import sparse
from data.comm.host import HostComm, LocalComm, displacements
from data.comm.wire import GlobalBatch, encode
from data.config import BatchGeometry
from data.order.lengths import length_pmf, sample_lengths, sample_stratified_lengths, strata_edges
from data.order.shape import node_size
from data.order.strategies import STRATEGIES, Strategy
from data.packing import Sample, pack_samples

TARGET = 20_000.0  # samples/s per rank


def make_samples(lengths: np.ndarray, max_pred: int, rng: np.random.Generator) -> list[Sample]:
    """Samples with the given lengths, int16/int8 as read from the files."""
    out = []
    for length in lengths.tolist():
        m = min(max_pred, max(1, round(0.15 * length)))
        ids = rng.integers(104, 30522, length).astype(np.int16)
        seg = (np.arange(length) > length // 2).astype(np.int8)
        pos = np.sort(rng.choice(length, m, replace=False)).astype(np.int16)
        out.append(Sample(ids, seg, pos, ids[pos].copy(), int(rng.integers(0, 2))))
    return out


def global_batches(
    strategy: str, args, geometry: BatchGeometry, rng: np.random.Generator
) -> list[list[list[Sample]]]:
    """`args.batches` global batches, each a list of the ranks' raw local batches."""
    local = geometry.local_batch_size
    pmf = length_pmf(args.max_len)
    out = []
    for _ in range(args.batches):
        if STRATEGIES[strategy].source == "stratified":
            lengths = sample_stratified_lengths(
                1, args.ranks, local, rng, pmf, strata_edges(args.max_len)
            )[0]
        else:
            lengths = sample_lengths(args.global_batch_size, args.max_len, rng)
        samples = make_samples(lengths, args.max_pred, rng)
        out.append([samples[r * local : (r + 1) * local] for r in range(args.ranks)])
    return out


class ReplayComm(HostComm):
    """The sparse transport's collectives for one rank, answered from what the others sent."""

    def __init__(self, rank: int, size: int, sizes: list, received: np.ndarray):
        self.rank, self.size, self.sizes, self.received = rank, size, sizes, received

    def allgather_array(self, array, sizes=None):
        return self.sizes

    def alltoallv(self, send, send_counts, recv_counts):
        return self.received


class Recorded(NamedTuple):
    """What every rank of one sparse-transport step gets from the others: the gathered sizes,
    and the bytes of its all-to-all-v (each rank's outgoing messages, computed up front)."""

    sizes: list[np.ndarray]
    messages: list[list[np.ndarray]]  # messages[s][d]: rank s to rank d

    @classmethod
    def of(cls, record: Strategy, raw: list[list[Sample]], ranks_per_node: int) -> "Recorded":
        sizes = [
            np.stack(sparse.gather_sizes(LocalComm(), s), axis=1).astype(np.int16).ravel()
            for s in raw
        ]
        lengths, masked = np.concatenate(sizes).reshape(-1, 2).T.astype(np.int64)
        world = len(raw)
        assignment = record.deal(lengths, world, ranks_per_node)
        messages = []
        for rank, samples in enumerate(raw):
            plan = sparse.plan_for(np.arange(world), assignment, rank, len(samples))
            send, counts, _ = sparse.outgoing(
                samples, no_origin(samples), lengths, masked, plan, world, rank
            )
            messages.append([send[a : a + c] for a, c in zip(displacements(counts), counts)])
        return cls(sizes, messages)

    def received(self, rank: int) -> np.ndarray:
        return np.concatenate([m[rank] for m in self.messages])


def no_origin(samples) -> np.ndarray:
    return np.zeros((len(samples), 2), dtype=np.int64)


def group_of(record: Strategy, rank: int, args) -> range:
    """The ranks whose raw batches `rank` pools in the all-gather: its node or the world."""
    size = args.ranks_per_node if record.scope == "node" else args.ranks
    return range(rank // size * size, rank // size * size + size)


def prepare(strategy: str, rank: int, raw: list[list[Sample]], gathered, geometry, args):
    """One rank's host work for one step; `gathered`: every rank's encoded batch (meta,
    payload), or for the sparse transport what was Recorded."""
    mine, record = raw[rank], STRATEGIES[strategy]
    if not record.exchanges:
        samples = mine
    elif record.transport == "sparse":
        comm = ReplayComm(rank, len(raw), gathered.sizes, gathered.received(rank))
        samples, _ = sparse.exchange(
            comm, mine, no_origin(mine), args.ranks_per_node, rows_for=record.rows
        )
    else:
        encode(mine, no_origin(mine))  # its send buffer
        group = group_of(record, rank, args)
        pooled = GlobalBatch(*zip(*(gathered[r] for r in group)))
        rows = record.deal(pooled.lengths, len(group), len(group))[rank - group.start]
        samples = pooled.samples(rows)
    return [pack_samples(micro).to("cpu") for micro in geometry.micro_batches(samples)]


def bench(strategy: str, args) -> dict:
    rng = np.random.default_rng(args.seed)
    geometry = BatchGeometry.build(args, args.ranks)
    batches = global_batches(strategy, args, geometry, rng)
    record = STRATEGIES[strategy]
    if record.transport == "sparse":
        gathered = [Recorded.of(record, raw, args.ranks_per_node) for raw in batches]
    else:
        gathered = [[encode(s, no_origin(s)) for s in raw] for raw in batches]
    for i in range(args.warmup):
        prepare(
            strategy,
            i % args.ranks,
            batches[i % len(batches)],
            gathered[i % len(batches)],
            geometry,
            args,
        )
    times = []
    for i in range(args.iters):
        b = i % len(batches)
        start = time.perf_counter()
        prepare(strategy, i % args.ranks, batches[b], gathered[b], geometry, args)
        times.append(time.perf_counter() - start)
    seconds = float(np.median(times))
    local = geometry.local_batch_size
    return {"samples_per_s_per_rank": local / seconds, "us_per_local_batch": seconds * 1e6}


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "cpu": cpu_model() or platform.processor() or "unknown",
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "torch_threads": torch.get_num_threads(),
        "load_average": os.getloadavg(),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "command": shlex.join(["python", *sys.argv]),
    }


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=list(STRATEGIES))
    p.add_argument("--global-batch", type=int, default=448, dest="global_batch_size")
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument(
        "--ranks-per-node",
        type=int,
        default=0,
        help="node size of the node-local strategies and node_swap (0: --ranks)",
    )
    p.add_argument(
        "--accum",
        type=int,
        default=1,
        dest="gradient_accumulation_steps",
        help="micro-batches per local batch",
    )
    p.add_argument("--max-len", type=int, default=512)
    p.add_argument("--max-pred", type=int, default=76)
    p.add_argument("--batches", type=int, default=8, help="distinct global batches cycled")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--iters", type=int, default=400)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="{strategy: {samples_per_s_per_rank: x}}")
    p.add_argument("--record", type=Path, help="the results with machine info")
    args = p.parse_args(argv)
    try:
        args.ranks_per_node = node_size(args.ranks, args.ranks_per_node or args.ranks)
    except ValueError as err:
        p.error(f"--ranks-per-node: {err}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    results = {s: bench(s, args) for s in args.strategies}
    print(
        f"host prep of one local batch: global {args.global_batch_size} over {args.ranks} "
        f"ranks ({args.ranks_per_node} per node), max length {args.max_len}, "
        f"{args.gradient_accumulation_steps} micro-batch(es), 1 thread"
    )
    print(f"{'strategy':<26}{'samples/s/rank':>16}{'us/batch':>10}  target {TARGET:,.0f}")
    for name, r in results.items():
        ok = "ok" if r["samples_per_s_per_rank"] >= TARGET else "BELOW"
        print(
            f"{name:<26}{r['samples_per_s_per_rank']:>16,.0f}"
            f"{r['us_per_local_batch']:>10,.0f}  {ok}"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    if args.record:
        args.record.parent.mkdir(parents=True, exist_ok=True)
        args.record.write_text(
            json.dumps(
                {"benchmark": "bench_pipeline", "machine": machine(), "results": results}, indent=1
            )
            + "\n"
        )
    return 0
