"""What each `optim.name` means (`OPTIMIZERS`), without torch: the records the config checks
(bert/optim/config.py, the closed-division rule) and the GPU status reads. Each names its
functions by dotted path (bert/core/lazy.py); bert/optim/registry.py loads them when it builds
the optimizer. Adding an optimizer is an entry here: its torch.optim class for the replicated
path and/or its `ShardMath` (weight norms or not, its sums and update functions) for the
sharded path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from bert.core.benchmarks import KernelBench
from bert.core.lazy import Ref


@dataclass(frozen=True)
class ShardMath:
    """What the sharded path (ShardedOptimizer) runs for one optimizer."""

    # all-reduce |w|^2 per parameter with the gradient norm (LAMB's trust ratio needs it)
    weight_norms: bool
    sums: Ref  # shard_update.SumsFn: this rank's [|grad|^2, (|w_i|^2 ...)]
    update: Ref  # shard_update.UpdateFn: the moments and the update of one shard, in place
    # optim.fused_kernel: (sums, update) as CUDA kernels, and the kernels/ op they need
    fused: Optional[tuple[Ref, Ref]] = None
    fused_op: str = ""
    # the GPU window record that validated the fused kernels; None: not yet (bert/gpu_status.py)
    fused_gpu_validated: Optional[str] = None
    # the fused kernels' microbenchmark, which the GPU window runs
    fused_bench: Optional[KernelBench] = None


@dataclass(frozen=True)
class OptimizerSpec:
    """What one `optim.name` means: everything the replicated and sharded paths need of it."""

    # (param groups, optim config) -> the torch.optim.Optimizer every rank runs under DDP;
    # None: the name needs optim.sharded
    replicated: Optional[Ref]
    sharded: Optional[ShardMath]  # None: the name has no sharded path
    closed_division: bool  # allowed in MLPerf's closed division (REFERENCE 1: LAMB only)


def _update(name: str) -> str:
    """A function of bert/optim/shard_update.py, by dotted path."""
    return f"bert.optim.shard_update:{name}"


_REFERENCE_LAMB = (_update("reference_sums"), _update("reference_update"))
_FUSED_LAMB = (_update("fused_sums"), _update("fused_update"))
LAMB_OP = "lamb"  # kernels/lamb.py's OP (importing it loads torch); test_registries checks
# the window's compiled run: the sharded update of an 8-rank job, fp16 parameters
LAMB_BENCH = KernelBench("bench_lamb", compiled=("--world", "8", "--param-dtype", "fp16"))
OPTIMIZERS: dict[str, OptimizerSpec] = {
    "lamb": OptimizerSpec(
        replicated="bert.optim.registry:lamb_optimizer",
        closed_division=True,
        sharded=ShardMath(
            True,
            *_REFERENCE_LAMB,
            fused=_FUSED_LAMB,
            fused_op=LAMB_OP,
            # test_lamb_kernel.py 16 of 16 on an H200, and the learning proof's fused run
            # (2026-11-28b) trained with it (bert/model/fused.py's VALIDATED_ON_H200)
            fused_gpu_validated="benchmarks/results/gpu/2026-11-28_window",
            fused_bench=LAMB_BENCH,
        ),
    ),
    # AdamW: LAMB's update without the trust ratio (no weight norms), open division only
    "adam": OptimizerSpec(
        replicated=None,
        closed_division=False,
        sharded=ShardMath(
            False, *_REFERENCE_LAMB, fused=_FUSED_LAMB, fused_op=LAMB_OP, fused_bench=LAMB_BENCH
        ),
    ),
}
