"""Fused LAMB over the sharded optimizer's flat fp32 shard ([Zeng], IV-C-2).

The optimizer's state is contiguous (bert/optim/flat.py), so the kernels need no tensor lists:
one segment table, (start, length, parameter index, param group) per piece of a parameter, is
all the metadata. A step on one shard is five launches instead of dozens of `_foreach` kernels,
and no host sync:
- `lamb_sums`: |grad|^2 (for the global norm) and |w|^2 per parameter, one pass (2 launches);
- `lamb_update`: moments, the update direction u and |u|^2 per parameter (2 launches);
- `lamb_apply`: w -= lr * trust ratio * u, plus the 16-bit model copy of w (1 launch).
The reductions are deterministic (per-tile partials summed in a fixed order; no atomics). On
CPU tensors the ops run their `_foreach` twin (kernels/reference_lamb.py), which is also the
test oracle. Not yet validated on a GPU (kernels/VALIDATION.md): the trainer uses it
only with `optim.fused_kernel=true`.

Custom ops (torch.ops.bert_kernels.*), all in place, no autograd:
  lamb_sums(grad, master, segments, decays, sums)
  lamb_update(grad, master, exp_avg, exp_avg_sq, update, segments, decays, coef, ok, bc1, bc2,
              beta1, beta2, eps, update_sq)
  lamb_apply(master, update, segments, decays, lrs, ok, w_sq, u_sq, model)
The sharded optimizer calls them through bert/optim/shard_update.py (`fused_sums`,
`fused_update`).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from kernels import _loader
from kernels import reference_lamb as ref

OP = "lamb"


@torch.library.custom_op("bert_kernels::lamb_sums", mutates_args=("sums",))
def lamb_sums(
    grad: Tensor, master: Tensor, segments: Tensor, decays: list[float], sums: Tensor
) -> None:
    """sums[0] += |grad|^2; sums[1 + p] += |master piece of p|^2 for parameters p with decay.

    grad: (S,) fp32/fp16/bf16; master: (S,) fp32; segments: (k, 4) int64, one row (start,
    length, parameter, group) per piece, sorted by start, disjoint, lengths > 0, at most one
    piece per parameter; decays: weight decay per group (<= 8 groups; 0 means no trust ratio,
    so no |w|^2); sums: (1 + n,) fp32. Elements outside the segments must be zero.
    """
    if grad.is_cuda:
        _loader.require(OP)
        torch.ops.bert_kernels_cuda.lamb_sums(grad, master, segments, decays, sums)
        return
    groups = ref.make_groups(segments.tolist(), decays, master)
    sums.add_(ref.local_sums(grad, groups, sums.numel() - 1, trust_ratio=True))


@torch.library.custom_op(
    "bert_kernels::lamb_update", mutates_args=("exp_avg", "exp_avg_sq", "update", "update_sq")
)
def lamb_update(
    grad: Tensor,
    master: Tensor,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    update: Tensor,
    segments: Tensor,
    decays: list[float],
    coef: Tensor,
    ok: Optional[Tensor],
    bc1: Tensor,
    bc2: Tensor,
    beta1: float,
    beta2: float,
    eps: float,
    update_sq: Optional[Tensor],
) -> None:
    """Moments and the update direction u (with wd * w); update_sq[p] += |u piece of p|^2.

    exp_avg, exp_avg_sq, update: (S,) fp32; coef: () fp32, multiplies grad (1 / loss scale x
    clip factor); ok: () bool, False skips the step (moments kept bit-identical), or None;
    bc1, bc2: () fp64, 1 - beta^t; update_sq: (n,) fp32 (decay parameters), or None (Adam).
    Other arguments as `lamb_sums`.
    """
    if grad.is_cuda:
        _loader.require(OP)
        torch.ops.bert_kernels_cuda.lamb_update(
            grad,
            master,
            exp_avg,
            exp_avg_sq,
            update,
            segments,
            decays,
            coef,
            ok,
            bc1,
            bc2,
            beta1,
            beta2,
            eps,
            update_sq,
        )
        return
    groups = ref.make_groups(segments.tolist(), decays, master, update)
    ref.update_direction(
        grad, exp_avg, exp_avg_sq, update, groups, coef, ok, bc1, bc2, (beta1, beta2), eps
    )
    if update_sq is not None:
        update_sq.add_(ref.sum_squares(groups, "update", update_sq.numel(), update.device))


@torch.library.custom_op("bert_kernels::lamb_apply", mutates_args=("master", "update", "model"))
def lamb_apply(
    master: Tensor,
    update: Tensor,
    segments: Tensor,
    decays: list[float],
    lrs: Tensor,
    ok: Optional[Tensor],
    w_sq: Optional[Tensor],
    u_sq: Optional[Tensor],
    model: Optional[Tensor],
) -> None:
    """master -= lr x ok x ratio x update per piece; model (if given) = master rounded.

    lrs: (groups,) fp32; w_sq, u_sq: (n,) fp32, |w|^2 and |u|^2 summed over all ranks, giving
    the trust ratio |w| / |u| (1 if either is 0) of decay parameters; both None for Adam.
    model: (S,) fp16/bf16 or None. `update` is scratch: the CPU twin scales it in place, the
    kernel leaves it as it was.
    """
    if master.is_cuda:
        _loader.require(OP)
        torch.ops.bert_kernels_cuda.lamb_apply(
            master, update, segments, decays, lrs, ok, w_sq, u_sq, model
        )
        return
    groups = ref.make_groups(segments.tolist(), decays, master, update)
    ratio = None if w_sq is None else ref.trust_ratios(w_sq, u_sq)
    ref.apply_update(groups, list(lrs.unbind()), ok, ratio)
    if model is not None:
        model.copy_(master)


def _no_output(*args) -> None:
    """The ops' fake (meta) implementation: they only write into their arguments, so there
    is no output whose shape a tracer would need."""
    return None


lamb_sums.register_fake(_no_output)
lamb_update.register_fake(_no_output)
lamb_apply.register_fake(_no_output)
