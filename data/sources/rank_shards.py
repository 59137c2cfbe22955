"""What every stream over the training shards is built from: the files, this rank's place in
the world, the seed of the shard and sample order, and the limits each sample is read against.

The streams (ShardStream, StratifiedStream, BucketStream) take one `RankShards` instead of
passing the same arguments through each layer; `loader` builds the ShardLoader they read
through.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Sequence

from bert.core.errors import DataError
from data.sources.loader import ShardLoader
from data.sources.shards import read_samples


@dataclass(frozen=True)
class RankShards:
    """The shards as rank `rank` of `world_size` reads them. vocab_size: the model's, which
    every token id and label must be below (checked as a shard is read); None: not checked."""

    files: Sequence[str | os.PathLike]  # every rank's list, the same order (held as Paths)
    rank: int
    world_size: int
    seed: int
    max_seq_length: int
    max_predictions: int
    vocab_size: int | None = None

    def __post_init__(self) -> None:
        files = tuple(Path(p) for p in self.files)
        object.__setattr__(self, "files", files)
        if not 0 <= self.rank < self.world_size:
            raise ValueError(
                f"ShardStream: rank {self.rank} is outside world_size {self.world_size}"
            )
        if len(files) < self.world_size:
            where = files[0].parent if files else "training data"
            raise DataError(
                f"{where}: {len(files)} training shards for {self.world_size} "
                f"ranks; every rank needs at least one shard"
            )

    def loader(self, capacity: int = 2) -> ShardLoader:
        """A loader of these shards, keeping up to `capacity` of them in memory."""
        read = partial(
            read_samples,
            max_seq_length=self.max_seq_length,
            max_predictions=self.max_predictions,
            vocab_size=self.vocab_size,
        )
        return ShardLoader(self.files, self.seed, read, capacity=capacity)
