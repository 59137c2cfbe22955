"""One training sequence (`Sample`), as the shards store it: its own module, without torch, so
that data preparation (open-bert-prepare) and the readers of shards need no torch; the host
packs samples into a batch in data/packing.py."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Sample(NamedTuple):
    """One training sequence as stored in the MLPerf variable-length HDF5 format."""

    input_ids: np.ndarray  # (l,) int16 in the file; [CLS] A [SEP] B [SEP], masked ids in place
    segment_ids: np.ndarray  # (l,) int8
    masked_positions: np.ndarray  # (m,) int16, positions within the sequence
    masked_ids: np.ndarray  # (m,) int16, original token ids at those positions
    nsp_label: int
