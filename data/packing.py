"""The one contract between the data pipeline and the model: packed (unpadded) batches.

Samples -> PackedBatch on the host with numpy (`pack_samples`), and back and forth between the
packed and the padded layout on the device (`pad_tokens`, `unpad_tokens`, `key_padding_mask`),
as flash-attention's bert_padding.py does. The model never sees padding. For a local batch of
B sequences with lengths l_i and T = sum(l_i) tokens, the host builds everything the GPU step
needs, so the step has no data-dependent shapes to discover and never reads the device:

    input_ids       (T,)   int64   token ids, sequences back to back
    segment_ids     (T,)   int64   0 for sentence A, 1 for sentence B
    position_ids    (T,)   int64   0..l_i-1 within each sequence
    token_index     (T,)   int64   index of each token in the padded [B, max_seqlen] layout
    cu_seqlens      (B+1,) int32   prefix sums of l_i (cu_seqlens[0] = 0)
    max_seqlen      int            max(l_i)
    masked_positions(M,)   int64   masked tokens, as indices into the packed token axis
    masked_labels   (M,)   int64   original ids of those tokens
    nsp_labels      (B,)   int64   0: B follows A, 1: B is random (Google/HF convention)

plus, only when the model's attention backend asks for them (`pack_samples(...,
attention_groups=True)`: grouped_flash, bert/model/attention.py), the length groups of grouped
attention (`AttentionGroups`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from data.sample import Sample


@dataclass
class AttentionGroups:
    """Host-made length groups of grouped attention; see `group_by_length`."""

    order: object  # (T,) int64
    inverse: object  # (T,) int64
    token_index: object  # (T,) int64
    cu_seqlens: object  # (B+G,) int32
    shapes: tuple  # ((B_g, T_g, S_g), ...) host ints


@dataclass
class QuerySubset:
    """Host-made layout of the tokens whose outputs the heads read ([CLS] and the masked tokens);
    see `query_subset`. The last encoder layer computes queries and outputs only for these."""

    index: object  # (Q,) int64 packed positions, sequence by sequence: [CLS], then masked
    cu_seqlens: object  # (B+1,) int32 queries per sequence, prefix sums
    token_index: object  # (Q,) int64 index of each query in the padded [B, max_seqlen] layout
    masked_rows: object  # (M,) int64 row of each masked token (masked_positions order)
    max_seqlen: int  # host int: the most queries of one sequence


@dataclass
class PackedBatch:
    """A local batch in packed form; fields are numpy arrays on the host or tensors on a device."""

    input_ids: object
    segment_ids: object
    position_ids: object
    token_index: object
    cu_seqlens: object
    masked_positions: object
    masked_labels: object
    nsp_labels: object
    max_seqlen: int
    # Length groups for grouped attention: only for the backend that reads them.
    groups: AttentionGroups | None = None
    # Queries of the last layer: only with model.last_layer_subset.
    query_subset: QuerySubset | None = None

    @property
    def num_sequences(self) -> int:
        return int(self.cu_seqlens.shape[0]) - 1

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def num_masked(self) -> int:
        return int(self.masked_positions.shape[0])

    def to(self, device, non_blocking: bool = False) -> "PackedBatch":
        """Tensors on `device` (numpy arrays are wrapped without a copy first)."""

        def move(value):
            if isinstance(value, np.ndarray):
                value = torch.from_numpy(value)
            return value.to(device, non_blocking=non_blocking) if torch.is_tensor(value) else value

        return _map_arrays(self, move)

    def pin_memory(self) -> "PackedBatch":
        """Same batch with every tensor in pinned host memory (for asynchronous H2D copies)."""
        return _map_arrays(self, lambda v: v.pin_memory() if torch.is_tensor(v) else v)

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor of the batch (its groups' included)."""
        found: list[torch.Tensor] = []
        _map_arrays(self, lambda v: found.append(v) if torch.is_tensor(v) else None)
        return found


