"""MLPerf variable-length HDF5 shards: discovery, validated reading, atomic writing.

File format (REFERENCE 2, "Variable-length HDF5"), one entry per sample in every dataset:

    input_ids            vlen int16   [CLS] A [SEP] B [SEP] with masked ids in place; its length
                                      is the sequence length (there is no input_mask)
    segment_ids          vlen int8    same length as input_ids
    masked_lm_positions  vlen int16   only the real masked positions, each in [0, len)
    masked_lm_ids        vlen int16   original ids at those positions
    next_sentence_labels int8 scalar  0: B follows A, 1: B is random

Every bad input raises one `DataError` whose message names the file, the dataset and the
offending value or sample, so a broken shard is found without a debugger. The per-rank
training stream over these files is data/sources/shard_stream.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import h5py
import numpy as np

from bert.core.errors import DataError  # noqa: F401 - re-exported for data/'s users
from bert.core.files import temp_name
from data.sample import Sample

# Base dtype of each dataset; all but the label are variable-length per sample.
VLEN_FIELDS = {
    "input_ids": np.dtype(np.int16),
    "segment_ids": np.dtype(np.int8),
    "masked_lm_positions": np.dtype(np.int16),
    "masked_lm_ids": np.dtype(np.int16),
}
LABEL_FIELD = "next_sentence_labels"
LABEL_DTYPE = np.dtype(np.int8)
ALL_FIELDS = (*VLEN_FIELDS, LABEL_FIELD)

SHARD_GLOB = "part_*.hdf5"


# --------------------------------------------------------------------------------------------
# Discovery
# --------------------------------------------------------------------------------------------


def list_shards(train_dir: str | os.PathLike) -> list[Path]:
    """Sorted `part_*.hdf5` files of `train_dir`; DataError if the folder is missing or empty."""
    folder = Path(train_dir)
    if folder.is_file():
        raise DataError(
            f"{folder}: data.train_dir is a file; it must be the folder that holds "
            f"the {SHARD_GLOB} training shards"
        )
    if not folder.is_dir():
        raise DataError(f"{folder}: training data folder (data.train_dir) does not exist")
    shards = sorted(p for p in folder.glob(SHARD_GLOB) if p.is_file())
    if not shards:
        raise DataError(f"{folder}: holds no {SHARD_GLOB} training shards")
    return shards


# --------------------------------------------------------------------------------------------
# Reading and validation
# --------------------------------------------------------------------------------------------


def read_samples(
    path: str | os.PathLike,
    max_seq_length: int,
    max_predictions: int,
    limit: int | None = None,
    vocab_size: int | None = None,
) -> list[Sample]:
    """All samples of one file (or its first `limit`), validated; with `vocab_size` (the
    model's), token ids and labels must lie below it (the embedding lookup would fail deep in
    the model otherwise, or read another row of a padded vocabulary silently).

    Returns Samples holding the arrays as stored: input_ids (l,) int16, segment_ids (l,) int8,
    masked_positions (m,) int16, masked_ids (m,) int16, nsp_label int. A `limit` larger than the
    file returns the whole file.
    """
    path = Path(path)
    if limit is not None and limit < 1:
        raise ValueError(f"read_samples: limit={limit} must be >= 1 or None")
    columns = _read_columns(path, limit)
    _validate_columns(path, columns, max_seq_length, max_predictions, vocab_size)
    return [
        Sample(ids, seg, pos, mids, int(label))
        for ids, seg, pos, mids, label in zip(
            columns["input_ids"],
            columns["segment_ids"],
            columns["masked_lm_positions"],
            columns["masked_lm_ids"],
            columns[LABEL_FIELD],
        )
    ]


def _read_columns(path: Path, limit: int | None) -> dict[str, np.ndarray]:
    """Each dataset as an array of length n: object arrays of 1-D arrays for vlen fields."""
    if not path.exists():
        raise DataError(f"{path}: file does not exist")
    try:
        with h5py.File(path, "r") as f:
            _check_layout(path, f)
            count = _common_count(path, f)
            if count == 0:
                raise DataError(f"{path}: file holds no samples")
            stop = count if limit is None else min(limit, count)
            return {name: f[name][:stop] for name in ALL_FIELDS}
    except DataError:
        raise
    except (OSError, KeyError, ValueError, TypeError, RuntimeError) as err:
        # h5py reports truncated or non-HDF5 files as OSError, damaged internals (a flipped
        # byte in a heap) as RuntimeError; keep its reason in the message.
        raise DataError(
            f"{path}: cannot read as HDF5 ({' '.join(str(err).split())[:200]})"
        ) from None


def _check_layout(path: Path, f: h5py.File) -> None:
    """Every dataset present with the exact (vlen) base dtype and one dimension."""
    for name, expected in VLEN_FIELDS.items():
        ds = _dataset(path, f, name)
        base = h5py.check_vlen_dtype(ds.dtype)
        if base is None or ds.ndim != 1:
            raise DataError(
                f"{path}: dataset {name} has dtype {ds.dtype} and shape {ds.shape}, expected a "
                f"1-D variable-length {expected} dataset; fixed-length (padded) files must be "
                f"converted to the variable-length format first"
            )
        if np.dtype(base) != expected:
            raise DataError(
                f"{path}: dataset {name} has dtype vlen {np.dtype(base)}, expected vlen {expected}"
            )
    labels = _dataset(path, f, LABEL_FIELD)
    if labels.dtype != LABEL_DTYPE or labels.ndim != 1:
        raise DataError(
            f"{path}: dataset {LABEL_FIELD} has dtype {labels.dtype} and shape "
            f"{labels.shape}, expected one {LABEL_DTYPE} scalar per sample"
        )


def _dataset(path: Path, f: h5py.File, name: str) -> h5py.Dataset:
    if name not in f:
        raise DataError(
            f"{path}: dataset {name} is missing (expected datasets: {', '.join(ALL_FIELDS)})"
        )
    node = f[name]
    if not isinstance(node, h5py.Dataset):
        raise DataError(f"{path}: {name} is not a dataset")
    return node


def _common_count(path: Path, f: h5py.File) -> int:
    """The sample count, which every dataset must share."""
    counts = {name: f[name].shape[0] for name in ALL_FIELDS}
    if len(set(counts.values())) != 1:
        listed = ", ".join(f"{name}={n}" for name, n in counts.items())
        raise DataError(f"{path}: datasets disagree on the sample count ({listed})")
    return counts["input_ids"]


def _lengths(column: np.ndarray) -> np.ndarray:
    """(n,) int64 lengths of an object array of 1-D arrays."""
    return np.fromiter(map(len, column), dtype=np.int64, count=len(column))


def _flat(column: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """All values of an object array of 1-D arrays back to back (empty-safe)."""
    parts = [a for a in column if len(a)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def _first_bad(bad: np.ndarray) -> int | None:
    hits = np.flatnonzero(bad)
    return int(hits[0]) if hits.size else None


def _validate_columns(
    path: Path,
    columns: dict[str, np.ndarray],
    max_seq_length: int,
    max_predictions: int,
    vocab_size: int | None = None,
) -> None:
    """Shape and value checks, vectorized over per-sample lengths and flattened values."""
    seq_lens = _lengths(columns["input_ids"])
    _check_seq_lengths(path, seq_lens, _lengths(columns["segment_ids"]), max_seq_length)
    mask_counts = _check_mask_counts(path, columns, max_predictions)
    _check_masked_positions(path, columns["masked_lm_positions"], seq_lens, mask_counts)
    _check_values(path, columns, seq_lens, mask_counts, vocab_size)


def _check_seq_lengths(
    path: Path, seq_lens: np.ndarray, seg_lens: np.ndarray, max_seq_length: int
) -> None:
    i = _first_bad((seq_lens < 1) | (seq_lens > max_seq_length))
    if i is not None:
        raise DataError(
            f"{path}: sample {i}: input_ids length {seq_lens[i]} is outside "
            f"[1, max_seq_length={max_seq_length}]"
        )
    i = _first_bad(seg_lens != seq_lens)
    if i is not None:
        raise DataError(
            f"{path}: sample {i}: segment_ids length {seg_lens[i]} differs from "
            f"input_ids length {seq_lens[i]}"
        )


def _check_mask_counts(
    path: Path, columns: dict[str, np.ndarray], max_predictions: int
) -> np.ndarray:
    """(n,) int64 masked-token count per sample, after checking both masked fields agree."""
    pos_counts = _lengths(columns["masked_lm_positions"])
    id_counts = _lengths(columns["masked_lm_ids"])
    i = _first_bad(pos_counts != id_counts)
    if i is not None:
        raise DataError(
            f"{path}: sample {i}: masked_lm_positions holds {pos_counts[i]} values "
            f"but masked_lm_ids holds {id_counts[i]}"
        )
    i = _first_bad(pos_counts > max_predictions)
    if i is not None:
        raise DataError(
            f"{path}: sample {i}: masked_lm_positions holds {pos_counts[i]} values, "
            f"more than max_predictions={max_predictions}"
        )
    return pos_counts


def _check_masked_positions(
    path: Path, positions: np.ndarray, seq_lens: np.ndarray, mask_counts: np.ndarray
) -> None:
    flat = _flat(positions, np.int16).astype(np.int64)
    len_of_value = np.repeat(seq_lens, mask_counts)
    j = _first_bad((flat < 0) | (flat >= len_of_value))
    if j is not None:
        i = _sample_of_value(mask_counts, j)
        raise DataError(
            f"{path}: sample {i}: masked_lm_positions value {flat[j]} is outside "
            f"its sequence of length {len_of_value[j]}"
        )
    _check_unique_positions(path, flat, mask_counts)


def _check_unique_positions(path: Path, flat: np.ndarray, mask_counts: np.ndarray) -> None:
    """A position masked twice would be scored twice (and its label gathered twice), which the
    loss and accuracy do not expect: refuse the shard rather than fail deep in a step."""
    sample_of = np.repeat(np.arange(len(mask_counts), dtype=np.int64), mask_counts)
    order = np.lexsort((flat, sample_of))  # by sample, then position: repeats end up adjacent
    key_sample, key_pos = sample_of[order], flat[order]
    repeat = (key_sample[1:] == key_sample[:-1]) & (key_pos[1:] == key_pos[:-1])
    j = _first_bad(repeat)
    if j is not None:
        raise DataError(
            f"{path}: sample {key_sample[j]}: masked_lm_positions holds position "
            f"{key_pos[j]} more than once"
        )


def _check_values(
    path: Path,
    columns: dict[str, np.ndarray],
    seq_lens: np.ndarray,
    mask_counts: np.ndarray,
    vocab_size: int | None = None,
) -> None:
    """Token ids in [0, vocab_size) (int16 wraps above 32767), segments and labels in
    {0, 1}."""
    for name, counts in (("input_ids", seq_lens), ("masked_lm_ids", mask_counts)):
        flat = _flat(columns[name], VLEN_FIELDS[name])
        j = _first_bad(flat < 0)
        if j is not None:
            raise DataError(
                f"{path}: sample {_sample_of_value(counts, j)}: {name} value "
                f"{flat[j]} is negative (not a token id)"
            )
        # the max first: one pass over the ids, the search only for a file that fails
        if vocab_size is not None and flat.size and flat.max() >= vocab_size:
            j = _first_bad(flat >= vocab_size)
            raise DataError(
                f"{path}: sample {_sample_of_value(counts, j)}: {name} value "
                f"{flat[j]} is not below model.vocab_size={vocab_size} (data made "
                f"with another vocabulary?)"
            )
    segments = _flat(columns["segment_ids"], np.int8)
    j = _first_bad((segments != 0) & (segments != 1))
    if j is not None:
        raise DataError(
            f"{path}: sample {_sample_of_value(seq_lens, j)}: segment_ids value "
            f"{segments[j]} is not 0 or 1"
        )
    labels = columns[LABEL_FIELD]
    i = _first_bad((labels != 0) & (labels != 1))
    if i is not None:
        raise DataError(f"{path}: sample {i}: {LABEL_FIELD} value {labels[i]} is not 0 or 1")


def _sample_of_value(counts: np.ndarray, flat_index: int) -> int:
    """Which sample owns value `flat_index` of the concatenation of per-sample arrays."""
    return int(np.searchsorted(np.cumsum(counts), flat_index, side="right"))


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------


def write_samples(path: str | os.PathLike, samples: Sequence[Sample]) -> Path:
    """Write `samples` in the variable-length format, atomically.

    The data goes to a hidden temporary file in the same folder, which is renamed over `path`
    only once complete: readers never see a half-written shard, and a killed writer leaves at
    most a hidden `.tmp` file behind. Values that do not fit the file dtypes (ids above 32767,
    say) raise DataError instead of wrapping around.
    """
    path = Path(path)
    if not samples:
        raise DataError(f"{path}: refusing to write a file with no samples")
    # A unique hidden name (not mkstemp, whose 0600 mode would survive the rename) that
    # h5py creates exclusively, so concurrent writers of the same path never share it.
    tmp_name = temp_name(path)
    try:
        with h5py.File(tmp_name, "x") as f:
            _write_columns(path, f, samples)
        os.replace(tmp_name, path)
    except BaseException:
        tmp_name.unlink(missing_ok=True)
        raise
    return path


def _write_columns(path: Path, f: h5py.File, samples: Sequence[Sample]) -> None:
    n = len(samples)
    for index, (name, base) in enumerate(VLEN_FIELDS.items()):
        column = np.empty(n, dtype=object)
        for i, sample in enumerate(samples):
            # Assign one by one: numpy would turn equal-length arrays into a 2-D array.
            column[i] = _cast_exactly(path, i, name, sample[index], base)
        # Passed as `data` at creation: h5py's slice assignment (`ds[:] = column`) fails when
        # all arrays have the same length.
        f.create_dataset(name, data=column, dtype=h5py.vlen_dtype(base))
    labels = np.fromiter((s.nsp_label for s in samples), dtype=np.int64, count=n)
    f.create_dataset(LABEL_FIELD, data=_cast_exactly(path, None, LABEL_FIELD, labels, LABEL_DTYPE))


def _cast_exactly(
    path: Path, sample_index: int | None, name: str, values, dtype: np.dtype
) -> np.ndarray:
    """`values` as a 1-D `dtype` array; DataError if the cast would change any value."""
    original = np.asarray(values)
    if original.dtype == dtype and original.ndim == 1:
        return original  # the common case (arrays as read or generated): nothing to check
    cast = original.astype(dtype)
    if cast.ndim != 1 or not np.array_equal(cast, original):
        where = "" if sample_index is None else f"sample {sample_index}: "
        bad = original[cast != original] if cast.shape == original.shape else original
        raise DataError(
            f"{path}: {where}{name} values {bad.ravel()[:3].tolist()} do not fit "
            f"a 1-D {dtype} dataset"
        )
    return cast


# --------------------------------------------------------------------------------------------
# Eval
# --------------------------------------------------------------------------------------------


def read_eval_samples(
    path: str | os.PathLike,
    rank: int,
    world_size: int,
    limit: int,
    max_seq_length: int,
    max_predictions: int,
    vocab_size: int | None = None,
) -> list[Sample]:
    """This rank's share (samples r::world_size) of the first `limit` eval samples (0 = all).

    A file with fewer than `limit` samples is an error: an eval on a silently smaller set would
    not be comparable with the target.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"read_eval_samples: rank {rank} is outside world_size {world_size}")
    if limit < 0:
        raise ValueError(f"read_eval_samples: limit={limit} must be >= 0 (0 = all)")
    samples = read_samples(
        path, max_seq_length, max_predictions, limit=limit or None, vocab_size=vocab_size
    )
    if limit and len(samples) < limit:
        raise DataError(
            f"{path}: eval file holds {len(samples)} samples, fewer than the {limit} asked for "
            f"(eval.samples: lower it, or 0 for the whole file)"
        )
    return samples[rank::world_size]
