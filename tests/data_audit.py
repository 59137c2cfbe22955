"""Checks of a sample audit trail (DIR/rank<R>.txt from --record-samples) against an oracle.

The oracle replays what each rank drew (its ShardStream or StratifiedStream, same seed) and
deals every global batch with data/order/strategies.py over the group the strategy exchanges
within, with the run's node size (node_swap deals the world by nodes: the simulator's
assignment for the same lengths).
Used by tests/unit/test_pipeline.py (ranks as threads) and
tests/integration/test_data_distributed.py (ranks as processes under torchrun and mpiexec).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from data.order.lengths import strata_edges, stratum_of
from data.order.strategies import STRATEGIES, balance
from data.sample_record import read_records
from data.sources import SOURCES
from data.sources.rank_shards import RankShards
from data.sources.shard_stream import ShardStream
from data.sources.shards import list_shards, read_samples
from data.sources.stratified import StratifiedStream

Key = tuple[str, int]  # (shard file name, sample index in the file)


def read_rank_files(folder: Path, world: int) -> list[dict[int, list[Key]]]:
    """Per rank: step -> the samples it trained in that step."""
    out = []
    for rank in range(world):
        steps: dict[int, list[Key]] = {}
        path = Path(folder) / f"rank{rank}.txt"
        for step, name, index in read_records(path) if path.exists() else []:
            steps.setdefault(step, []).append((name, index))
        out.append(steps)
    return out


def stratified(strategy: str) -> bool:
    """Whether the strategy's ranks draw from per-stratum queues (not one pass over the data)."""
    return STRATEGIES[strategy].source == "stratified"


def groups_of(strategy: str, world: int, ranks_per_node: int) -> list[list[int]]:
    """The rank groups whose batches are pooled and dealt together."""
    scope = STRATEGIES[strategy].scope
    if scope == "rank":
        return [[r] for r in range(world)]
    if scope == "world":
        return [list(range(world))]
    size = min(ranks_per_node, world)
    return [list(range(start, start + size)) for start in range(0, world, size)]


def expected_assignment(
    data_dir: Path,
    strategy: str,
    world: int,
    global_batch: int,
    seed: int,
    max_seq: int,
    max_pred: int,
    ranks_per_node: int,
    steps: int,
) -> list[dict[int, list[Key]]]:
    """Per rank: step -> the samples the strategy assigns to it (the oracle); ranks_per_node
    as the pipeline resolves it (0: the world)."""
    ranks_per_node = ranks_per_node or world
    files = list_shards(data_dir)
    local = global_batch // world
    cls = SOURCES[STRATEGIES[strategy].source]
    sources = [cls(RankShards(files, r, world, seed, max_seq, max_pred)) for r in range(world)]
    expected: list[dict[int, list[Key]]] = [{} for _ in range(world)]
    for step in range(steps):
        drawn = [s.next_batch_tagged(local) for s in sources]
        for group in groups_of(strategy, world, ranks_per_node):
            lengths = np.concatenate([[len(x.input_ids) for x in drawn[r][0]] for r in group])
            origin = np.concatenate([drawn[r][1] for r in group])
            rows = balance(strategy, lengths, len(group), min(ranks_per_node, len(group)))
            for member, rank in enumerate(group):
                expected[rank][step] = [(files[f].name, int(i)) for f, i in origin[rows[member]]]
    for s in sources:
        s.close()
    return expected


def first_pass_steps(
    data_dir: Path, world: int, local: int, seed: int, max_seq: int, max_pred: int
) -> int:
    """Steps every stratum queue of every rank serves before its first pass ends: within them
    no sample may be trained twice."""
    files = list_shards(data_dir)
    counts = StratifiedStream(RankShards(files, 0, world, seed, max_seq, max_pred)).counts(local)
    steps = []
    for rank in range(world):
        shards = ShardStream(
            RankShards(files, rank, world, seed, max_seq, max_pred)
        ).shards_of_epoch(0)
        lengths = np.array(
            [len(s.input_ids) for k in shards for s in read_samples(files[k], max_seq, max_pred)]
        )
        per_stratum = np.bincount(stratum_of(lengths, strata_edges(max_seq)), minlength=len(counts))
        steps += [n // c for n, c in zip(per_stratum, counts) if c]
    return int(min(steps))


def check_trail(
    recorded: list[dict[int, list[Key]]],
    expected: list[dict[int, list[Key]]],
    steps: int,
    complete: bool = True,
) -> None:
    """Every rank trained exactly its assigned samples in every step; no sample twice a step.

    complete: the ranks recorded no step beyond `steps` (False for a run that crashed).
    """
    for step in range(steps):
        union: list[Key] = []
        for rank, (got, want) in enumerate(zip(recorded, expected)):
            assert sorted(got.get(step, [])) == sorted(want[step]), (step, rank)
            union += got[step]
        duplicates = [k for k, n in Counter(union).items() if n > 1]
        assert not duplicates, (step, duplicates)
    if complete:
        assert all(max(r) == steps - 1 for r in recorded), "ranks recorded other step counts"


def all_samples(data_dir: Path) -> list[Key]:
    """Every (file name, index) of the training shards."""
    import h5py

    keys = []
    for path in list_shards(data_dir):
        with h5py.File(path, "r") as f:
            keys += [(path.name, i) for i in range(f["next_sentence_labels"].shape[0])]
    return keys


def trained(recorded: list[dict[int, list[Key]]]) -> list[Key]:
    return [k for rank in recorded for step in rank.values() for k in step]
