"""Fused LAMB step (kernels/lamb.py) vs the `_foreach` reference step on BERT-Large's parameters.

    python scripts/bench/bench_lamb.py [--world 1 8] [--param-dtype fp32 fp16]
    python scripts/bench/bench_lamb.py --device cpu --tiny --no-compile   # smoke run, no GPU

One rank's shard of BERT-Large's 336M parameters laid out as ShardedOptimizer lays them out
(--world 1: all of them; 8: rank 0's eighth), random state. Times one optimizer step on the
shard, collectives left out: the norms (`reference_sums` vs `fused_sums`) and the update with
the trust ratio (`reference_update` vs `fused_update`), for a loss-scaled, clipped step whose
lr, bias corrections and flags are device tensors. fp16/bf16 params add the 16-bit model copy.
The target: fused_ms <= torch_eager_ms / 3. `fused_gbps` counts the fused path's minimum
traffic (norms: read g, w; update: read g, m, v, w, write m, v, u; apply: read u, w, write w
and the model copy). Unless --no-compile, the reference step under torch.compile is timed too.
On the CPU the "fused" ops run their reference: a smoke run, not a measure.
"""

from __future__ import annotations

import argparse
import copy
import functools
import statistics
import time
from typing import Callable

import torch

from bert.optim import shard_update as ref
from bert.tools.kernel_bench import common
from bert.tools.kernel_bench.lamb_shards import bert_large_param_groups, random_shard
from kernels import lamb

DTYPES = {"fp32": torch.float32, **common.DTYPES}
DECAY = 0.01
LR, BETAS, EPS = 4.25e-4, (0.9, 0.999), 1e-6  # REFERENCE.md section 3 (A100)
# --tiny: a 2-layer, hidden-64 BERT-like parameter list (CPU smoke test of this script).
TINY_SHAPES = [
    (512, 64),
    (64,),
    (64,),
    (192, 64),
    (192,),
    (64, 64),
    (64,),
    (256, 64),
    (256,),
    (64, 256),
] * 2


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--world",
        type=int,
        nargs="+",
        default=[1, 8],
        help="ranks sharing the optimizer state; rank 0's shard is timed",
    )
    p.add_argument("--param-dtype", choices=sorted(DTYPES), nargs="+", default=["fp32", "fp16"])
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--tiny", action="store_true", help="tiny parameter list instead of BERT-Large")
    common.add_timing_args(p, 5, 50, "reference step", "bench_lamb")
    return p.parse_args()


def parameters(tiny: bool) -> tuple[list[torch.Size], list[int]]:
    """Shapes in optimizer order and the param group of each (0: decay, 1: no decay)."""
    if tiny:
        shapes = [torch.Size(s) for s in TINY_SHAPES]
        return shapes, [int(len(s) == 1) for s in shapes]
    groups = bert_large_param_groups(DECAY)
    return (
        [p.shape for g in groups for p in g["params"]],
        [i for i, g in enumerate(groups) for _ in g["params"]],
    )


def step_inputs(shard: ref.ShardBuffers) -> ref.StepInputs:
    """A loss-scaled (2^16), clipped (x 0.5), bias-corrected step 10, as the optimizer builds it."""
    device = shard.master.device
    t = torch.tensor(10.0, dtype=torch.float64, device=device)
    lr = torch.tensor(LR, device=device)  # the LR schedule's output is a device tensor
    return ref.StepInputs(
        torch.tensor(0.5 / 2**16, device=device),
        torch.tensor(True, device=device),
        1.0 - BETAS[0] ** t,
        1.0 - BETAS[1] ** t,
        [lr, lr],
        torch.zeros(shard.num_params, device=device),
        BETAS,
        EPS,
    )


def optimizer_step(
    sums_fn: ref.SumsFn, update_fn: ref.UpdateFn, shard: ref.ShardBuffers, inputs: ref.StepInputs
) -> None:
    """The shard's part of ShardedOptimizer.step() on one rank (no collectives)."""
    sums = sums_fn(shard, True)
    inputs.w_sq.copy_(sums[1:])  # what the all-reduce of the sums would hand the update
    update_fn(shard, inputs, lambda t: t)


def time_cpu_ms(fn: Callable[[], object], warmup: int, iters: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def fused_bytes_per_element(dtype: torch.dtype) -> int:
    grad = dtype.itemsize
    model = 0 if dtype == torch.float32 else dtype.itemsize
    return (grad + 4) + (grad + 12 + 12) + (8 + 4 + model)


def main() -> None:
    args = parse_args()
    if args.device == "cuda":
        common.require_cuda_and_kernels(lamb.OP)
    timer = common.time_ms if args.device == "cuda" else time_cpu_ms
    shapes, group_of = parameters(args.tiny)
    rows = []
    for dtype_name in args.param_dtype:
        dtype = DTYPES[dtype_name]
        for world in args.world:
            shard = random_shard(shapes, group_of, [DECAY, 0.0], world, 0, dtype, args.device)
            row = {
                "world": world,
                "rank": 0,
                "param_dtype": dtype_name,
                "elements": shard.master.numel(),
                "segments": shard.segments.shape[0],
            }
            impls = {
                "torch_eager": (ref.reference_sums, ref.reference_update),
                "fused": (ref.fused_sums, ref.fused_update),
            }
            if not args.no_compile:  # the same reference, fused by inductor instead
                impls["torch_compile"] = (
                    torch.compile(ref.reference_sums),
                    torch.compile(ref.reference_update),
                )
            for name, fns in impls.items():
                mine = copy.deepcopy(shard)
                step = functools.partial(optimizer_step, *fns, mine, step_inputs(mine))
                try:
                    row[f"{name}_ms"] = timer(step, args.warmup, args.iters)
                except Exception as err:  # noqa: BLE001 - a compile failure is a result too
                    if name != "torch_compile":
                        raise
                    row["torch_compile_error"] = str(err).strip().splitlines()[-1][:300]
                del mine, step
            row["fused_gbps"] = (
                fused_bytes_per_element(dtype) * row["elements"] / row["fused_ms"] / 1e6
            )
            row["target_met"] = row["fused_ms"] <= row["torch_eager_ms"] / 3
            common.report(row)
            rows.append(row)
            del shard
    print(f"wrote {common.write('bench_lamb', args.out, rows)}")
