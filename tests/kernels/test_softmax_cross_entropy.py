"""softmax_cross_entropy: reference checks (CPU) and the fused criterion (GPU, -m gpu)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernel_checks import LOW_PRECISION, assert_within_torch_error
from kernels import reference as ref
from kernels.softmax_cross_entropy import softmax_cross_entropy

VOCAB, PADDED = 30522, 30528
ROWS = (1, 7, 509, 512, 2053)


def make_inputs(rows, cols, vocab, dtype, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = (3 * torch.randn(rows, cols, generator=g)).to(device, dtype).requires_grad_()
    labels = torch.randint(0, vocab, (rows,), generator=g)
    labels[torch.rand(rows, generator=g) < 0.1] = -100
    return logits, labels.to(device)


def torch_loss(logits, labels, vocab, reduction="mean"):
    """The model's current MLM loss (bert/model/modeling.py)."""
    return F.cross_entropy(logits[:, :vocab].float(), labels, reduction=reduction)


# ---- CPU ----------------------------------------------------------------------------------
def test_reference_matches_autograd():
    logits, labels = make_inputs(37, 24, 21, torch.float64)
    losses, grad = ref.softmax_cross_entropy_ref(logits.detach(), labels, 21, -100, True)
    expected = torch_loss(logits, labels, 21, reduction="none")
    torch.testing.assert_close(losses, expected.float())
    (expected_grad,) = torch.autograd.grad(expected.sum(), logits)
    torch.testing.assert_close(grad, expected_grad)
    assert (grad[:, 21:] == 0).all()


def test_reference_flags_bad_labels():
    logits = torch.randn(3, 16)
    losses, grad = ref.softmax_cross_entropy_ref(
        logits, torch.tensor([0, -100, 12]), 10, -100, True
    )
    assert losses[0].isfinite() and losses[1] == 0 and losses[2].isnan()
    assert (grad[1] == 0).all() and grad[2, :10].isnan().all() and (grad[2, 10:] == 0).all()


def test_custom_ops_on_cpu():
    logits, labels = make_inputs(9, 16, 13, torch.float32)
    torch.library.opcheck(
        torch.ops.bert_kernels.softmax_cross_entropy.default, (logits, labels, 13, -100, True)
    )
    torch.library.opcheck(
        torch.ops.bert_kernels.softmax_cross_entropy_backward.default,
        (torch.randn(9, 16), torch.rand(9)),
    )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_functional_matches_cross_entropy_on_cpu(reduction):
    logits, labels = make_inputs(33, 40, 35, torch.float32)
    loss = softmax_cross_entropy(logits, labels, 35, reduction=reduction)
    expected = torch_loss(logits, labels, 35, reduction)
    torch.testing.assert_close(loss, expected)
    w = torch.randn_like(loss)
    torch.testing.assert_close(
        torch.autograd.grad(loss, logits, w)[0], torch.autograd.grad(expected, logits, w)[0]
    )
    with torch.no_grad():  # no gradient buffer when nothing will be differentiated
        torch.testing.assert_close(
            softmax_cross_entropy(logits, labels, 35, reduction=reduction), expected
        )


def test_traces_under_torch_compile_on_cpu():
    logits, labels = make_inputs(5, 16, 10, torch.float32)
    f = torch.compile(
        lambda a, b: softmax_cross_entropy(a, b, 10), backend="aot_eager", fullgraph=True
    )
    torch.testing.assert_close(f(logits, labels), torch_loss(logits, labels, 10))


# ---- GPU ----------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", LOW_PRECISION)
@pytest.mark.parametrize("rows", ROWS)
def test_kernel_matches_reference(cuda_kernels, rows, dtype):
    logits, labels = make_inputs(rows, PADDED, VOCAB, dtype, device="cuda", seed=rows)
    loss = softmax_cross_entropy(logits, labels, VOCAB, reduction="none")
    dloss = torch.rand_like(loss)
    (grad,) = torch.autograd.grad(loss, logits, dloss)
    # PyTorch on the low-precision logits, as bert/model/modeling.py does it; fp32 oracle on a copy.
    loss_low = torch_loss(logits, labels, VOCAB, "none")
    (grad_low,) = torch.autograd.grad(loss_low, logits, dloss)
    logits32 = logits.detach().float().requires_grad_()
    loss_ref = torch_loss(logits32, labels, VOCAB, "none")
    (grad_ref,) = torch.autograd.grad(loss_ref, logits32, dloss)
    assert grad.dtype == dtype and (grad[:, VOCAB:] == 0).all()
    assert_within_torch_error("loss", loss, loss_low, loss_ref)
    assert_within_torch_error("grad", grad, grad_low, grad_ref)


@pytest.mark.gpu
def test_kernel_mean_and_no_grad(cuda_kernels):
    logits, labels = make_inputs(2053, PADDED, VOCAB, torch.float16, device="cuda")
    loss = softmax_cross_entropy(logits, labels, VOCAB)
    torch.testing.assert_close(loss, torch_loss(logits, labels, VOCAB), rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        losses, grad = torch.ops.bert_kernels.softmax_cross_entropy(
            logits, labels, VOCAB, -100, False
        )
    assert grad.shape == (0, PADDED)
    torch.testing.assert_close(losses.sum() / (labels != -100).sum(), loss)


@pytest.mark.gpu
def test_kernel_flags_bad_labels_and_rejects_bad_tensors(cuda_kernels):
    logits = torch.randn(2, PADDED, device="cuda", dtype=torch.bfloat16)
    labels = torch.tensor([VOCAB + 1, 5], device="cuda")
    losses, grad = torch.ops.bert_kernels_cuda.softmax_cross_entropy(
        logits, labels, VOCAB, -100, True
    )
    assert losses[0].isnan() and losses[1].isfinite() and grad[0, :VOCAB].isnan().all()
    raw = torch.ops.bert_kernels_cuda.softmax_cross_entropy
    with pytest.raises(RuntimeError, match="multiple of 8"):
        raw(logits[:, :VOCAB].contiguous(), labels, VOCAB, -100, True)
    with pytest.raises(RuntimeError, match="int64"):
        raw(logits, labels.int(), VOCAB, -100, True)
    with pytest.raises(RuntimeError, match="float16 or bfloat16"):
        raw(logits.float(), labels, VOCAB, -100, True)
