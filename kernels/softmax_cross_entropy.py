"""MLM-head softmax cross-entropy with the logits gradient computed in the forward pass.

[LightSeq2]'s criterion: the gradient softmax - one_hot is elementwise in the softmax, so the kernel
writes it while it still has the row's log-sum-exp, and the backward only scales it by d(loss).
Against `F.cross_entropy(logits[:, :vocab].float(), labels)` this never builds an fp32 copy of
the (masked tokens x 30528) logits, nor the log-softmax, nor its gradient.

Custom ops (torch.ops.bert_kernels.*):
  softmax_cross_entropy(logits, labels, vocab_size, ignore_index, need_grad) -> (losses, grad)
  softmax_cross_entropy_backward(grad, grad_loss) -> grad_logits
"""

from __future__ import annotations

import torch
from torch import Tensor

from kernels import _loader, reference

OP = "softmax_cross_entropy"


@torch.library.custom_op("bert_kernels::softmax_cross_entropy", mutates_args=())
def softmax_cross_entropy_op(
    logits: Tensor, labels: Tensor, vocab_size: int, ignore_index: int, need_grad: bool
) -> tuple[Tensor, Tensor]:
    """Per-row loss and gradient.

    logits: (M, V_pad) fp16/bf16, contiguous, V_pad % 8 == 0; labels: (M,) int64. Columns
    >= vocab_size are padding (outside the softmax, zero gradient). Returns losses: (M,) fp32
    (0 for ignore_index, NaN for a label outside [0, vocab_size)) and grad: (M, V_pad)
    logits.dtype, d(losses[m]) / d(logits[m]); (0, V_pad) when need_grad is False.
    """
    run = _loader.implementation(
        logits, OP, "softmax_cross_entropy", reference.softmax_cross_entropy_ref
    )
    return run(logits, labels, vocab_size, ignore_index, need_grad)


@softmax_cross_entropy_op.register_fake
def _(logits, labels, vocab_size, ignore_index, need_grad):
    rows, cols = logits.shape
    return (
        logits.new_empty(rows, dtype=torch.float32),
        logits.new_empty(rows if need_grad else 0, cols),
    )


@torch.library.custom_op("bert_kernels::softmax_cross_entropy_backward", mutates_args=())
def softmax_cross_entropy_backward(grad: Tensor, grad_loss: Tensor) -> Tensor:
    """grad: (M, V_pad) fp16/bf16 from the forward; grad_loss: (M,) fp32 -> (M, V_pad)."""
    run = _loader.implementation(
        grad, OP, "softmax_cross_entropy_backward", reference.softmax_cross_entropy_backward_ref
    )
    return run(grad, grad_loss)


@softmax_cross_entropy_backward.register_fake
def _(grad, grad_loss):
    return torch.empty_like(grad)


def _setup_context(ctx, inputs, output):
    ctx.need_grad = inputs[4]
    ctx.save_for_backward(output[1])
    ctx.mark_non_differentiable(output[1])


def _backward(ctx, grad_losses, unused):
    if not ctx.need_grad:
        raise RuntimeError(
            "softmax_cross_entropy ran with need_grad=False; its gradient was not computed"
        )
    (grad,) = ctx.saved_tensors
    grad_logits = softmax_cross_entropy_backward(grad, grad_losses.float().contiguous())
    return grad_logits, None, None, None, None


torch.library.register_autograd(
    "bert_kernels::softmax_cross_entropy", _backward, setup_context=_setup_context
)


def softmax_cross_entropy(
    logits: Tensor,
    labels: Tensor,
    vocab_size: int | None = None,
    ignore_index: int = -100,
    reduction: str = "mean",
) -> Tensor:
    """F.cross_entropy(logits[:, :vocab_size].float(), labels) with the gradient fused in.

    logits: (M, V_pad) fp16/bf16 (the padded vocabulary, a multiple of 8); labels: (M,) int.
    reduction: "mean" over non-ignored rows (no host sync; NaN if all are ignored, like
    F.cross_entropy), "sum", or "none" for the (M,) fp32 losses.
    """
    if logits.dim() != 2 or labels.shape != logits.shape[:1]:
        raise ValueError(
            f"expected logits (M, V) and labels (M,), got {tuple(logits.shape)} "
            f"and {tuple(labels.shape)}"
        )
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be mean, sum or none, got {reduction!r}")
    if logits.is_cuda:
        _loader.require(OP)
    need_grad = torch.is_grad_enabled() and logits.requires_grad
    losses, _ = torch.ops.bert_kernels.softmax_cross_entropy(
        logits,
        labels.long(),
        logits.shape[1] if vocab_size is None else vocab_size,
        ignore_index,
        need_grad,
    )
    if reduction == "none":
        return losses
    if reduction == "sum":
        return losses.sum()
    return losses.sum() / (labels != ignore_index).sum()
