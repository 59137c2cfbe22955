"""Audit trail of trained samples: `run_pretraining.py --record-samples DIR`.

Each rank writes DIR/rank<R>.txt with one line per sample it trains:

    <step> <shard file name> <index of the sample within that file>

`step` counts optimizer steps from 0. The file is flushed after every step, so a crashed run
leaves a complete record of the steps it handed to the model. A run resumed at step > 0
appends. Together the rank files answer "was every sample of the global batch trained exactly
once" (tests/integration/test_data_distributed.py checks exactly that).

A fresh run (no checkpoint.resume) refuses a DIR that already holds rank*.txt files, which it
would overwrite (check_record_dir, before the run starts); a resumed run appends to them.
While a run writes DIR it holds DIR/run.lock (bert/train/run_lock.py): a second run given the
same DIR is refused. A fresh run's rank file is created anew and a resumed run's opened without
following a symlink: a record is never written into a file this program did not make.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence, TextIO

import numpy as np

from bert.core.errors import ConfigError


def check_record_dir(folder: str | os.PathLike, resuming: bool) -> None:
    """Refuse a fresh run's --record-samples DIR holding an earlier run's rank files."""
    if not folder or resuming:
        return
    found = sorted(p.name for p in Path(folder).glob("rank*.txt"))
    if found:
        raise ConfigError(
            f"--record-samples {folder}: already holds {', '.join(found[:3])} "
            f"from an earlier run; a fresh run would overwrite them: choose an "
            f"empty folder, or resume that run"
        )


class SampleRecorder:
    def __init__(self, folder: str | os.PathLike, rank: int, shard_names: Sequence[str]):
        self.path = Path(folder) / f"rank{rank}.txt"
        self.shard_names = list(shard_names)
        self._file: TextIO | None = None

    def write(self, step: int, origin: np.ndarray) -> None:
        """Record one step's samples; origin (n, 2) int64 = (shard file index, sample index)."""
        if self._file is None:
            self._file = self._open(append=step > 0)
        self._file.writelines(f"{step} {self.shard_names[f]} {i}\n" for f, i in origin.tolist())
        self._file.flush()

    def _open(self, append: bool) -> TextIO:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_EXCL)
        try:
            return os.fdopen(os.open(self.path, flags, 0o644), "a" if append else "w")
        except OSError as err:
            raise ConfigError(
                f"--record-samples {self.path.parent}: cannot write {self.path.name} "
                f"({err.strerror or err}); a file this run did not make is left as it is"
            ) from None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_records(path: str | os.PathLike) -> list[tuple[int, str, int]]:
    """(step, shard name, index) of every line of a rank file."""
    rows = []
    for line in Path(path).read_text().splitlines():
        step, name, index = line.split()
        rows.append((int(step), name, int(index)))
    return rows
