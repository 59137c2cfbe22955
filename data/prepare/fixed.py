"""The fixed-length (padded) HDF5 intermediate of REFERENCE 2, and reading either format.

    input_ids             int16 [N, L]  [CLS] A [SEP] B [SEP], zero padded
    input_mask            int8  [N, L]  1 on real tokens (a prefix of each row)
    segment_ids           int8  [N, L]
    masked_lm_positions   int16 [N, P]  zero padded (position 0 is [CLS], never masked)
    masked_lm_ids         int16 [N, P]
    next_sentence_labels  int8  [N]

L = max_seq_length (512), P = max_predictions_per_seq (76). Rows are written and read in chunks,
so memory beyond the samples themselves stays small.
"""

from __future__ import annotations

import os
from pathlib import Path
import h5py
import numpy as np

from bert.core.files import atomic_path
from data.sample import Sample
from data.prepare.instances import InstanceSet
from data.sources.shards import DataError, read_samples

FIXED_DTYPES = {
    "input_ids": np.dtype(np.int16),
    "input_mask": np.dtype(np.int8),
    "segment_ids": np.dtype(np.int8),
    "masked_lm_positions": np.dtype(np.int16),
    "masked_lm_ids": np.dtype(np.int16),
    "next_sentence_labels": np.dtype(np.int8),
}
CHUNK_ROWS = 16384


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------


def write_fixed(
    path: str | os.PathLike,
    instances: InstanceSet,
    max_seq_length: int,
    max_predictions: int,
    compression: str | None = "gzip",
) -> Path:
    """Write `instances` padded to (L, P), atomically. gzip keeps the ~half padding off disk.

    Rows go in slabs of CHUNK_ROWS, one h5py call per dataset and slab: the file's bytes
    depend on that pattern (HDF5 allocates chunks as they are flushed), so keep it.
    """
    if not len(instances):
        raise DataError(f"{path}: no instances to write (empty or unreadable text shard?)")
    n = len(instances)
    shapes = {name: (n, max_seq_length) for name in ("input_ids", "input_mask", "segment_ids")}
    shapes.update(
        masked_lm_positions=(n, max_predictions),
        masked_lm_ids=(n, max_predictions),
        next_sentence_labels=(n,),
    )
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        datasets = {
            name: f.create_dataset(name, shape=shapes[name], dtype=dtype, compression=compression)
            for name, dtype in FIXED_DTYPES.items()
        }
        for start in range(0, n, CHUNK_ROWS):
            stop = min(n, start + CHUNK_ROWS)
            rows = instances.padded(start, stop, max_seq_length, max_predictions)
            for name, values in rows.items():
                datasets[name][start:stop] = values
    return Path(path)


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------


def is_fixed(path: str | os.PathLike) -> bool:
    """True for the padded format (2-D input_ids), False for the variable-length one."""
    try:
        with h5py.File(path, "r") as f:
            if "input_ids" not in f:
                raise DataError(f"{path}: dataset input_ids is missing")
            return f["input_ids"].ndim == 2
    except OSError as err:
        raise DataError(f"{path}: cannot read as HDF5 ({err})") from None


def count_samples(path: str | os.PathLike) -> int:
    """Sample count of a file in either format, from the header only."""
    try:
        with h5py.File(path, "r") as f:
            return int(f["next_sentence_labels"].shape[0])
    except (OSError, KeyError) as err:
        raise DataError(f"{path}: cannot read next_sentence_labels ({err})") from None


def load_samples(
    path: str | os.PathLike, max_seq_length: int, max_predictions: int
) -> list[Sample]:
    """All samples of a file in either format, validated."""
    if is_fixed(path):
        return read_fixed(path, max_seq_length, max_predictions)
    return read_samples(path, max_seq_length, max_predictions)


