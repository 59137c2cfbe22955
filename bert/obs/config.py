"""The profiler window's keys (`profile:`): which steps torch.profiler records, and where the
traces go (bert/obs/profiler.py)."""
from __future__ import annotations

import os
from dataclasses import dataclass

from bert.core.errors import check


@dataclass
class ProfileConfig:
    """A window of training steps under torch.profiler; off unless `steps` > 0."""

    start_step: int = 3  # first recorded optimizer step (1-based); the step before it warms up
    steps: int = 0  # steps recorded; 0: no profiler window
    dir: str = ""  # traces (one per rank, gzipped Chrome/Perfetto JSON); "": OUTPUT_DIR/profile
    memory_snapshot: bool = False  # CUDA: also dump a memory snapshot of the window per rank
    # NVTX ranges (data_wait, forward, backward, optimizer, exchange, eval) on every step, for
    # runs under nsys; costs a push and a pop per range
    nvtx: bool = False

    def __post_init__(self) -> None:
        self.dir = os.path.expanduser(self.dir)
        check(self.start_step >= 1, f"profile.start_step={self.start_step} must be >= 1")
        check(self.steps >= 0, f"profile.steps={self.steps} must be >= 0")
