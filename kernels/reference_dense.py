"""Plain-PyTorch twins of the cuBLASLt dense layers (kernels/dense.py): oracle and CPU path.

As in kernels/reference.py, two kinds of function:
- `linear_ref`, `linear_gelu_ref`, `linear_gelu_linear_ref`: the unfused compositions the model
  would otherwise run, differentiable by autograd;
- `dense_forward_ref`, `dense_dgrad_ref`, `dense_wgrad_ref`: the exact contract of the three
  CUDA entry points (fp32 math, one rounding to the inputs' dtype, like a GEMM with fp32
  accumulation and its epilogue), with the backward written out by hand.

GeLU is the tanh approximation throughout: cuBLASLt's GELU epilogues compute that form
(kernels/VALIDATION.md, "GeLU in dense"), so the twins do too. It differs from BERT's erf GeLU
by at most TANH_VS_ERF_MAX (4.8e-4) in value and TANH_VS_ERF_GRAD_MAX (8.7e-4) in derivative.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

GELU_APPROXIMATE = "tanh"
# Bounds on max over x of |gelu_tanh(x) - gelu_erf(x)| (4.73e-4, at x ~ 2.70) and of their
# derivatives (8.68e-4, at x ~ -2.02), measured in fp64 on a 1e-5 grid over [-10, 10];
# tests/kernels/test_dense.py re-measures both.
TANH_VS_ERF_MAX = 4.8e-4
TANH_VS_ERF_GRAD_MAX = 8.7e-4


# ---- the unfused compositions -------------------------------------------------------------
def linear_ref(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """F.linear: x (T, K), weight (N, K), bias (N,) or None -> (T, N)."""
    return F.linear(x, weight, bias)


def linear_gelu_ref(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """gelu_tanh(F.linear(x, weight, bias)) -> (T, N)."""
    return F.gelu(F.linear(x, weight, bias), approximate=GELU_APPROXIMATE)


def linear_gelu_linear_ref(
    x: Tensor, w1: Tensor, b1: Tensor | None, w2: Tensor, b2: Tensor | None
) -> Tensor:
    """BERT's feed-forward without dropout/residual: x (T, K), w1 (F, K), w2 (K2, F) -> (T, K2)."""
    return F.linear(linear_gelu_ref(x, w1, b1), w2, b2)


# ---- the CUDA entry points' contracts -----------------------------------------------------
def _acc(t: Tensor) -> torch.dtype:
    """fp32 math as in the GEMM (fp64 inputs keep fp64, for exact CPU checks)."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def dense_forward_ref(
    x: Tensor, weight: Tensor, bias: Tensor | None, gelu: bool
) -> tuple[Tensor, Tensor]:
    """-> (y (T, N), pre (T, N) with gelu else (0, N)), both in x.dtype.

    pre = x @ weight^T + bias in fp32, rounded once; y = gelu_tanh(pre) from the fp32 value
    (the epilogue applies GeLU before rounding), or pre itself without gelu.
    """
    acc = _acc(x)
    pre = x.to(acc) @ weight.to(acc).t()
    if bias is not None:
        pre = pre + bias.to(acc)
    y = F.gelu(pre, approximate=GELU_APPROXIMATE) if gelu else pre
    saved = pre if gelu else pre.new_empty(0, weight.shape[0])
    return y.to(x.dtype), saved.to(x.dtype)


def dense_dgrad_ref(
    grad_y: Tensor, weight: Tensor, residual_grad: Tensor | None, gelu_pre: Tensor | None
) -> tuple[Tensor, Tensor]:
    """-> (grad_x (T, K), grad_bias (K,) with gelu_pre else (0,)), in grad_y.dtype.

    g = grad_y @ weight in fp32. With residual_grad: grad_x = g + residual_grad (beta = 1).
    With gelu_pre: grad_x = gelu_tanh'(gelu_pre) * g and grad_bias = grad_x summed over tokens
    (DGELU_BGRAD). Not both.
    """
    if residual_grad is not None and gelu_pre is not None:
        raise ValueError("dense_dgrad takes residual_grad or gelu_pre, not both")
    acc = _acc(grad_y)
    g = grad_y.to(acc) @ weight.to(acc)
    grad_bias = g.new_empty(0)
    if gelu_pre is not None:
        g = torch.ops.aten.gelu_backward(g, gelu_pre.to(acc), approximate=GELU_APPROXIMATE)
        grad_bias = g.sum(0)
    if residual_grad is not None:
        g = g + residual_grad.to(acc)
    return g.to(grad_y.dtype), grad_bias.to(grad_y.dtype)


def dense_wgrad_ref(x: Tensor, grad_y: Tensor, bias_grad: bool) -> tuple[Tensor, Tensor]:
    """-> (grad_weight (N, K), grad_bias (N,) if bias_grad else (0,)), in x.dtype.

    grad_weight = grad_y^T @ x and grad_bias = grad_y summed over tokens (BGRADB), in fp32.
    """
    acc = _acc(x)
    gy = grad_y.to(acc)
    grad_bias = gy.sum(0) if bias_grad else gy.new_empty(0)
    return (gy.t() @ x.to(acc)).to(x.dtype), grad_bias.to(x.dtype)
