"""Checks of the run's inputs that read no data: before the init phase, so a missing file fails
the run before anything is written or timed."""

from __future__ import annotations

import os
from pathlib import Path

from bert.config import Config
from data.sources.shards import DataError, list_shards


def preflight_data(cfg: Config) -> list[Path]:
    """Fail before init if the data is not where the config says (names only, no reads).
    An eval-only run needs no training shards."""
    files = [] if cfg.run.eval_only else list_shards(cfg.data.train_dir)
    eval_file = cfg.data.eval_file
    if not eval_file:
        raise DataError("data.eval_file is not set (the HDF5 eval set, 10,000 samples for MLPerf)")
    if os.path.isdir(eval_file):
        raise DataError(f"{eval_file}: data.eval_file is a folder; it must be the HDF5 eval file")
    if not os.path.isfile(eval_file):
        raise DataError(f"{eval_file}: data.eval_file does not exist")
    return files
