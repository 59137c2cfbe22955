"""The disk a data-prep step will write, checked against the output filesystem before it starts.

How each step's bytes are estimated (figures measured by scripts/bench/measure_prepare_sizes.py
on bench_prepare.py's stand-in text, MLPerf parameters:
benchmarks/results/prepare_sizes_stand_in.json):

    examples   fixed-length gzip HDF5: FIXED_PER_TEXT_BYTE bytes per byte of text at
               dupe_factor 10, in proportion to dupe_factor (each dupe is one more pass)
    to-varlen  variable-length HDF5: each sample's real tokens and predictions (the mean of an
               input's first SAMPLE_ROWS rows, times its samples) plus HDF5's per-sample cost;
               a variable-length input counts its file size
    reshard    twice that: pass 1's pieces stay until pass 2 has written every shard
    pick-eval  count samples of the eval source's mean size
    all        the above from the text sizes (VARLEN_PER_TEXT_BYTE for the variable-length
               bytes, before the examples exist to be measured); each step checks again
               with its real inputs when it starts

A step refuses (DiskSpaceError, so `error:` and exit status 2) when the estimate plus MARGIN
does not fit in the free space of the output folder's filesystem, before it writes anything.
Tests fake the free space with the environment variable BERT_PREPARE_FREE_BYTES (bytes).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Sequence

import h5py
import numpy as np

from data.sources.shards import DataError

FREE_BYTES_ENV = "BERT_PREPARE_FREE_BYTES"
FIXED_PER_TEXT_BYTE = 7.7  # gzip fixed-length HDF5 at dupe_factor 10 (7.66 measured)
VARLEN_PER_TEXT_BYTE = 17.5  # variable-length HDF5 at dupe_factor 10 (17.41 measured)
MEASURED_DUPE_FACTOR = 10
SAMPLE_ROWS = 4096  # rows of a fixed-length input read to measure its mean sample size
MARGIN = 0.05  # on top of the estimate, plus MARGIN_BYTES (filesystem metadata, logs)
MARGIN_BYTES = 64 << 20
# A variable-length field costs HDF5 a 16-byte heap id in the dataset and a 16-byte header in
# the global heap, its data padded to 8 bytes (full-length 512/76 sample: 1969 predicted,
# 1973.7 measured with the file's own overhead).
VLEN_FIELD_OVERHEAD = 32


class DiskSpaceError(DataError):
    """The output filesystem lacks the space a step needs."""


def _pad8(nbytes: np.ndarray | int):
    return (nbytes + 7) // 8 * 8


def varlen_sample_bytes(tokens, predictions):
    """Bytes of variable-length samples with these real token and prediction counts (arrays
    or ints): input_ids int16, segment_ids int8, two int16 prediction fields, an int8 label."""
    return (
        4 * VLEN_FIELD_OVERHEAD + _pad8(2 * tokens) + _pad8(tokens) + 2 * _pad8(2 * predictions) + 1
    )


def content_bytes(path: str | os.PathLike) -> int:
    """Variable-length bytes of a file's samples: measured for fixed-length input, the file's
    size for a variable-length one."""
    try:
        with h5py.File(path, "r") as f:
            if f["input_ids"].ndim != 2:
                return Path(path).stat().st_size
            count = f["next_sentence_labels"].shape[0]
            mask = f["input_mask"][:SAMPLE_ROWS] != 0
            preds = f["masked_lm_positions"][:SAMPLE_ROWS] != 0
    except (OSError, KeyError) as err:
        raise DataError(f"{path}: cannot read as HDF5 ({err})") from None
    if not len(mask):
        return 0
    sizes = varlen_sample_bytes(mask.sum(axis=1), preds.sum(axis=1))
    return int(np.ceil(float(sizes.mean()) * count))


def text_estimate(text_bytes: int, dupe_factor: int) -> tuple[int, int]:
    """(fixed-length bytes, variable-length bytes) made from `text_bytes` of text."""
    scale = text_bytes * dupe_factor / MEASURED_DUPE_FACTOR
    return int(scale * FIXED_PER_TEXT_BYTE), int(scale * VARLEN_PER_TEXT_BYTE)


def total_size(paths: Sequence[str | os.PathLike]) -> int:
    return sum(Path(p).stat().st_size for p in paths)


def free_bytes(folder: str | os.PathLike) -> int:
    """Free bytes on the filesystem that holds (or will hold) `folder`."""
    fake = os.environ.get(FREE_BYTES_ENV)
    if fake:
        return int(fake)
    path = Path(folder).resolve()
    while not path.exists():  # the folder is made later: ask its nearest existing parent
        path = path.parent
    return shutil.disk_usage(path).free


def human(nbytes: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(nbytes) < 1000:
            return f"{nbytes:.1f} {unit}" if unit != "B" else f"{int(nbytes)} B"
        nbytes /= 1000
    return f"{nbytes:.1f} TB"


def check_disk(
    step: str, needed: int, folder: str | os.PathLike, how: str, show: bool = True
) -> None:
    """Say what `step` will write; raise DiskSpaceError if it does not fit (see module doc)."""
    free = free_bytes(folder)
    if show:
        print(
            f"{step}: will write about {human(needed)} under {folder} ({how}); {human(free)} free",
            file=sys.stderr,
            flush=True,
        )
    if needed * (1 + MARGIN) + MARGIN_BYTES > free:
        raise DiskSpaceError(
            f"{step}: needs about {human(needed)} plus a "
            f"{MARGIN:.0%} + {human(MARGIN_BYTES)} margin under {folder} "
            f"({how}), but its filesystem has {human(free)} free"
        )
