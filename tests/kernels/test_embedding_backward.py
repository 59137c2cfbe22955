"""embedding_backward: reference checks (CPU) and the packed-atomic kernel (GPU, -m gpu)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernel_checks import LOW_PRECISION, TOKEN_COUNTS, assert_within_torch_error, max_error
from kernels import reference as ref
from kernels.embedding_backward import embedding, embedding_backward

H = ref.HIDDEN
VOCAB = 30528  # BERT's 30522 padded to a multiple of 8


def at_most_twice(tokens: int, vocab: int, generator: torch.Generator) -> torch.Tensor:
    """Indices where no row repeats more than twice (then packed atomics round only once)."""
    half = (tokens + 1) // 2
    ids = torch.randperm(vocab, generator=generator)[:half]
    ids = torch.cat([ids, ids])[:tokens]
    return ids[torch.randperm(tokens, generator=generator)]


def zipf_indices(tokens: int, vocab: int, generator: torch.Generator) -> torch.Tensor:
    """Word-frequency-like indices: a few rows repeat hundreds of times."""
    weights = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float64)
    return torch.multinomial(weights, tokens, replacement=True, generator=generator)


# ---- CPU ----------------------------------------------------------------------------------
def test_reference_matches_autograd():
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(50, H, dtype=torch.float64, requires_grad=True)
    indices = zipf_indices(300, 50, g)
    grad = torch.randn(300, H, dtype=torch.float64, generator=g)
    (expected,) = torch.autograd.grad(F.embedding(indices, weight), weight, grad)
    got = ref.embedding_backward_ref(grad, indices, 50, torch.float64)
    torch.testing.assert_close(got, expected.to(torch.float64), rtol=1e-6, atol=1e-6)


def test_custom_ops_on_cpu():
    g = torch.Generator().manual_seed(1)
    indices = zipf_indices(40, 17, g)
    grad = torch.randn(40, H, generator=g)
    torch.library.opcheck(
        torch.ops.bert_kernels.embedding_backward.default, (grad, indices, 17, torch.float32)
    )
    weight = torch.randn(17, H, requires_grad=True)
    torch.library.opcheck(torch.ops.bert_kernels.embedding.default, (weight, indices, False))
    out = embedding(indices.int(), weight)
    (got,) = torch.autograd.grad(out, weight, grad)
    (expected,) = torch.autograd.grad(F.embedding(indices, weight), weight, grad)
    torch.testing.assert_close(got, expected)


def test_rejects_other_hidden_sizes():
    with pytest.raises(ValueError, match="1024"):
        embedding(torch.zeros(3, dtype=torch.long), torch.randn(10, 768))


# ---- GPU ----------------------------------------------------------------------------------
def grads(indices, grad, weight_dtype, fp32_accumulate=False):
    """(kernel, PyTorch in weight_dtype, fp32 reference) weight gradients."""
    weight = torch.zeros(VOCAB, H, device="cuda", dtype=weight_dtype, requires_grad=True)
    (kernel,) = torch.autograd.grad(
        embedding(indices, weight, fp32_accumulate), weight, grad.to(weight_dtype)
    )
    (torch_low,) = torch.autograd.grad(F.embedding(indices, weight), weight, grad.to(weight_dtype))
    return (
        kernel,
        torch_low,
        ref.embedding_backward_ref(grad.to(weight_dtype), indices, VOCAB, torch.float32),
    )


@pytest.mark.gpu
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("dtype", (*LOW_PRECISION, torch.float32))
@pytest.mark.parametrize("tokens", TOKEN_COUNTS)
def test_kernel_matches_reference(cuda_kernels, tokens, dtype, index_dtype):
    g = torch.Generator().manual_seed(tokens)
    indices = at_most_twice(tokens, VOCAB, g).to("cuda", index_dtype)
    grad = torch.randn(tokens, H, generator=g).cuda()
    kernel, torch_low, expected = grads(indices, grad, dtype)
    assert kernel.dtype == dtype
    assert_within_torch_error("grad_weight", kernel, torch_low, expected)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_kernel_with_repeated_tokens(cuda_kernels, dtype):
    g = torch.Generator().manual_seed(3)
    indices = zipf_indices(8192, VOCAB, g).cuda()
    grad = torch.randn(8192, H, generator=g).cuda()
    # fp32 accumulation, one rounding: within PyTorch's error.
    kernel, torch_low, expected = grads(indices, grad, dtype, fp32_accumulate=True)
    assert_within_torch_error("grad_weight (fp32 accumulate)", kernel, torch_low, expected)
    # Packed 16-bit atomics round at every repeat: recursive-summation bound
    # |error| <= (n - 1) * u * sum|g| per row, n = repeats of the row, u = unit roundoff.
    kernel16, _, _ = grads(indices, grad, dtype)
    counts = torch.bincount(indices, minlength=VOCAB).float()
    abs_sum = ref.embedding_backward_ref(grad.abs(), indices, VOCAB, torch.float32)
    u = torch.finfo(dtype).eps / 2
    bound = (counts[:, None].clamp(min=1) * u * abs_sum) + u * expected.abs()
    assert ((kernel16.float() - expected).abs() <= bound + 1e-6).all()


@pytest.mark.gpu
def test_kernel_raises_in_deterministic_mode(cuda_kernels):
    grad = torch.randn(4, H, device="cuda", dtype=torch.float16)
    indices = torch.arange(4, device="cuda")
    torch.use_deterministic_algorithms(True)
    try:
        with pytest.raises(RuntimeError, match="deterministic"):
            embedding_backward(grad, indices, 8, torch.float16)
    finally:
        torch.use_deterministic_algorithms(False)


@pytest.mark.gpu
def test_kernel_binding_rejects_bad_tensors(cuda_kernels):
    raw = torch.ops.bert_kernels_cuda.embedding_backward
    grad = torch.randn(4, H, device="cuda", dtype=torch.float16)
    with pytest.raises(RuntimeError, match="hidden size 1024"):
        raw(grad[:, :768].contiguous(), torch.arange(4, device="cuda"), 8, torch.float16)
    with pytest.raises(RuntimeError, match="int64 or int32"):
        raw(grad, torch.arange(4, device="cuda").float(), 8, torch.float16)
    with pytest.raises(RuntimeError, match="float32"):
        raw(grad, torch.arange(4, device="cuda"), 8, torch.bfloat16)
    assert max_error(raw(grad, torch.arange(4, device="cuda"), 8, torch.float32)[:4], grad) == 0
