"""How a kernel's record names its microbenchmark (bert/model/fused.py's FusedOp,
bert/optim/specs.py's ShardMath): the GPU window (bert/tools/gpu/validate.py) runs every one a
record names, so a new kernel's benchmark is its own file plus a field of its record.

    KernelBench("bench_dense", compiled=("--tokens", "16384"))
"""

from __future__ import annotations

from typing import NamedTuple, Optional


class KernelBench(NamedTuple):
    script: str  # scripts/bench/<script>.py (bert/tools/kernel_bench/<op>.py behind it)
    # the window's torch.compile run of it (its arguments, sized to the window's time); None:
    # the eager run only
    compiled: Optional[tuple[str, ...]] = None
