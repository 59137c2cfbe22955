"""This rank's shard of the sharded optimizer's state, and the update applied to it.

`reference_update` is the `_foreach` reference path (also the CPU path and the test oracle); a
fused CUDA kernel with the same signature plugs into `DistributedFusedLAMB(fused_update_fn=...)`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Union

import torch
from torch import Tensor

from bert.optim.flat import FlatLayout, FlatParams, Segment

LR = Union[float, Tensor]


@dataclass
class GroupSegments:
    """This rank's pieces of one param group's parameters inside one dtype shard (k pieces)."""

    weight_decay: float
    index: Tensor  # (k,) int64 on the device: parameter index of each piece
    master: list[Tensor]  # k views into ShardBuffers.master
    update: list[Tensor]  # k views into ShardBuffers.update


@dataclass
class ShardBuffers:
    """Optimizer state of one dtype on this rank; every tensor is (S,), S = shard size."""

    master: Tensor  # fp32 master weights
    exp_avg: Tensor  # fp32 first moment
    exp_avg_sq: Tensor  # fp32 second moment
    update: Tensor  # fp32 scratch: the update direction
    grad: Tensor  # reduced, averaged gradient, param dtype, still multiplied by the loss scale
    groups: list[GroupSegments]  # one per param group, possibly with no pieces
    num_params: int  # all parameters of the optimizer (length of per-parameter vectors)


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


# (shard, inputs, reduce_sums) -> None; reduce_sums sums an (n,) fp32 vector over the shard group.
UpdateFn = Callable[[ShardBuffers, StepInputs, Callable[[Tensor], Tensor]], None]


def reference_update(shard: ShardBuffers, inputs: StepInputs,
                     reduce_sums: Callable[[Tensor], Tensor]) -> None:
    """LAMB (AdamW when `inputs.w_sq` is None) on one shard, in place; `_foreach` reference math.

    Same operation order as `LAMB`, so the single-process results agree to rounding. Calls
    `reduce_sums` exactly once when the trust ratio is on (every rank must).
    """
    beta1, beta2 = inputs.betas
    g = shard.grad.float() * inputs.coef
    keep1, keep2 = beta1, beta2
    if inputs.ok is not None:
        # A skipped step keeps the moments bit-identical: zero gradient and beta = 1.
        g.masked_fill_(~inputs.ok, 0.0)
        keep1, keep2 = (torch.where(inputs.ok, b, 1.0) for b in (beta1, beta2))
    shard.exp_avg.mul_(keep1).add_(g, alpha=1.0 - beta1)
    shard.exp_avg_sq.mul_(keep2).addcmul_(g, g, value=1.0 - beta2)
    del g
    denom = torch.div(shard.exp_avg_sq, inputs.bc2).sqrt_().add_(inputs.eps)
    torch.div(shard.exp_avg, inputs.bc1, out=shard.update).div_(denom)
    del denom
    for group in shard.groups:
        if group.weight_decay != 0.0 and group.update:
            torch._foreach_add_(group.update, group.master, alpha=group.weight_decay)
    for group, size in zip(shard.groups, _step_sizes(shard, inputs, reduce_sums)):
        if group.update:
            torch._foreach_mul_(group.update, size)
    shard.master.sub_(shard.update)  # padding: m = v = w = 0 there, so its update is 0


def _step_sizes(shard: ShardBuffers, inputs: StepInputs,
                reduce_sums: Callable[[Tensor], Tensor]) -> list:
    """Per group: lr x ok (a scalar), or one lr x ok x trust ratio per piece (a list)."""
    ratio = None
    if inputs.w_sq is not None:
        u_sq = reduce_sums(sum_squares(shard.groups, "update", shard.num_params,
                                       shard.master.device))
        ratio = _trust_ratios(inputs.w_sq, u_sq)
    sizes = []
    for group, lr in zip(shard.groups, inputs.lrs):
        size = lr if inputs.ok is None else lr * inputs.ok
        if ratio is not None and group.weight_decay != 0.0:
            size = list((ratio[group.index] * size).unbind())
        sizes.append(size)
    return sizes


def _trust_ratios(w_sq: Tensor, u_sq: Tensor) -> Tensor:
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


def _build_shard(layout: FlatLayout, flat: FlatParams, dtype: torch.dtype,
                 segments: list[Segment], group_of: list[int], decays: list[float],
                 rank: int, grad_alias: bool) -> ShardBuffers:
    """This rank's buffers for `dtype`, master weights copied from the flat parameters."""
    size = layout.shard_numel[dtype]
    device = flat.params[dtype].device
    master = torch.zeros(size, dtype=torch.float32, device=device)
    for bucket in layout.buckets:
        if bucket.dtype == dtype:
            lo = bucket.chunk_start(rank)
            master[bucket.shard_start:bucket.shard_start + bucket.chunk] = \
                flat.params[dtype][lo:lo + bucket.chunk]
    # One rank owns whole buckets: the flat gradient buffer is already its shard.
    grad = flat.grads[dtype] if grad_alias else torch.zeros(size, dtype=dtype, device=device)
    shard = ShardBuffers(master, torch.zeros_like(master), torch.zeros_like(master),
                         torch.zeros_like(master), grad, [], len(group_of))
    for g, decay in enumerate(decays):
        mine = [s for s in segments if group_of[s.index] == g]
        index = torch.tensor([s.index for s in mine], dtype=torch.int64, device=device)
        shard.groups.append(GroupSegments(
            decay, index, [master[s.shard_start:s.shard_start + s.length] for s in mine],
            [shard.update[s.shard_start:s.shard_start + s.length] for s in mine]))
    return shard
