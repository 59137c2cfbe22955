"""Plain-PyTorch twin of the fused LAMB kernels (kernels/lamb.py): oracle and CPU path.

The kernels work on one rank's flat fp32 shard of the optimizer state, with a segment table
(start, length, parameter index, param group) per piece of a parameter as the only metadata.
These functions are the same three stages with `torch._foreach_*` ops over views of the pieces:
1. `local_sums`: |grad|^2 over the shard and |w|^2 per parameter;
2. `update_direction` and `sum_squares`: moments, the update direction
   u = m_hat / (sqrt(v_hat) + eps) + wd * w, and |u|^2 per parameter;
3. `apply_update` with `trust_ratios`: w -= lr * trust ratio * u.
The sharded optimizer's reference step (bert/optim/shard_update.py) is their composition, and
the custom ops of kernels/lamb.py run them on CPU tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Union

import torch
from torch import Tensor

LR = Union[float, Tensor]
# One piece of a parameter in a shard: (shard start, length, parameter index, param group).
SegmentRow = tuple[int, int, int, int]


@dataclass
class GroupSegments:
    """This rank's pieces of one param group's parameters inside one dtype shard (k pieces)."""

    weight_decay: float
    index: Tensor  # (k,) int64 on the device: parameter index of each piece
    master: list[Tensor]  # k views into the flat master weights
    update: list[Tensor]  # k views into the flat update (empty where only norms are needed)


def make_groups(
    rows: Sequence[SegmentRow],
    decays: Sequence[float],
    master: Tensor,
    update: Optional[Tensor] = None,
) -> list[GroupSegments]:
    """Per param group, the views of its pieces into the flat (S,) `master` and `update`."""
    groups = []
    for g, decay in enumerate(decays):
        mine = [row for row in rows if row[3] == g]
        index = torch.tensor([row[2] for row in mine], dtype=torch.int64, device=master.device)
        groups.append(
            GroupSegments(
                decay,
                index,
                [master[start : start + length] for start, length, _, _ in mine],
                []
                if update is None
                else [update[start : start + length] for start, length, _, _ in mine],
            )
        )
    return groups


def local_sums(grad: Tensor, groups: list[GroupSegments], n: int, trust_ratio: bool) -> Tensor:
    """(1 + n,) fp32: [|grad|^2, |w_i|^2 per parameter]; (1,) without trust ratio.

    |w_i|^2 is 0 for parameters without weight decay (they get no trust ratio).
    """
    grad_sq = torch.linalg.vector_norm(grad, dtype=torch.float32).square().reshape(1)
    if not trust_ratio:
        return grad_sq
    return torch.cat([grad_sq, sum_squares(groups, "master", n, grad.device)])


def update_direction(
    grad: Tensor,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    update: Tensor,
    groups: list[GroupSegments],
    coef: Tensor,
    ok: Optional[Tensor],
    bc1: Tensor,
    bc2: Tensor,
    betas: tuple[float, float],
    eps: float,
) -> None:
    """Moments, then update = m_hat / (sqrt(v_hat) + eps) (+ wd * w in decay groups).

    Flat (S,) buffers. coef: () fp32, multiplies grad (1 / loss scale x clip factor); ok: ()
    bool, False skips the step (moments kept bit-identical), or None; bc1, bc2: () fp64,
    1 - beta^t.
    """
    beta1, beta2 = betas
    g = grad.float() * coef
    keep1, keep2 = beta1, beta2
    if ok is not None:
        # A skipped step keeps the moments bit-identical: zero gradient and beta = 1.
        g.masked_fill_(~ok, 0.0)
        keep1, keep2 = (torch.where(ok, b, 1.0) for b in (beta1, beta2))
    exp_avg.mul_(keep1).add_(g, alpha=1.0 - beta1)
    exp_avg_sq.mul_(keep2).addcmul_(g, g, value=1.0 - beta2)
    del g
    denom = torch.div(exp_avg_sq, bc2).sqrt_().add_(eps)
    torch.div(exp_avg, bc1, out=update).div_(denom)
    del denom
    for group in groups:
        if group.weight_decay != 0.0 and group.update:
            torch._foreach_add_(group.update, group.master, alpha=group.weight_decay)


def apply_update(
    groups: list[GroupSegments], lrs: Sequence[LR], ok: Optional[Tensor], ratio: Optional[Tensor]
) -> None:
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
