"""The profiler window's keys (`profile:`): which steps torch.profiler records, and where the
traces go (bert/obs/profiler.py)."""

from __future__ import annotations

from bert.core.settings import ExpandedPath, F, section


@section("profile")
class ProfileConfig:
    """A window of training steps under torch.profiler; off unless `steps` > 0."""

    start_step: int = F(
        3, "first recorded optimizer step (1-based); the step before it warms up", ge=1
    )
    steps: int = F(0, "steps recorded; 0: no profiler window", ge=0)
    dir: ExpandedPath = F(
        "", 'traces (one per rank, gzipped Chrome/Perfetto JSON); "": OUTPUT_DIR/profile'
    )
    memory_snapshot: bool = F(False, "CUDA: also dump a memory snapshot of the window per rank")
    nvtx: bool = F(
        False,
        "NVTX ranges (data_wait, forward, backward, optimizer, exchange, eval) "
        "on every step, for runs under nsys; costs a push and a pop per range",
    )
