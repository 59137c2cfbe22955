"""Word-embedding gradient with packed atomics ([Zeng], IV-C-3), hidden 1024.

PyTorch's embedding backward sorts the indices and reduces segments (several kernels); this one
adds each token's gradient row straight into grad_weight with half2 / bfloat162 (or fp32)
atomics. Meant for the word embedding (30k rows, few repeats per row); the position and
token-type tables repeat every row thousands of times and should stay on PyTorch's kernel.

Custom ops (torch.ops.bert_kernels.*):
  embedding_backward(grad, indices, num_weights, out_dtype) -> grad_weight
  embedding(weight, indices, fp32_accumulate) -> out, whose backward is embedding_backward
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from kernels import _loader, reference

OP = "embedding_backward"
HIDDEN = reference.HIDDEN


@torch.library.custom_op("bert_kernels::embedding_backward", mutates_args=())
def embedding_backward(
    grad: Tensor, indices: Tensor, num_weights: int, out_dtype: torch.dtype
) -> Tensor:
    """grad_weight[indices[t]] += grad[t].

    grad: (T, 1024) fp16/bf16/fp32, contiguous; indices: (T,) int32/int64 in [0, num_weights).
    out_dtype: grad.dtype (packed 16-bit atomics: each repeat of a row adds one rounding) or
    torch.float32 (fp32 atomics). Returns (num_weights, 1024) out_dtype. Not bitwise
    deterministic (atomic order); raises under torch.use_deterministic_algorithms(True).
    """
    run = _loader.implementation(grad, OP, "embedding_backward", reference.embedding_backward_ref)
    return run(grad, indices, num_weights, out_dtype)


@embedding_backward.register_fake
def _(grad, indices, num_weights, out_dtype):
    if grad.dim() != 2 or grad.shape[1] != HIDDEN:
        raise ValueError(
            f"{OP} is built for hidden size {HIDDEN} only: grad must be (tokens, "
            f"{HIDDEN}), got {tuple(grad.shape)}"
        )
    return grad.new_empty(num_weights, HIDDEN, dtype=out_dtype)


@torch.library.custom_op("bert_kernels::embedding", mutates_args=())
def _embedding(weight: Tensor, indices: Tensor, fp32_accumulate: bool) -> Tensor:
    return F.embedding(indices, weight)


@_embedding.register_fake
def _(weight, indices, fp32_accumulate):
    return weight.new_empty(indices.shape[0], weight.shape[1])


def _setup_context(ctx, inputs, output):
    weight, indices, fp32_accumulate = inputs
    ctx.save_for_backward(indices)
    ctx.num_weights, ctx.weight_dtype = weight.shape[0], weight.dtype
    ctx.fp32_accumulate = fp32_accumulate


def _backward(ctx, grad):
    (indices,) = ctx.saved_tensors
    same = grad.dtype == ctx.weight_dtype and not ctx.fp32_accumulate
    grad_weight = embedding_backward(
        grad.contiguous(), indices, ctx.num_weights, grad.dtype if same else torch.float32
    )
    return grad_weight.to(ctx.weight_dtype), None, None


torch.library.register_autograd("bert_kernels::embedding", _backward, setup_context=_setup_context)


def embedding(indices: Tensor, weight: Tensor, fp32_accumulate: bool = False) -> Tensor:
    """F.embedding(indices, weight) whose weight gradient uses embedding_backward.

    indices: (T,) int32/int64 (packed tokens); weight: (V, 1024). Returns (T, 1024) weight.dtype.
    fp32_accumulate: accumulate a 16-bit weight's gradient in fp32 and round once (as PyTorch
    does) instead of once per repeat of a token; costs a (V, 1024) fp32 buffer.
    """
    if indices.dim() != 1 or weight.dim() != 2 or weight.shape[1] != HIDDEN:
        raise ValueError(
            f"embedding takes indices (T,) and weight (V, {HIDDEN}), got "
            f"{tuple(indices.shape)} and {tuple(weight.shape)}"
        )
    if weight.is_cuda:
        _loader.require(OP)
    return torch.ops.bert_kernels.embedding(weight, indices, fp32_accumulate)