def read_fixed(path: str | os.PathLike, max_seq_length: int, max_predictions: int) -> list[Sample]:
    """Samples of a fixed-length file, cut to their real lengths (copies, so the padded
    chunk is freed)."""
    path = Path(path)
    samples: list[Sample] = []
    with h5py.File(path, "r") as f:
        n = _check_fixed_layout(path, f, max_seq_length, max_predictions)
        for start in range(0, n, CHUNK_ROWS):
            chunk = {name: f[name][start : start + CHUNK_ROWS] for name in FIXED_DTYPES}
            samples += _chunk_to_samples(path, chunk, start)
    return samples


def _check_fixed_layout(path: Path, f: h5py.File, max_seq_length: int, max_predictions: int) -> int:
    """The sample count, after checking every dataset's dtype and shape."""
    for name, dtype in FIXED_DTYPES.items():
        if name not in f:
            raise DataError(
                f"{path}: dataset {name} is missing (fixed-length format needs "
                f"{', '.join(FIXED_DTYPES)})"
            )
        if not np.issubdtype(f[name].dtype, np.integer):
            raise DataError(f"{path}: dataset {name} has dtype {f[name].dtype}, expected {dtype}")
    n = f["next_sentence_labels"].shape[0]
    width, preds = f["input_ids"].shape[1], f["masked_lm_positions"].shape[1]
    expected = {
        "input_ids": (n, width),
        "input_mask": (n, width),
        "segment_ids": (n, width),
        "masked_lm_positions": (n, preds),
        "masked_lm_ids": (n, preds),
        "next_sentence_labels": (n,),
    }
    for name, shape in expected.items():
        if f[name].shape != shape:
            raise DataError(f"{path}: dataset {name} has shape {f[name].shape}, expected {shape}")
    if width > max_seq_length or preds > max_predictions:
        raise DataError(
            f"{path}: rows of {width} tokens / {preds} predictions exceed "
            f"max_seq_length={max_seq_length} / max_predictions={max_predictions}"
        )
    return n


def _chunk_to_samples(path: Path, chunk: dict[str, np.ndarray], offset: int) -> list[Sample]:
    lengths = _prefix_lengths(path, chunk["input_mask"] != 0, "input_mask", offset)
    if (lengths == 0).any():
        i = int(np.flatnonzero(lengths == 0)[0])
        raise DataError(f"{path}: sample {offset + i}: input_mask has no real token")
    counts = _prefix_lengths(path, chunk["masked_lm_positions"] != 0, "masked_lm_positions", offset)
    _check_positions(path, chunk["masked_lm_positions"], counts, lengths, offset)
    ids, seg = chunk["input_ids"], chunk["segment_ids"]
    pos, mids, labels = (
        chunk["masked_lm_positions"],
        chunk["masked_lm_ids"],
        chunk["next_sentence_labels"],
    )
    return [
        Sample(
            ids[i, :l].astype(np.int16),
            seg[i, :l].astype(np.int8),
            pos[i, :m].astype(np.int16),
            mids[i, :m].astype(np.int16),
            int(labels[i]),
        )
        for i, (l, m) in enumerate(zip(lengths.tolist(), counts.tolist()))
    ]


def _prefix_lengths(path: Path, valid: np.ndarray, name: str, offset: int) -> np.ndarray:
    """(n,) count of valid entries per row, checking they form a prefix of the row."""
    counts = valid.sum(axis=1)
    prefix = np.arange(valid.shape[1])[None, :] < counts[:, None]
    bad = np.flatnonzero((valid != prefix).any(axis=1))
    if bad.size:
        raise DataError(
            f"{path}: sample {offset + int(bad[0])}: {name} is not a prefix of "
            f"non-zero entries followed by zero padding"
        )
    return counts


def _check_positions(
    path: Path, positions: np.ndarray, counts: np.ndarray, lengths: np.ndarray, offset: int
) -> None:
    valid = np.arange(positions.shape[1])[None, :] < counts[:, None]
    outside = valid & ((positions < 0) | (positions >= lengths[:, None]))
    bad = np.flatnonzero(outside.any(axis=1))
    if bad.size:
        raise DataError(
            f"{path}: sample {offset + int(bad[0])}: masked_lm_positions holds a "
            f"position outside its sequence of length {lengths[bad[0]]}"
        )
