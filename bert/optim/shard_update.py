"""This rank's shard of the sharded optimizer's state, and the math of one step on it.

A step on one dtype shard has three stages; the fused kernels of kernels/lamb.py (seed 000,
IV-C-2) do each in one or two launches over the flat buffers, with only the segment table
(`ShardBuffers.segments`) as metadata:
1. sums: |grad|^2 over the shard and |w|^2 per parameter (`reference_sums`), all-reduced with
   the other shards' by the optimizer before anything else;
2. direction: moments and the update direction u = m_hat / (sqrt(v_hat) + eps) + wd * w, and
   |u|^2 per parameter (`update_direction`, `sum_squares`);
3. apply: w -= lr * trust ratio * u after the |u|^2 all-reduce (`apply_update`).
The functions here are the `_foreach` reference path: the CPU path, the test oracle, and the
CPU implementation of the fused custom ops. `DistributedFusedLAMB(fused_sums_fn=...,
fused_update_fn=...)` takes the fused pair (`optim.fused_kernel`, not yet GPU-validated).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union

import torch
from torch import Tensor

from bert.optim.flat import FlatLayout, FlatParams, Segment

LR = Union[float, Tensor]
# One piece of a parameter in a shard: (shard start, length, parameter index, param group).
SegmentRow = tuple[int, int, int, int]


@dataclass
class GroupSegments:
    """This rank's pieces of one param group's parameters inside one dtype shard (k pieces)."""

    weight_decay: float
    index: Tensor  # (k,) int64 on the device: parameter index of each piece
    master: list[Tensor]  # k views into ShardBuffers.master
    update: list[Tensor]  # k views into ShardBuffers.update (empty where only norms are needed)


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


def reference_sums(shard: ShardBuffers, trust_ratio: bool) -> Tensor:
    """(1 + n,) fp32: this rank's [|grad|^2, |w_i|^2 per parameter]; (1,) without trust ratio.

    |grad| is still multiplied by the loss scale. |w_i|^2 is 0 for parameters without weight
    decay (they get no trust ratio).
    """
    return local_sums(shard.grad, shard.groups, shard.num_params, trust_ratio)


def local_sums(grad: Tensor, groups: list[GroupSegments], n: int, trust_ratio: bool) -> Tensor:
    grad_sq = torch.linalg.vector_norm(grad, dtype=torch.float32).square().reshape(1)
    if not trust_ratio:
        return grad_sq
    return torch.cat([grad_sq, sum_squares(groups, "master", n, grad.device)])


def reference_update(shard: ShardBuffers, inputs: StepInputs, reduce_sums: ReduceFn) -> None:
    """LAMB (AdamW when `inputs.w_sq` is None) on one shard, in place; `_foreach` reference math.

    Same operation order as `LAMB`, so the single-process results agree to rounding. Calls
    `reduce_sums` exactly once when the trust ratio is on (every rank must).
    """
    update_direction(shard.grad, shard.exp_avg, shard.exp_avg_sq, shard.update, shard.groups,
                     inputs)
    ratio = None
    if inputs.w_sq is not None:
        u_sq = reduce_sums(sum_squares(shard.groups, "update", shard.num_params,
                                       shard.master.device))
        ratio = trust_ratios(inputs.w_sq, u_sq)
    apply_update(shard.groups, inputs.lrs, inputs.ok, ratio)
    if shard.model is not None:
        shard.model.copy_(shard.master)


def update_direction(grad: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, update: Tensor,
                     groups: list[GroupSegments], inputs: StepInputs) -> None:
    """Moments, then update = m_hat / (sqrt(v_hat) + eps) (+ wd * w in decay groups).

    Flat (S,) buffers; uses inputs' coef, ok, bc1, bc2, betas and eps (not lrs nor w_sq).
    """
    beta1, beta2 = inputs.betas
    g = grad.float() * inputs.coef
    keep1, keep2 = beta1, beta2
    if inputs.ok is not None:
        # A skipped step keeps the moments bit-identical: zero gradient and beta = 1.
        g.masked_fill_(~inputs.ok, 0.0)
        keep1, keep2 = (torch.where(inputs.ok, b, 1.0) for b in (beta1, beta2))
    exp_avg.mul_(keep1).add_(g, alpha=1.0 - beta1)
    exp_avg_sq.mul_(keep2).addcmul_(g, g, value=1.0 - beta2)
    del g
    denom = torch.div(exp_avg_sq, inputs.bc2).sqrt_().add_(inputs.eps)
    torch.div(exp_avg, inputs.bc1, out=update).div_(denom)
    del denom
    for group in groups:
        if group.weight_decay != 0.0 and group.update:
            torch._foreach_add_(group.update, group.master, alpha=group.weight_decay)


def apply_update(groups: list[GroupSegments], lrs: Sequence[LR], ok: Optional[Tensor],
                 ratio: Optional[Tensor]) -> None:
    """w -= lr x ok x ratio x u per piece; scales the update pieces in place on the way.

    ratio: (n,) trust ratio per parameter, applied in decay groups only; None for Adam.
    """
    for group, lr in zip(groups, lrs):
        if not group.update:
            continue
        size = lr if ok is None else lr * ok
        if ratio is not None and group.weight_decay != 0.0:
            size = list((ratio[group.index] * size).unbind())
        torch._foreach_mul_(group.update, size)
        torch._foreach_sub_(group.master, group.update)


def trust_ratios(w_sq: Tensor, u_sq: Tensor) -> Tensor:
    """|w| / |u| per parameter, 1 where either is 0. (n,) -> (n,) fp32."""
    w, u = w_sq.sqrt(), u_sq.sqrt()
    # where() evaluates both branches; the 0/0 NaNs it discards are harmless.
    return torch.where((w > 0) & (u > 0), w / u, torch.ones_like(w))


def sum_squares(groups: list[GroupSegments], attr: str, n: int, device: torch.device) -> Tensor:
    """(n,) fp32: this rank's sum of squares per parameter of the `attr` pieces, decay groups only.

    Parameters without weight decay get no trust ratio, so their entries stay 0.
    """
    sums = torch.zeros(n, dtype=torch.float32, device=device)
    for group in groups:
        pieces = getattr(group, attr)
        if group.weight_decay != 0.0 and pieces:
            norms = torch.stack(torch._foreach_norm(pieces))
            sums.index_add_(0, group.index, norms.square())
    return sums


def make_groups(rows: Sequence[SegmentRow], decays: Sequence[float], master: Tensor,
                update: Optional[Tensor] = None) -> list[GroupSegments]:
    """Per param group, the views of its pieces into the flat (S,) `master` and `update`."""
    groups = []
    for g, decay in enumerate(decays):
        mine = [row for row in rows if row[3] == g]
        index = torch.tensor([row[2] for row in mine], dtype=torch.int64, device=master.device)
        groups.append(GroupSegments(
            decay, index, [master[start:start + length] for start, length, _, _ in mine],
            [] if update is None else [update[start:start + length]
                                       for start, length, _, _ in mine]))
    return groups


def new_shard(layout: FlatLayout, dtype: torch.dtype, segments: list[Segment],
              group_of: list[int], decays: list[float], device: torch.device,
              grad: Optional[Tensor] = None) -> ShardBuffers:
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
        master, torch.zeros_like(master), torch.zeros_like(master), update, grad,
        make_groups(rows, decays, master, update), len(group_of),
        torch.tensor(rows, dtype=torch.int64, device=device).reshape(-1, 4),
        None if dtype == torch.float32 else torch.zeros(size, dtype=dtype, device=device))


def _build_shard(layout: FlatLayout, flat: FlatParams, dtype: torch.dtype,
                 segments: list[Segment], group_of: list[int], decays: list[float],
                 rank: int, grad_alias: bool) -> ShardBuffers:
    """This rank's buffers for `dtype`, master weights copied from the flat parameters."""
    # One rank owns whole buckets: the flat gradient buffer is already its shard.
    shard = new_shard(layout, dtype, segments, group_of, decays, flat.params[dtype].device,
                      flat.grads[dtype] if grad_alias else None)
    for bucket in layout.buckets:
        if bucket.dtype == dtype:
            lo = bucket.chunk_start(rank)
            shard.master[bucket.shard_start:bucket.shard_start + bucket.chunk] = \
                flat.params[dtype][lo:lo + bucket.chunk]
    return shard
