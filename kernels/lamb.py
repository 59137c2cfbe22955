"""Fused LAMB over the sharded optimizer's flat fp32 shard (seed 000, IV-C-2).

The optimizer's state is contiguous (bert/optim/flat.py), so the kernels need no tensor lists:
one segment table, (start, length, parameter index, param group) per piece of a parameter, is
all the metadata. A step on one shard is five launches instead of dozens of `_foreach` kernels,
and no host sync:
- `lamb_sums`: |grad|^2 (for the global norm) and |w|^2 per parameter, one pass (2 launches);
- `lamb_update`: moments, the update direction u and |u|^2 per parameter (2 launches);
- `lamb_apply`: w -= lr * trust ratio * u, plus the 16-bit model copy of w (1 launch).
The reductions are deterministic (per-tile partials summed in a fixed order; no atomics). On
CPU tensors the ops run the optimizer's `_foreach` reference (bert/optim/shard_update.py), which
is also the test oracle. Not yet validated on a GPU (kernels/VALIDATION.md): the trainer uses it
only with `optim.fused_kernel=true`.

Custom ops (torch.ops.bert_kernels.*), all in place, no autograd:
  lamb_sums(grad, master, segments, decays, sums)
  lamb_update(grad, master, exp_avg, exp_avg_sq, update, segments, decays, coef, ok, bc1, bc2,
              beta1, beta2, eps, update_sq)
  lamb_apply(master, update, segments, decays, lrs, ok, w_sq, u_sq, model)
Optimizer hooks (`DistributedFusedLAMB(fused_sums_fn=shard_sums, fused_update_fn=shard_update)`):
  shard_sums(shard, trust_ratio), shard_update(shard, inputs, reduce_sums)
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from bert.optim import shard_update as ref
from bert.optim.flat import FlatLayout
from kernels import _loader

OP = "lamb"


@torch.library.custom_op("bert_kernels::lamb_sums", mutates_args=("sums",))
def lamb_sums(grad: Tensor, master: Tensor, segments: Tensor, decays: list[float],
              sums: Tensor) -> None:
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


@lamb_sums.register_fake
def _(grad, master, segments, decays, sums):
    return None


@torch.library.custom_op("bert_kernels::lamb_update",
                         mutates_args=("exp_avg", "exp_avg_sq", "update", "update_sq"))
def lamb_update(grad: Tensor, master: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor,
                update: Tensor, segments: Tensor, decays: list[float], coef: Tensor,
                ok: Optional[Tensor], bc1: Tensor, bc2: Tensor, beta1: float, beta2: float,
                eps: float, update_sq: Optional[Tensor]) -> None:
    """Moments and the update direction u (with wd * w); update_sq[p] += |u piece of p|^2.

    exp_avg, exp_avg_sq, update: (S,) fp32; coef: () fp32, multiplies grad (1 / loss scale x
    clip factor); ok: () bool, False skips the step (moments kept bit-identical), or None;
    bc1, bc2: () fp64, 1 - beta^t; update_sq: (n,) fp32 (decay parameters), or None (Adam).
    Other arguments as `lamb_sums`.
    """
    if grad.is_cuda:
        _loader.require(OP)
        torch.ops.bert_kernels_cuda.lamb_update(grad, master, exp_avg, exp_avg_sq, update,
                                                segments, decays, coef, ok, bc1, bc2, beta1,
                                                beta2, eps, update_sq)
        return
    groups = ref.make_groups(segments.tolist(), decays, master, update)
    # lrs and w_sq are not used by this stage.
    inputs = ref.StepInputs(coef, ok, bc1, bc2, [], None, (beta1, beta2), eps)
    ref.update_direction(grad, exp_avg, exp_avg_sq, update, groups, inputs)
    if update_sq is not None:
        update_sq.add_(ref.sum_squares(groups, "update", update_sq.numel(), update.device))


@lamb_update.register_fake
def _(grad, master, exp_avg, exp_avg_sq, update, segments, decays, coef, ok, bc1, bc2, beta1,
      beta2, eps, update_sq):
    return None


@torch.library.custom_op("bert_kernels::lamb_apply", mutates_args=("master", "update", "model"))
def lamb_apply(master: Tensor, update: Tensor, segments: Tensor, decays: list[float],
               lrs: Tensor, ok: Optional[Tensor], w_sq: Optional[Tensor],
               u_sq: Optional[Tensor], model: Optional[Tensor]) -> None:
    """master -= lr x ok x ratio x update per piece; model (if given) = master rounded.

    lrs: (groups,) fp32; w_sq, u_sq: (n,) fp32, |w|^2 and |u|^2 summed over all ranks, giving
    the trust ratio |w| / |u| (1 if either is 0) of decay parameters; both None for Adam.
    model: (S,) fp16/bf16 or None. `update` is scratch: the CPU twin scales it in place, the
    kernel leaves it as it was.
    """
    if master.is_cuda:
        _loader.require(OP)
        torch.ops.bert_kernels_cuda.lamb_apply(master, update, segments, decays, lrs, ok, w_sq,
                                               u_sq, model)
        return
    groups = ref.make_groups(segments.tolist(), decays, master, update)
    ratio = None if w_sq is None else ref.trust_ratios(w_sq, u_sq)
    ref.apply_update(groups, list(lrs.unbind()), ok, ratio)
    if model is not None:
        model.copy_(master)


@lamb_apply.register_fake
def _(master, update, segments, decays, lrs, ok, w_sq, u_sq, model):
    return None


# ---- the optimizer's hooks -----------------------------------------------------------------
def shard_sums(shard: ref.ShardBuffers, trust_ratio: bool) -> Tensor:
    """`reference_sums` through `lamb_sums`: (1 + n,) fp32, or (1,) without trust ratio."""
    sums = torch.zeros(1 + shard.num_params, dtype=torch.float32, device=shard.master.device)
    # Without trust ratio (Adam) no |w|^2 is needed: all-zero decays make the kernel skip it.
    decays = _decays(shard) if trust_ratio else [0.0] * len(shard.groups)
    torch.ops.bert_kernels.lamb_sums(shard.grad, shard.master, shard.segments, decays, sums)
    return sums if trust_ratio else sums[:1]


def shard_update(shard: ref.ShardBuffers, inputs: ref.StepInputs, reduce_sums: ref.ReduceFn
                 ) -> None:
    """`reference_update` through `lamb_update` and `lamb_apply` (same signature)."""
    decays, device = _decays(shard), shard.master.device
    u_sq = None
    if inputs.w_sq is not None:
        u_sq = torch.zeros(shard.num_params, dtype=torch.float32, device=device)
    beta1, beta2 = inputs.betas
    torch.ops.bert_kernels.lamb_update(
        shard.grad, shard.master, shard.exp_avg, shard.exp_avg_sq, shard.update, shard.segments,
        decays, inputs.coef, inputs.ok, inputs.bc1, inputs.bc2, beta1, beta2, inputs.eps, u_sq)
    if u_sq is not None:
        u_sq = reduce_sums(u_sq)
    torch.ops.bert_kernels.lamb_apply(shard.master, shard.update, shard.segments, decays,
                                      _lr_vector(inputs.lrs, device), inputs.ok, inputs.w_sq,
                                      u_sq, shard.model)


def _decays(shard: ref.ShardBuffers) -> list[float]:
    return [group.weight_decay for group in shard.groups]


def _lr_vector(lrs: list[ref.LR], device: torch.device) -> Tensor:
    """(groups,) fp32 on the device from floats and 0-dim tensors, without a host sync."""
    return torch.stack([lr.to(device, torch.float32).reshape(()) if isinstance(lr, Tensor)
                        else torch.full((), lr, dtype=torch.float32, device=device)
                        for lr in lrs])


# ---- inputs for the tests and the benchmark ------------------------------------------------
def bert_large_param_groups(weight_decay: float = 0.01) -> list[dict]:
    """`param_groups` of the default model (BERT-Large: 336M parameters in 302 tensors), built
    on the meta device: shapes and groups, no memory."""
    from bert.config import ModelConfig
    from bert.model import BertForPretraining
    from bert.optim.params import param_groups

    with torch.device("meta"):
        model = BertForPretraining(ModelConfig())
    return param_groups(model, weight_decay)


def random_shard(shapes: list[torch.Size], group_of: list[int], decays: list[float], world: int,
                 rank: int, dtype: torch.dtype, device: torch.device | str, seed: int = 0,
                 align: int = 128) -> ref.ShardBuffers:
    """Rank `rank`'s shard of parameters of these shapes and `dtype` among `world` ranks, laid out
    as DistributedFusedLAMB lays them out (25 MiB buckets), with random weights, gradients and
    moments on the segments and zero padding."""
    layout = FlatLayout([(shape, dtype) for shape in shapes], world, 25 * 2 ** 20, align)
    shard = ref.new_shard(layout, dtype, layout.segments(rank)[dtype], group_of, decays,
                          torch.device(device))
    on_segments = torch.zeros_like(shard.master)
    for seg in layout.segments(rank)[dtype]:
        on_segments[seg.shard_start:seg.shard_start + seg.length] = 1.0
    gen = torch.Generator(shard.master.device).manual_seed(seed)

    def noise(scale: float) -> Tensor:
        return torch.randn(on_segments.shape, generator=gen, device=on_segments.device).mul_(
            on_segments).mul_(scale)

    shard.master.copy_(noise(0.05))
    shard.exp_avg.copy_(noise(1e-3))
    shard.exp_avg_sq.copy_(noise(1e-3).square_())
    shard.grad.copy_(noise(1.0))  # rounded to a 16-bit grad dtype
    return shard
