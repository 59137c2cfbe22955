"""Per-rank stratified draw ([Kim]): every local batch holds fixed counts per length stratum.

The stratified balancing strategies (data/order/strategies.py: stratified, stratified_local_presort,
stratified_local_snake) need local batches that are *drawn* with the same number of samples of
each length stratum on every rank; the dealing after it is then cheap or node-local.

How the draw works here: one queue per stratum, each a `ShardStream` over this rank's shards
that keeps only the samples of its length range (edges[s], edges[s+1]]. A local batch of B
takes `strata_counts(B, fracs)[s]` samples from queue s. The queues share one `ShardLoader`, so
a shard is read once while the queues walk over it.

Properties and costs:
- Within one pass of a queue over the rank's shards, every sample of that stratum is drawn
  exactly once. The counts are rounded (B=16 -> 6:3:2:5 against 37.3:19.7:11.7:31.4 %), so the
  queues move through their passes at slightly different rates: a stratum whose count is rounded
  down finishes its epoch later. A stratum with count 0 (tiny B) is never drawn.
- The position is one ShardStream position per stratum: exact resume, no buffered samples.
- Memory: up to 2 shards per stratum when the queues drift apart (they start together).
- The shares `fracs` default to REFERENCE 2's length histogram scaled to max_seq_length, the
  same on every rank without reading any data (all ranks must use the same counts).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from data.order.lengths import length_pmf, strata_counts, strata_edges, strata_fractions
from data.sample import Sample
from data.sources.rank_shards import RankShards
from data.sources.shard_stream import ShardStream


class StratifiedStream:
    """Drop-in for ShardStream.next_batch_tagged whose batches have fixed per-stratum counts."""

    def __init__(self, shards: RankShards, fracs: Sequence[float] | None = None):
        self.edges = strata_edges(shards.max_seq_length)
        if fracs is None:
            fracs = strata_fractions(length_pmf(shards.max_seq_length), self.edges)
        self.fracs = np.asarray(fracs, dtype=np.float64)
        num_strata = len(self.edges) - 1
        self.loader = shards.loader(capacity=2 * num_strata)
        self.streams = [
            ShardStream(
                shards,
                length_range=(int(self.edges[s]), int(self.edges[s + 1])),
                loader=self.loader,
            )
            for s in range(num_strata)
        ]

    def counts(self, n: int) -> np.ndarray:
        """(S,) samples of each stratum in a batch of n (the same on every rank)."""
        return strata_counts(n, self.fracs)

    def next_batch(self, n: int) -> list[Sample]:
        return self.next_batch_tagged(n)[0]

    def next_batch_tagged(self, n: int) -> tuple[list[Sample], np.ndarray]:
        """n samples, stratum by stratum, and their origin (n, 2) int64 (file, index in file)."""
        samples: list[Sample] = []
        origins = []
        for stream, count in zip(self.streams, self.counts(n)):
            if count:
                drawn, origin = stream.next_batch_tagged(int(count))
                samples += drawn
                origins.append(origin)
        return samples, np.concatenate(origins)

    def state_dict(self) -> dict:
        return {"strata": [s.state_dict() for s in self.streams]}

    def load_state_dict(self, state: dict) -> None:
        strata = state.get("strata")
        if not isinstance(strata, list) or len(strata) != len(self.streams):
            raise ValueError(
                f"StratifiedStream state needs {len(self.streams)} stratum "
                f"positions under 'strata': {state}"
            )
        for stream, position in zip(self.streams, strata):
            stream.load_state_dict(position)

    def close(self) -> None:
        self.loader.close()