def _map_arrays(batch, fn):
    """A copy of a PackedBatch (or its metadata records) with fn applied to each field's value."""
    values = {}
    for f in dataclasses.fields(batch):
        value = getattr(batch, f.name)
        nested = isinstance(value, (AttentionGroups, QuerySubset))
        values[f.name] = _map_arrays(value, fn) if nested else fn(value)
    return type(batch)(**values)


def pack_samples(
    samples: Sequence[Sample], attention_groups: bool = False, query_subset: bool = False
) -> PackedBatch:
    """Concatenate samples into one PackedBatch (vectorized; no per-token Python work).

    attention_groups: also build the length groups of grouped attention (`AttentionGroups`),
    for the attention backend that reads them. query_subset: also build the last layer's
    query layout (`QuerySubset`), for model.last_layer_subset.
    """
    if not samples:
        raise ValueError("pack_samples: empty batch")
    lengths = np.fromiter(
        (s.input_ids.shape[0] for s in samples), dtype=np.int64, count=len(samples)
    )
    cu_seqlens = np.zeros(len(samples) + 1, dtype=np.int64)
    np.cumsum(lengths, out=cu_seqlens[1:])
    total = int(cu_seqlens[-1])
    max_seqlen = int(lengths.max())
    starts = np.repeat(cu_seqlens[:-1], lengths)
    position_ids = np.arange(total, dtype=np.int64) - starts
    seq_of_token = np.repeat(np.arange(len(samples), dtype=np.int64), lengths)
    token_index = seq_of_token * max_seqlen + position_ids

    masked_counts = np.fromiter(
        (s.masked_positions.shape[0] for s in samples), dtype=np.int64, count=len(samples)
    )
    masked_offsets = np.repeat(cu_seqlens[:-1], masked_counts)
    masked_positions = np.concatenate([s.masked_positions for s in samples]).astype(np.int64)
    masked_positions += masked_offsets
    return PackedBatch(
        input_ids=np.concatenate([s.input_ids for s in samples]).astype(np.int64),
        segment_ids=np.concatenate([s.segment_ids for s in samples]).astype(np.int64),
        position_ids=position_ids,
        token_index=token_index,
        cu_seqlens=cu_seqlens.astype(np.int32),
        masked_positions=masked_positions,
        masked_labels=np.concatenate([s.masked_ids for s in samples]).astype(np.int64),
        nsp_labels=np.fromiter((s.nsp_label for s in samples), dtype=np.int64, count=len(samples)),
        max_seqlen=max_seqlen,
        groups=group_by_length(lengths, cu_seqlens) if attention_groups else None,
        query_subset=(
            subset_queries(cu_seqlens, masked_counts, masked_positions) if query_subset else None
        ),
    )


def subset_queries(
    cu_seqlens: np.ndarray, masked_counts: np.ndarray, masked_positions: np.ndarray
) -> QuerySubset:
    """The last layer's queries: per sequence its [CLS] (the pooler's input), then its masked
    tokens (the MLM head's), in batch order. Keys and values stay all tokens.

    cu_seqlens: (B+1,) int64; masked_counts: (B,) int64; masked_positions: (M,) int64 packed.
    """
    query_counts = masked_counts + 1
    cu_queries = np.zeros(len(query_counts) + 1, dtype=np.int64)
    np.cumsum(query_counts, out=cu_queries[1:])
    total = int(cu_queries[-1])
    is_cls = np.zeros(total, dtype=bool)
    is_cls[cu_queries[:-1]] = True
    masked_rows = np.flatnonzero(~is_cls)  # ascending: sequence by sequence, as masked_positions
    index = np.empty(total, dtype=np.int64)
    index[cu_queries[:-1]] = cu_seqlens[:-1]
    index[masked_rows] = masked_positions
    max_queries = int(query_counts.max())
    position = np.arange(total, dtype=np.int64) - np.repeat(cu_queries[:-1], query_counts)
    seq = np.repeat(np.arange(len(query_counts), dtype=np.int64), query_counts)
    return QuerySubset(
        index, cu_queries.astype(np.int32), seq * max_queries + position, masked_rows, max_queries
    )


