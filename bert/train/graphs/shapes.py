"""Which static shape a packed batch is padded to, so that one captured CUDA graph serves
every batch of that shape (bert/train/graphs/cache.py).

A batch of B sequences, T tokens, M masked tokens and longest sequence L pads to
`GraphShape(tokens, sequences, masked, max_seqlen)`:

    max_seqlen  the smallest length edge >= L (the data's length buckets: data.curriculum's
                edges, or data.max_seq_length alone)
    sequences   B + P: P padding sequences absorb the padding tokens, each 1..max_seqlen long,
                so no sequence is empty (an empty one would put its [CLS] index past the
                tokens) and none is longer than the bound flash_varlen is told
    tokens      T + P rounded up to a multiple of token_bucket (at least one token per
                padding sequence)
    masked      M rounded up to a multiple of masked_bucket

Everything here reads host ints only (the PackedBatch's shapes and its host max_seqlen).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class GraphShape:
    """The static shape of one captured graph (a dict key)."""

    tokens: int
    sequences: int
    masked: int
    max_seqlen: int


@dataclass(frozen=True)
class GraphBuckets:
    """How batches are bucketed: the run's fixed micro-batch and the bucket sizes."""

    length_edges: tuple[int, ...]  # increasing; the last bounds every sequence
    sequences: int  # the micro-batch size: a batch of another size is not graphed
    token_bucket: int
    masked_bucket: int
    max_masked: int  # sequences * max_predictions_per_seq: more is not graphed

    def __post_init__(self) -> None:
        edges = self.length_edges
        if not edges or edges[0] < 1 or any(a >= b for a, b in zip(edges, edges[1:])):
            raise ValueError(f"length edges {edges}: expected positive, strictly increasing")
        if min(self.sequences, self.token_bucket, self.masked_bucket) < 1:
            raise ValueError(f"{self}: sequences and bucket sizes must be positive")


def padding_sequences(max_seqlen: int, token_bucket: int) -> int:
    """P such that P sequences of 1..max_seqlen tokens hold any padding of P to
    P + token_bucket - 1 tokens: P * max_seqlen >= P + token_bucket - 1."""
    return max(1, math.ceil((token_bucket - 1) / (max_seqlen - 1)))


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def length_bound(max_seqlen: int, edges: Sequence[int]) -> int | None:
    """The smallest edge >= max_seqlen (at least 2: a padding sequence of bound 1 could
    never hold more than one token); None past the last edge."""
    for edge in edges:
        if max_seqlen <= edge:
            return max(edge, 2)
    return None


def select_shape(
    tokens: int, sequences: int, masked: int, max_seqlen: int, buckets: GraphBuckets
) -> GraphShape | None:
    """The shape a batch pads to; None when it fits no bucket (it then runs eagerly)."""
    if sequences != buckets.sequences or masked > buckets.max_masked:
        return None
    bound = length_bound(max_seqlen, buckets.length_edges)
    if bound is None or tokens > sequences * bound:
        return None
    pad_seqs = padding_sequences(bound, buckets.token_bucket)
    return GraphShape(
        tokens=round_up(tokens + pad_seqs, buckets.token_bucket),
        sequences=sequences + pad_seqs,
        masked=round_up(masked, buckets.masked_bucket),
        max_seqlen=bound,
    )


def batch_shape(batch, buckets: GraphBuckets) -> GraphShape | None:
    """select_shape of a PackedBatch (host shapes and max_seqlen: no device read)."""
    return select_shape(
        batch.num_tokens, batch.num_sequences, batch.num_masked, batch.max_seqlen, buckets
    )
