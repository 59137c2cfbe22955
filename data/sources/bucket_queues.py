"""The training pipeline's bucketed source ([Zhang]): one queue per length bucket over this
rank's shards, each drawn from when the curriculum (data/order/curriculum.py) picks its bucket.

The rules of buckets and passes are data/order/bucketing.py's; `BucketStream` streams them
from the shards, so memory stays a few shards whatever the data size.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from data.order.bucketing import check_boundaries, reference_shares
from data.sample import Sample
from data.sources.rank_shards import RankShards
from data.sources.shard_stream import ShardStream
from data.sources.shards import DataError


class _BucketShardStream(ShardStream):
    """A ShardStream over one bucket's lengths; its empty-bucket error names the setting."""

    def _check_not_starved(self, empty_shards: int) -> None:
        if empty_shards > len(self.files):
            lo, hi = self.length_range
            raise DataError(
                f"{self.files[0].parent}: rank {self.rank} found no sample of length "
                f"in ({lo}, {hi}] in {empty_shards} shards in a row: that length "
                f"bucket is empty; merge it with a neighbour "
                f"(data.bucket_boundaries)"
            )


class BucketQueue:
    """One bucket's samples of this rank's shards, epoch after epoch; never twice in a batch.

    A batch that crosses the end of an epoch takes the old epoch's last samples and the new
    epoch's first ones; a new-epoch sample already in that batch (its shard can come back
    first, in another order) is deferred to the head of the next batch instead. So every
    sample is drawn exactly once per epoch of the queue, and no batch holds one twice.
    """

    def __init__(self, stream: ShardStream, bucket: int):
        self.stream, self.bucket = stream, bucket
        self.deferred: list[tuple[Sample, int, int]] = []  # (sample, file index, index in file)

    def take(self, n: int) -> tuple[list[Sample], np.ndarray]:
        """n samples and their origin (n, 2) int64: (file index, index in the file)."""
        samples, keys = [], []
        waiting, self.deferred = self.deferred[:n], self.deferred[n:]
        for sample, f, i in waiting:
            samples.append(sample)
            keys.append((f, i))
        seen = set(keys)
        while len(samples) < n:
            drawn, origin = self.stream.next_batch_tagged(n - len(samples))
            for sample, (f, i) in zip(drawn, origin.tolist()):
                if (f, i) in seen:
                    self._defer(sample, f, i, n)
                    continue
                seen.add((f, i))
                samples.append(sample)
                keys.append((f, i))
        return samples, np.asarray(keys, dtype=np.int64).reshape(n, 2)

    def _defer(self, sample: Sample, f: int, i: int, n: int) -> None:
        # fewer than n distinct samples per epoch would defer without end
        if len(self.deferred) >= n:
            lo, hi = self.stream.length_range
            raise DataError(
                f"rank {self.stream.rank}: length bucket ({lo}, {hi}] holds fewer "
                f"than {n} samples (the local batch) on this rank's shards; merge "
                f"it with a neighbour (data.bucket_boundaries)"
            )
        self.deferred.append((sample, f, i))

    def state_dict(self) -> dict[str, Any]:
        return {
            "position": self.stream.state_dict(),
            "deferred": [[f, i] for _, f, i in self.deferred],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stream.load_state_dict(state["position"])
        self.deferred = [
            (self._fetch(int(f), int(i)), int(f), int(i)) for f, i in state["deferred"]
        ]

    def _fetch(self, f: int, i: int) -> Sample:
        """Sample i of file f (a deferred sample after a resume: read again by its origin)."""
        shard = self.stream.loader.get(self.stream.epoch, f)
        hits = np.flatnonzero(shard.index == i)
        if hits.size != 1:
            raise ValueError(
                f"bucket {self.bucket} state: {self.stream.files[f]} has no sample {i}"
            )
        return shard.samples[int(hits[0])]


class BucketStream:
    """The training pipeline's source: `next_batch_tagged(n, bucket)` from bucket's queue.

    One BucketQueue per bucket over this rank's shards (ShardStream's per-epoch assignment,
    files[order[rank::world]]), all reading through one ShardLoader so a shard is read once
    while the queues walk it. Queues move at the rates the curriculum visits their buckets, so
    they drift apart; up to 2 shards per bucket stay in memory (the loader's capacity), and a
    queue that falls further behind reads its shard again. The position is one ShardStream
    position (plus deferred samples) per bucket: exact resume.
    """

    def __init__(self, shards: RankShards, boundaries: Sequence[int]):
        max_seq_length = shards.max_seq_length
        self.edges = check_boundaries(boundaries)
        if self.edges[-1] != max_seq_length:
            raise ValueError(
                f"bucket boundaries {self.edges.tolist()} must end at "
                f"max_seq_length={max_seq_length}"
            )
        self.loader = shards.loader(capacity=2 * self.edges.size)
        lows = [0, *self.edges[:-1].tolist()]
        self.queues = [
            BucketQueue(
                _BucketShardStream(shards, length_range=(lo, int(hi)), loader=self.loader), b
            )
            for b, (lo, hi) in enumerate(zip(lows, self.edges))
        ]
        self.shares = reference_shares(self.edges, max_seq_length)

    @property
    def num_buckets(self) -> int:
        return int(self.edges.size)

    def next_batch_tagged(self, n: int, bucket: int) -> tuple[list[Sample], np.ndarray]:
        """n samples of `bucket` and their origin (n, 2) int64 (file index, index in file)."""
        if not 0 <= bucket < self.num_buckets:
            raise ValueError(f"bucket {bucket} is outside 0..{self.num_buckets - 1}")
        return self.queues[bucket].take(n)

    def state_dict(self) -> dict[str, Any]:
        return {"boundaries": self.edges.tolist(), "buckets": [q.state_dict() for q in self.queues]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "buckets" not in state:
            raise ValueError(
                f"data state {sorted(state)} holds no bucket positions: it was "
                f"saved without data.curriculum"
            )
        if state["boundaries"] != self.edges.tolist():
            raise ValueError(
                f"data state was saved with bucket boundaries "
                f"{state['boundaries']}, this run has {self.edges.tolist()}"
            )
        for queue, position in zip(self.queues, state["buckets"]):
            queue.load_state_dict(position)

    def describe(self) -> str:
        shares = ", ".join(f"{x:.2f}" for x in self.shares)
        return (
            f"{self.num_buckets} length buckets, upper edges {self.edges.tolist()}, "
            f"reference shares [{shares}]"
        )

    def close(self) -> None:
        self.loader.close()