# [Zeng] (IV-A-2): sequences grouped by length into (0, 128], (128, 256], (256, 384] and
# (384, ...), each group attended with its own kernel launch sized to the group's longest.
ATTENTION_GROUP_BOUNDS = (128, 256, 384)


def group_by_length(
    lengths: np.ndarray, cu_seqlens: np.ndarray, bounds: Sequence[int] = ATTENTION_GROUP_BOUNDS
) -> AttentionGroups:
    """Host metadata of grouped attention, so the device step never reads lengths back.

    lengths: (B,) int64; cu_seqlens: (B+1,) int64. Sequences keep their batch order within a
    group; only non-empty groups are listed. Returns:
        order       (T,)   int64  packed positions of the tokens, group after group
        inverse     (T,)   int64  position of each packed token in `order`
        token_index (T,)   int64  index of each group-ordered token in its group's padded
                                  [B_g, S_g] layout
        cu_seqlens  (B+G,) int32  each group's cu_seqlens (B_g + 1 entries), in turn
        shapes      ((B_g, T_g, S_g), ...) host ints: sequences, tokens, longest
    """
    group_of_seq = np.searchsorted(np.asarray(bounds), lengths, side="left")
    seq_order = np.argsort(group_of_seq, kind="stable")
    ordered = lengths[seq_order]
    ordered_starts = np.zeros(len(ordered) + 1, dtype=np.int64)
    np.cumsum(ordered, out=ordered_starts[1:])
    total = int(ordered_starts[-1])
    position = np.arange(total, dtype=np.int64) - np.repeat(ordered_starts[:-1], ordered)
    order = np.repeat(cu_seqlens[:-1][seq_order], ordered) + position
    inverse = np.empty_like(order)
    inverse[order] = np.arange(total, dtype=np.int64)

    seqs_per_group = np.bincount(group_of_seq, minlength=len(bounds) + 1)
    seq_in_group = np.empty(len(ordered), dtype=np.int64)
    longest = np.empty(len(ordered), dtype=np.int64)
    cu_parts, shapes, first = [], [], 0
    for count in seqs_per_group[seqs_per_group > 0].tolist():
        group = slice(first, first + count)
        seq_in_group[group] = np.arange(count)
        longest[group] = ordered[group].max()
        cu_parts.append(ordered_starts[first : first + count + 1] - ordered_starts[first])
        shapes.append((count, int(cu_parts[-1][-1]), int(longest[first])))
        first += count
    token_index = np.repeat(seq_in_group * longest, ordered) + position
    return AttentionGroups(
        order, inverse, token_index, np.concatenate(cu_parts).astype(np.int32), tuple(shapes)
    )


# ---- on the device: the padded layout [B, max_seqlen, ...] and back ---------------------------
# `token_index` (T,), made above, is the position of each packed token in the flattened padded
# layout, `seq * max_seqlen + pos`. Both directions are plain indexing ops, so autograd gives
# the adjoint (scatter <-> gather) for free.


def pad_tokens(
    x: torch.Tensor, token_index: torch.Tensor, batch: int, max_seqlen: int
) -> torch.Tensor:
    """x: (T, *rest) -> (batch, max_seqlen, *rest), zeros where there is no token."""
    rest = x.shape[1:]
    padded = x.new_zeros((batch * max_seqlen, *rest))
    padded = padded.index_copy(0, token_index, x)
    return padded.view(batch, max_seqlen, *rest)


def unpad_tokens(padded: torch.Tensor, token_index: torch.Tensor) -> torch.Tensor:
    """padded: (batch, max_seqlen, *rest) -> (T, *rest), the tokens named by token_index."""
    flat = padded.reshape(-1, *padded.shape[2:])
    return flat.index_select(0, token_index)


def key_padding_mask(cu_seqlens: torch.Tensor, max_seqlen: int) -> torch.Tensor:
    """(batch, max_seqlen) bool, True where a key position holds a real token.

    Built on the device from cu_seqlens; max_seqlen is a host int, so no sync is needed.
    """
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).unsqueeze(1)
    positions = torch.arange(max_seqlen, device=cu_seqlens.device).unsqueeze(0)
    return positions < lengths
