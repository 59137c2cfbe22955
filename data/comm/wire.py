"""Flat encoding of a local batch for the host all-gather, and the gathered global batch.

A rank's raw local batch of B samples travels as two arrays, so the exchange is two plain
all-gathers of numeric buffers (no pickling on the step path):

    meta     (B, 5) int64  per sample: length l, masked count m, NSP label, and its origin
                           (index of its shard file, index within that file)
    payload  (P,)   int16  all input_ids, then all segment_ids, then all masked positions, then
                           all masked ids of the B samples: P = 2 * sum(l) + 2 * sum(m)

`meta` has the same size on every rank, so it goes first and tells each rank how large every
payload is; the payload all-gather then needs no size exchange of its own.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from data.sample import Sample

META_WIDTH = 5  # length, num_masked, nsp, file, index


def encode(samples: Sequence[Sample], origin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(meta (B, 5) int64, payload (P,) int16) of B samples with origin (B, 2) int64."""
    n = len(samples)
    meta = np.empty((n, META_WIDTH), dtype=np.int64)
    meta[:, 0] = [s.input_ids.shape[0] for s in samples]
    meta[:, 1] = [s.masked_positions.shape[0] for s in samples]
    meta[:, 2] = [s.nsp_label for s in samples]
    meta[:, 3:] = origin
    # One concatenate casts everything to int16 (segment ids are 0/1, positions < 32768).
    payload = np.concatenate(
        [s.input_ids for s in samples]
        + [s.segment_ids for s in samples]
        + [s.masked_positions for s in samples]
        + [s.masked_ids for s in samples]
    ).astype(np.int16, copy=False)
    return meta, payload


def payload_size(meta: np.ndarray) -> int:
    """Number of int16 values in the payload described by meta (B, 5)."""
    return int(2 * meta[:, 0].sum() + 2 * meta[:, 1].sum())


class GlobalBatch:
    """The all-gathered batch of W ranks x B samples, row i = rank i // B's sample i % B.

    Rows are decoded lazily: `samples(rows)` builds Sample views into the payload only for the
    rows this rank trains. Their segment_ids are int16 views (values 0/1), not int8.
    """

    def __init__(self, metas: Sequence[np.ndarray], payloads: Sequence[np.ndarray]):
        meta = np.concatenate(metas)  # (N, 5)
        self.lengths = meta[:, 0]  # (N,)
        self.num_masked = meta[:, 1]  # (N,)
        self.nsp = meta[:, 2]  # (N,)
        self.origin = meta[:, 3:]  # (N, 2)
        self.payload = np.concatenate(payloads)
        self._offsets(np.array([len(m) for m in metas]), np.array([len(p) for p in payloads]))

    def __len__(self) -> int:
        return self.lengths.shape[0]

    def _offsets(self, rows_per_rank: np.ndarray, payload_sizes: np.ndarray) -> None:
        """Start of each row's four fields in the concatenated payload, (N,) each."""
        rank_of_row = np.repeat(np.arange(len(rows_per_rank)), rows_per_rank)
        first_row = np.concatenate([[0], np.cumsum(rows_per_rank)[:-1]])
        base = np.concatenate([[0], np.cumsum(payload_sizes)[:-1]])[rank_of_row]
        tokens = np.add.reduceat(self.lengths, first_row) if len(self) else np.zeros(0, int)
        masked = np.add.reduceat(self.num_masked, first_row) if len(self) else np.zeros(0, int)
        tok_before = _exclusive_cumsum_within(self.lengths, first_row, rank_of_row)
        mask_before = _exclusive_cumsum_within(self.num_masked, first_row, rank_of_row)
        self.ids_at = base + tok_before
        self.seg_at = self.ids_at + tokens[rank_of_row]
        self.pos_at = base + 2 * tokens[rank_of_row] + mask_before
        self.mids_at = self.pos_at + masked[rank_of_row]

    def samples(self, rows: Sequence[int]) -> list[Sample]:
        """Samples of the given rows (views into the payload, no copy)."""
        p = self.payload
        out = []
        for i in np.asarray(rows).tolist():
            n, m = int(self.lengths[i]), int(self.num_masked[i])
            ids, seg = int(self.ids_at[i]), int(self.seg_at[i])
            pos, mids = int(self.pos_at[i]), int(self.mids_at[i])
            out.append(
                Sample(
                    p[ids : ids + n],
                    p[seg : seg + n],
                    p[pos : pos + m],
                    p[mids : mids + m],
                    int(self.nsp[i]),
                )
            )
        return out


def _exclusive_cumsum_within(
    values: np.ndarray, first_row: np.ndarray, rank_of_row: np.ndarray
) -> np.ndarray:
    """For each row, the sum of `values` over the earlier rows of the same rank, (N,)."""
    total = np.cumsum(values) - values
    return total - total[first_row][rank_of_row]
