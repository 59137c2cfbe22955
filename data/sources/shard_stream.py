"""The per-rank training stream over the MLPerf shards: which shards a rank reads each epoch,
in which order, and the exact position to resume from.

The shard format, its validated reader and writer are data/sources/shards.py; the shard held in
memory and the next one read in the background, data/sources/loader.py.
"""

from __future__ import annotations

import numpy as np

from bert.core.errors import DataError
from data.sample import Sample
from data.sources.loader import ShardLoader
from data.sources.rank_shards import RankShards


class ShardStream:
    """Endless per-rank sequence of training samples, epoch after epoch, with an exact position.

    Epoch e: the shard order is a permutation drawn from a numpy Generator seeded with
    (seed, e), identical on every rank; rank r reads shards order[r::world_size]. Within shard
    k (index into `files`), samples are read in a permutation seeded with (seed, e, k). When the
    shard count is not a multiple of world_size, ranks hold unequal shard counts for the epoch.

    `length_range=(lo, hi)` keeps only samples of length in (lo, hi]: one stream per length
    stratum (data/sources/stratified.py). Such streams may share one `loader`, so a shard is read
    once.

    The position is (epoch, shard_pos, offset): the next sample is number `offset` (among the
    kept samples) of the `shard_pos`-th shard of this rank in that epoch. The current shard is
    held in memory and the next one is read in the background (data/sources/loader.py).
    """

    def __init__(
        self,
        shards: RankShards,
        length_range: tuple[int, int] | None = None,
        loader: ShardLoader | None = None,
    ):
        self.files = list(shards.files)
        self.rank = shards.rank
        self.world_size = shards.world_size
        self.seed = shards.seed
        self.length_range = length_range
        self.loader = loader or shards.loader()
        self.epoch = 0
        self.shard_pos = 0
        self.offset = 0
        self._loaded_key: tuple[int, int] | None = None  # (epoch, shard_pos) held below
        self._samples: list[Sample] = []
        self._index = np.zeros(0, dtype=np.int64)  # (n,) sample index within the file
        self._file_index = -1

    def shards_of_epoch(self, epoch: int) -> list[int]:
        """Indices into `files` that this rank reads in `epoch`, in reading order."""
        order = np.random.default_rng([self.seed, epoch]).permutation(len(self.files))
        return [int(k) for k in order[self.rank :: self.world_size]]

    def next_batch(self, n: int) -> list[Sample]:
        """The next n samples, crossing shard and epoch boundaries as needed."""
        return self.next_batch_tagged(n)[0]

    def next_batch_tagged(self, n: int) -> tuple[list[Sample], np.ndarray]:
        """The next n samples and their origin (n, 2) int64: (index into files, index in file)."""
        batch: list[Sample] = []
        origin = np.empty((n, 2), dtype=np.int64)
        empty_shards = 0
        while len(batch) < n:
            self._load_current()
            take = min(n - len(batch), len(self._samples) - self.offset)
            origin[len(batch) : len(batch) + take, 0] = self._file_index
            origin[len(batch) : len(batch) + take, 1] = self._index[
                self.offset : self.offset + take
            ]
            batch.extend(self._samples[self.offset : self.offset + take])
            self.offset += take
            empty_shards = 0 if take else empty_shards + 1
            self._check_not_starved(empty_shards)
            if self.offset == len(self._samples):
                self._advance_shard()
        return batch, origin

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "shard_pos": self.shard_pos, "offset": self.offset}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume at a position from `state_dict` (same files, rank, world_size and seed)."""
        missing = {"epoch", "shard_pos", "offset"} - set(state)
        if missing:
            raise ValueError(f"ShardStream state lacks {sorted(missing)}: {state}")
        epoch, shard_pos, offset = (int(state[k]) for k in ("epoch", "shard_pos", "offset"))
        num_local = len(self.shards_of_epoch(epoch)) if epoch >= 0 else 0
        if epoch < 0 or not 0 <= shard_pos < num_local or offset < 0:
            raise ValueError(
                f"ShardStream state {state} does not fit {num_local} shards of "
                f"rank {self.rank} of {self.world_size}"
            )
        self.epoch, self.shard_pos, self.offset = epoch, shard_pos, offset
        self._load_current()
        # A stratum's stream may stand at the start of a shard holding none of its lengths.
        at_end_ok = self.length_range is not None and offset == len(self._samples)
        if offset >= len(self._samples) and not at_end_ok:
            raise ValueError(
                f"ShardStream state {state}: offset beyond the "
                f"{len(self._samples)} samples of {self.files[self._file_index]}"
            )

    def close(self) -> None:
        self.loader.close()

    def _load_current(self) -> None:
        """Hold the shard at (epoch, shard_pos) in its shuffled order; start reading the next."""
        key = (self.epoch, self.shard_pos)
        if self._loaded_key == key:
            return
        self._file_index = self.shards_of_epoch(self.epoch)[self.shard_pos]
        shard = self.loader.get(self.epoch, self._file_index)
        self.loader.prefetch(*self._next_shard(*key))
        keep = slice(None)
        if self.length_range is not None:
            lo, hi = self.length_range
            keep = np.flatnonzero((shard.lengths > lo) & (shard.lengths <= hi))
            self._samples = [shard.samples[i] for i in keep]
        else:
            self._samples = shard.samples
        self._index = shard.index[keep]
        self._loaded_key = key

    def _next_shard(self, epoch: int, shard_pos: int) -> tuple[int, int]:
        """(epoch, file index) of the shard after (epoch, shard_pos) for this rank."""
        if shard_pos + 1 < len(self.shards_of_epoch(epoch)):
            return epoch, self.shards_of_epoch(epoch)[shard_pos + 1]
        return epoch + 1, self.shards_of_epoch(epoch + 1)[0]

    def _check_not_starved(self, empty_shards: int) -> None:
        # A stratum absent from the data would otherwise loop over the shards forever.
        if empty_shards > len(self.files):
            lo, hi = self.length_range or (0, 0)
            raise DataError(
                f"{self.files[0].parent}: rank {self.rank} found no sample of length "
                f"in ({lo}, {hi}] in {empty_shards} shards in a row; the data lacks "
                f"this length stratum (data.balance=stratified*)"
            )

    def _advance_shard(self) -> None:
        self.offset = 0
        self.shard_pos += 1
        if self.shard_pos == len(self.shards_of_epoch(self.epoch)):
            self.shard_pos = 0
            self.epoch += 1
