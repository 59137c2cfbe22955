"""y = LayerNorm(residual + dropout(x + bias)) as one fused op, hidden 1024 only.

[Zeng]'s Dropout_Add_LayerNorm and [LightSeq2]'s bias+dropout+residual with LayerNorm: the
forward is one kernel (it saves z = residual + dropout(x + bias), fp32 mean and rstd, and the
keep mask as bits), the backward two (rows, then the parameter-gradient reduction).

Custom ops (torch.ops.bert_kernels.*; CUDA kernels on CUDA tensors, kernels.reference on CPU):
  bdrln_forward(x, bias, residual, weight, ln_bias, p, eps, seed, offset)
      -> (y, z, mean, rstd, mask)
  bdrln_backward(grad_y, z, mean, rstd, mask, weight, p)
      -> (dx, dresidual, dweight, dln_bias, dbias)
"""

from __future__ import annotations

import torch
from torch import Tensor

from kernels import _loader, reference

OP = "bias_dropout_residual_layernorm"
HIDDEN = reference.HIDDEN
MASK_WORDS = reference.MASK_WORDS


def _check(x: Tensor, residual: Tensor, params: tuple[Tensor, ...], p: float) -> None:
    """Shape/dtype errors before tracing or launching (the C++ binding checks again)."""
    if x.dim() != 2 or x.shape[1] != HIDDEN:
        raise ValueError(
            f"{OP} is built for hidden size {HIDDEN} only: x must be (tokens, "
            f"{HIDDEN}), got {tuple(x.shape)}"
        )
    if residual.shape != x.shape or residual.dtype != x.dtype:
        raise ValueError(
            f"residual must match x {tuple(x.shape)} {x.dtype}, got "
            f"{tuple(residual.shape)} {residual.dtype}"
        )
    if x.is_cuda and x.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"{OP} takes float16 or bfloat16 activations on CUDA, got {x.dtype}")
    for t in params:
        if t.shape != (HIDDEN,) or t.dtype != params[0].dtype:
            raise ValueError(
                f"bias, weight and ln_bias must be ({HIDDEN},) of one dtype, got "
                f"{[(tuple(q.shape), q.dtype) for q in params]}"
            )
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")


@torch.library.custom_op(
    "bert_kernels::bdrln_forward", mutates_args=(), tags=(torch.Tag.nondeterministic_seeded,)
)
def bdrln_forward(
    x: Tensor,
    bias: Tensor,
    residual: Tensor,
    weight: Tensor,
    ln_bias: Tensor,
    p: float,
    eps: float,
    seed: int,
    offset: int,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Fused forward.

    x, residual: (T, 1024) fp16/bf16, contiguous; bias, weight, ln_bias: (1024,) fp32 or x.dtype.
    seed < 0: take (seed, offset) from torch's default CUDA generator (graph-capture safe);
    seed >= 0: use (seed, offset) as given, offset a multiple of 4.
    Returns y, z: (T, 1024) x.dtype; mean, rstd: (T,) fp32; mask: (T, 32) int32 keep bits.
    """
    if x.is_cuda:
        _loader.require(OP)
        return torch.ops.bert_kernels_cuda.bdrln_forward(
            x, bias, residual, weight, ln_bias, p, eps, seed, offset
        )
    if seed < 0:  # CPU twin: draw the Philox key from torch's CPU generator
        seed, offset = int(torch.randint(2**62, ()).item()), 0
    return reference.bdrln_forward_ref(x, bias, residual, weight, ln_bias, p, eps, seed, offset)


@bdrln_forward.register_fake
def _(x, bias, residual, weight, ln_bias, p, eps, seed, offset):
    _check(x, residual, (bias, weight, ln_bias), p)
    rows = x.shape[0]
    stats = x.new_empty(rows, dtype=torch.float32)
    return (
        torch.empty_like(x),
        torch.empty_like(x),
        stats,
        torch.empty_like(stats),
        x.new_empty(rows, MASK_WORDS, dtype=torch.int32),
    )


@torch.library.custom_op("bert_kernels::bdrln_backward", mutates_args=())
def bdrln_backward(
    grad_y: Tensor, z: Tensor, mean: Tensor, rstd: Tensor, mask: Tensor, weight: Tensor, p: float
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Fused backward from the forward's saved tensors.

    grad_y: (T, 1024) z.dtype, contiguous. Returns dx, dresidual: (T, 1024) z.dtype;
    dweight, dln_bias, dbias: (1024,) weight.dtype.
    """
    run = _loader.implementation(z, OP, "bdrln_backward", reference.bdrln_backward_ref)
    return run(grad_y, z, mean, rstd, mask, weight, p)


@bdrln_backward.register_fake
def _(grad_y, z, mean, rstd, mask, weight, p):
    return (
        torch.empty_like(z),
        torch.empty_like(z),
        torch.empty_like(weight),
        torch.empty_like(weight),
        torch.empty_like(weight),
    )


def _setup_context(ctx, inputs, output):
    weight, p = inputs[3], inputs[5]
    _, z, mean, rstd, mask = output
    ctx.save_for_backward(z, mean, rstd, mask, weight)
    ctx.mark_non_differentiable(z, mean, rstd, mask)
    ctx.p = p


def _backward(ctx, grad_y, *unused):
    z, mean, rstd, mask, weight = ctx.saved_tensors
    dx, dres, dweight, dln_bias, dbias = bdrln_backward(
        grad_y.contiguous(), z, mean, rstd, mask, weight, ctx.p
    )
    return dx, dbias, dres, dweight, dln_bias, None, None, None, None


torch.library.register_autograd(
    "bert_kernels::bdrln_forward", _backward, setup_context=_setup_context
)


def bias_dropout_residual_layernorm(
    x: Tensor,
    bias: Tensor,
    residual: Tensor,
    weight: Tensor,
    ln_bias: Tensor,
    p: float = 0.0,
    eps: float = 1e-12,
    training: bool = True,
    seed: int | None = None,
    offset: int = 0,
) -> Tensor:
    """LayerNorm(residual + dropout(x + bias)), the end of a post-LN BERT sublayer.

    x: (T, 1024), the dense layer's output *without* its bias (F.linear(h, W)); residual:
    (T, 1024), same dtype; fp16/bf16 on CUDA. bias: the dense layer's bias, weight/ln_bias: the
    LayerNorm's, each (1024,) in fp32 or x.dtype. Dropout applies only when training. seed: fix
    the Philox key for reproduction (offset must then be a multiple of 4); None draws from
    torch's generator. Returns (T, 1024) in x.dtype. Gradients flow to all five tensors.
    """
    _check(x, residual, (bias, weight, ln_bias), p)
    if x.is_cuda:
        _loader.require(OP)
    outputs = torch.ops.bert_kernels.bdrln_forward(
        x,
        bias,
        residual,
        weight,
        ln_bias,
        p if training else 0.0,
        eps,
        -1 if seed is None else seed,
        offset,
    )
    return outputs[0]
