"""Progress of a data-prep step on stderr: files done/total, samples, rate and ETA.

One line per finished file, or fewer when files finish faster than `min_interval` seconds apart
(the last file always gets its line). The ETA scales the elapsed time by the work left, where
work is what the step says a file costs (its text bytes, its samples), so uneven files do not
skew it. stdout is left to the steps' result lines.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


def duration(seconds: float) -> str:
    """12.3 s -> '12s', 4000 -> '1h06m'."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class Progress:
    """Counts finished files of one step and prints a line for each (see the module doc)."""

    def __init__(
        self,
        step: str,
        total_files: int,
        total_work: float | None = None,
        enabled: bool = True,
        stream: TextIO | None = None,
        min_interval: float = 0.0,
    ) -> None:
        self.step, self.total_files = step, total_files
        self.total_work = float(total_work if total_work is not None else total_files)
        self.enabled, self.stream, self.min_interval = enabled, stream, min_interval
        self.files = self.samples = 0
        self.work = 0.0
        self.start = self.last_print = time.monotonic()

    def done(self, samples: int = 0, work: float = 1.0, files: int = 1) -> None:
        """`files` finished, holding `samples`, worth `work` of the step's total."""
        self.files += files
        self.samples += samples
        self.work += work
        now = time.monotonic()
        if self.files == self.total_files or now - self.last_print >= self.min_interval:
            self.last_print = now
            self._print(now - self.start)

    def line(self, elapsed: float) -> str:
        rate = self.samples / elapsed if elapsed > 0 else 0.0
        left = self.total_work - self.work
        eta = elapsed * left / self.work if self.work > 0 else float("nan")
        eta_text = duration(eta) if eta == eta else "?"
        return (
            f"{self.step}: {self.files}/{self.total_files} files, {self.samples:,} samples, "
            f"{rate:,.0f} samples/s, {duration(elapsed)} elapsed, ETA {eta_text}"
        )

    def _print(self, elapsed: float) -> None:
        if self.enabled:
            print(self.line(elapsed), file=self.stream or sys.stderr, flush=True)
