"""The fixed eval set: `count` samples picked evenly from the processed eval text.

REFERENCE 2: sample i of the eval set is sample int(i * N / count) of the N processed ones
(10,000 for MLPerf), written in the variable-length format.
"""

from __future__ import annotations

import os
from pathlib import Path

from data.prepare.disk import check_disk, content_bytes
from data.prepare.fixed import count_samples, load_samples
from data.sources.shards import DataError, write_samples

EVAL_SAMPLES = 10_000


def pick_indices(total: int, count: int = EVAL_SAMPLES) -> list[int]:
    if not 0 < count <= total:
        raise DataError(f"cannot pick {count} eval samples from {total}")
    return [int(i * total / count) for i in range(count)]


def pick_eval(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    count: int = EVAL_SAMPLES,
    max_seq_length: int = 512,
    max_predictions: int = 76,
    show_progress: bool = True,
) -> Path:
    """Read `src` (fixed or variable length), write the picked samples to `dst` atomically.

    Cheap next to the other steps, so a rerun redoes it (same bytes) rather than skipping it.
    """
    total = count_samples(src)
    check_disk(
        "pick-eval",
        content_bytes(src) * min(count, total) // max(total, 1),
        Path(dst).parent,
        f"{count} samples of the source's mean size",
        show_progress,
    )
    samples = load_samples(src, max_seq_length, max_predictions)
    try:
        picked = [samples[i] for i in pick_indices(len(samples), count)]
    except DataError as err:
        raise DataError(f"{src}: {err}") from None
    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    return write_samples(dst, picked)
