"""Shard reading ahead of use: the next shard is read and validated in a background thread.

A training shard (about 36k samples) takes seconds to read and validate; reading it only when
the previous one runs out would stall the step that crosses the boundary. `ShardLoader` keeps a
few loaded shards keyed by (epoch, file index) and reads the next one on a worker thread while
the current one is consumed. A read error (a broken file) is stored with the shard and raised
where that shard is first needed, naming the file, as a synchronous read would.

One loader may serve several streams (the per-stratum streams of data/sources/stratified.py walk
the same shards at slightly different rates), so a shard is read once while any of them still
uses it.
"""

from __future__ import annotations

from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

import numpy as np

from data.sample import Sample


class LoadedShard(NamedTuple):
    """One shard in its epoch's shuffled order."""

    samples: list[Sample]  # (n,) in reading order
    index: np.ndarray  # (n,) int64: position of each sample within its file
    lengths: np.ndarray  # (n,) int64: sequence length of each sample


def shuffled_shard(
    samples: Sequence[Sample], seed: int, epoch: int, file_index: int
) -> LoadedShard:
    """Samples of file `file_index` permuted by a generator seeded with (seed, epoch, file)."""
    order = np.random.default_rng([seed, epoch, file_index]).permutation(len(samples))
    picked = [samples[i] for i in order]
    lengths = np.fromiter((s.input_ids.shape[0] for s in picked), dtype=np.int64, count=len(picked))
    return LoadedShard(picked, order.astype(np.int64), lengths)


class ShardLoader:
    """Loaded shards by (epoch, file index), read on one background thread.

    read(path) -> list[Sample] is the validated reader (data.sources.shards.read_samples with the
    run's limits bound). `capacity` bounds how many shards stay in memory; the least recently
    requested is dropped first.
    """

    def __init__(
        self,
        files: Sequence[Path],
        seed: int,
        read: Callable[[Path], list[Sample]],
        capacity: int = 2,
    ):
        if capacity < 2:
            raise ValueError(f"ShardLoader: capacity={capacity} must be >= 2 (current + next)")
        self.files = list(files)
        self.seed = seed
        self._read = read
        self._capacity = capacity
        self._shards: OrderedDict[tuple[int, int], Future] = OrderedDict()
        # One worker: reads are I/O and h5py serializes them anyway.
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shard-loader")

    def get(self, epoch: int, file_index: int) -> LoadedShard:
        """The shard, waiting for its read if needed; re-raises the read's DataError."""
        return self._request(epoch, file_index).result()

    def prefetch(self, epoch: int, file_index: int) -> None:
        """Start reading a shard that will be needed soon (no-op if already requested)."""
        self._request(epoch, file_index)

    def close(self) -> None:
        """Drop pending reads; a read in progress finishes on its own."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._shards.clear()

    def _request(self, epoch: int, file_index: int) -> Future:
        key = (epoch, file_index)
        future = self._shards.get(key)
        if future is None:
            future = self._pool.submit(self._load, epoch, file_index)
            self._shards[key] = future
        self._shards.move_to_end(key)
        while len(self._shards) > self._capacity:
            self._shards.popitem(last=False)[1].cancel()
        return future

    def _load(self, epoch: int, file_index: int) -> LoadedShard:
        samples = self._read(self.files[file_index])
        return shuffled_shard(samples, self.seed, epoch, file_index)
