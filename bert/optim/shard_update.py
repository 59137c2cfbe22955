"""This rank's shard of the sharded optimizer's state, and the math of one step on it.

A step on one dtype shard has three stages; the fused kernels of kernels/lamb.py ([Zeng],
IV-C-2) do each in one or two launches over the flat buffers, with only the segment table
(`ShardBuffers.segments`) as metadata:
1. sums: |grad|^2 over the shard and |w|^2 per parameter, all-reduced with the other shards'
   by the optimizer before anything else;
2. direction: moments and the update direction u = m_hat / (sqrt(v_hat) + eps) + wd * w, and
   |u|^2 per parameter;
3. apply: w -= lr * trust ratio * u after the |u|^2 all-reduce.
Two implementations of the pair (sums, update) with one signature, picked by `optim.fused_kernel`:
`reference_sums`/`reference_update` compose the kernels' tensor-level twin (kernels/
reference_lamb.py, `_foreach` ops: the CPU path and the test oracle); `fused_sums`/
`fused_update` call the custom ops of kernels/lamb.py (not yet GPU-validated).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import Tensor

import kernels.lamb  # noqa: F401 - registers torch.ops.bert_kernels.lamb_*
from bert.optim.flat import FlatLayout, FlatParams, Segment
from kernels.reference_lamb import (
    LR,
    GroupSegments,
    apply_update,
    local_sums,
    make_groups,
    sum_squares,
    trust_ratios,
    update_direction,
)


@dataclass
class ShardBuffers:
    """Optimizer state of one dtype on this rank; every flat tensor is (S,), S = shard size.

    Padding (shard elements in no segment) is zero in every buffer and stays zero.
    """

    master: Tensor  # fp32 master weights
    exp_avg: Tensor  # fp32 first moment
    exp_avg_sq: Tensor  # fp32 second moment
    update: Tensor  # fp32 scratch: the update direction
    grad: Tensor  # reduced, averaged gradient, param dtype, still multiplied by the loss scale
    groups: list[GroupSegments]  # one per param group, possibly with no pieces
    num_params: int  # all parameters of the optimizer (length of per-parameter vectors)
    # (k, 4) int64 on the device, one `SegmentRow` per piece, sorted by start: the same pieces
    # as `groups`, as the fused kernels read them (the shard is contiguous: offsets suffice).
    segments: Tensor
    # (S,) param dtype for 16-bit params: the updated master weights rounded, written by the
    # update and all-gathered into the model. None for fp32 params (master itself is gathered).
    model: Optional[Tensor] = None

    @property
    def decays(self) -> list[float]:
        return [group.weight_decay for group in self.groups]


@dataclass
class StepInputs:
    """Per-step values for the shard update; all device tensors, never read on the host."""

    coef: Tensor  # () fp32: multiplies the reduced gradient (1 / loss scale x clip factor)
    ok: Optional[Tensor]  # () bool: False skips the update (fp16 overflow); None: no loss scaler
    bc1: Tensor  # () fp64: 1 - beta1^t
    bc2: Tensor  # () fp64: 1 - beta2^t
    lrs: list[LR]  # one per param group
    w_sq: Optional[Tensor]  # (n_params,) fp32 |w|^2 over all ranks; None: no trust ratio (Adam)
    betas: tuple[float, float]
    eps: float


ReduceFn = Callable[[Tensor], Tensor]  # sums an (n,) fp32 vector over the shard group
# (shard, trust_ratio) -> this rank's sums, see `reference_sums`.
SumsFn = Callable[[ShardBuffers, bool], Tensor]
# (shard, inputs, reduce_sums) -> None: stages 2 and 3 in place.
UpdateFn = Callable[[ShardBuffers, StepInputs, ReduceFn], None]


# ---- reference: the `_foreach` composition ---------------------------------------------------
def reference_sums(shard: ShardBuffers, trust_ratio: bool) -> Tensor:
    """(1 + n,) fp32: this rank's [|grad|^2, |w_i|^2 per parameter]; (1,) without trust ratio.

    |grad| is still multiplied by the loss scale. |w_i|^2 is 0 for parameters without weight
    decay (they get no trust ratio).
    """
    return local_sums(shard.grad, shard.groups, shard.num_params, trust_ratio)


def reference_update(shard: ShardBuffers, inputs: StepInputs, reduce_sums: ReduceFn) -> None:
    """LAMB (AdamW when `inputs.w_sq` is None) on one shard, in place; `_foreach` reference math.

    Same operation order as `LAMB`, so the single-process results agree to rounding. Calls
    `reduce_sums` exactly once when the trust ratio is on (every rank must).
    """
    update_direction(
        shard.grad,
        shard.exp_avg,
        shard.exp_avg_sq,
        shard.update,
        shard.groups,
        inputs.coef,
        inputs.ok,
        inputs.bc1,
        inputs.bc2,
        inputs.betas,
        inputs.eps,
    )
    ratio = None
    if inputs.w_sq is not None:
        u_sq = reduce_sums(
            sum_squares(shard.groups, "update", shard.num_params, shard.master.device)
        )
        ratio = trust_ratios(inputs.w_sq, u_sq)
    apply_update(shard.groups, inputs.lrs, inputs.ok, ratio)
    if shard.model is not None:
        shard.model.copy_(shard.master)


# ---- fused: the custom ops of kernels/lamb.py (optim.fused_kernel) ----------------------------
def fused_sums(shard: ShardBuffers, trust_ratio: bool) -> Tensor:
    """`reference_sums` through `lamb_sums`: (1 + n,) fp32, or (1,) without trust ratio."""
    sums = torch.zeros(1 + shard.num_params, dtype=torch.float32, device=shard.master.device)
    # Without trust ratio (Adam) no |w|^2 is needed: all-zero decays make the kernel skip it.
    decays = shard.decays if trust_ratio else [0.0] * len(shard.groups)
    torch.ops.bert_kernels.lamb_sums(shard.grad, shard.master, shard.segments, decays, sums)
    return sums if trust_ratio else sums[:1]


def fused_update(shard: ShardBuffers, inputs: StepInputs, reduce_sums: ReduceFn) -> None:
    """`reference_update` through `lamb_update` and `lamb_apply` (same signature)."""
    decays, device = shard.decays, shard.master.device
    u_sq = None
    if inputs.w_sq is not None:
        u_sq = torch.zeros(shard.num_params, dtype=torch.float32, device=device)
    beta1, beta2 = inputs.betas
    torch.ops.bert_kernels.lamb_update(
        shard.grad,
        shard.master,
        shard.exp_avg,
        shard.exp_avg_sq,
        shard.update,
        shard.segments,
        decays,
        inputs.coef,
        inputs.ok,
        inputs.bc1,
        inputs.bc2,
        beta1,
        beta2,
        inputs.eps,
        u_sq,
    )
    if u_sq is not None:
        u_sq = reduce_sums(u_sq)
    torch.ops.bert_kernels.lamb_apply(
        shard.master,
        shard.update,
        shard.segments,
        decays,
        _lr_vector(inputs.lrs, device),
        inputs.ok,
        inputs.w_sq,
        u_sq,
        shard.model,
    )


def _lr_vector(lrs: list[LR], device: torch.device) -> Tensor:
    """(groups,) fp32 on the device from floats and 0-dim tensors, without a host sync."""
    return torch.stack(
        [
            lr.to(device, torch.float32).reshape(())
            if isinstance(lr, Tensor)
            else torch.full((), lr, dtype=torch.float32, device=device)
            for lr in lrs
        ]
    )


# ---- building a shard -------------------------------------------------------------------------
def new_shard(
    layout: FlatLayout,
    dtype: torch.dtype,
    segments: list[Segment],
    group_of: list[int],
    decays: list[float],
    device: torch.device,
    grad: Optional[Tensor] = None,
) -> ShardBuffers:
    """Zeroed buffers of one rank's `dtype` shard (its `segments` of `layout`).

    group_of: param group of each parameter; grad: the (S,) gradient buffer to use (default: a
    new zero one).
    """
    size = layout.shard_numel[dtype]
    master = torch.zeros(size, dtype=torch.float32, device=device)
    if grad is None:
        grad = torch.zeros(size, dtype=dtype, device=device)
    rows = sorted((s.shard_start, s.length, s.index, group_of[s.index]) for s in segments)
    update = torch.zeros_like(master)
    return ShardBuffers(
        master,
        torch.zeros_like(master),
        torch.zeros_like(master),
        update,
        grad,
        make_groups(rows, decays, master, update),
        len(group_of),
        torch.tensor(rows, dtype=torch.int64, device=device).reshape(-1, 4),
        None if dtype == torch.float32 else torch.zeros(size, dtype=dtype, device=device),
    )


def build_shard(
    layout: FlatLayout,
    flat: FlatParams,
    dtype: torch.dtype,
    segments: list[Segment],
    group_of: list[int],
    decays: list[float],
    rank: int,
    grad_alias: bool,
) -> ShardBuffers:
    """This rank's buffers for `dtype`, master weights copied from the flat parameters."""
    # One rank owns whole buckets: the flat gradient buffer is already its shard.
    shard = new_shard(
        layout,
        dtype,
        segments,
        group_of,
        decays,
        flat.params[dtype].device,
        flat.grads[dtype] if grad_alias else None,
    )
    for bucket in layout.buckets:
        if bucket.dtype == dtype:
            lo = bucket.chunk_start(rank)
            shard.master[bucket.shard_start : bucket.shard_start + bucket.chunk] = flat.params[
                dtype
            ][lo : lo + bucket.chunk]
    return shard
