"""Dense layers through cuBLASLt epilogues: the bias, GeLU and gradient reductions ride the GEMMs.

Forward: GEMM + bias (epilogue BIAS) and GEMM + bias + GeLU, keeping the pre-activation as the
auxiliary output (GELU_AUX_BIAS). Backward: the weight-gradient GEMM also sums the bias gradient
(BGRADB); in the Linear_GeLU_Linear pattern the second layer's data-gradient GEMM applies GeLU'
and sums the first layer's bias gradient (DGELU_BGRAD); and the gradient of a residual branch
is accumulated into the data-gradient GEMM (C = residual gradient, beta = 1) instead of being
added by autograd afterwards.

GeLU is the tanh approximation: cuBLASLt's GELU epilogues compute that form (PyTorch's
`_addmm_activation` fused path says the same of it), and cuBLASLt documents no erf variant. So
`approximate` must be "tanh": a model with hidden_act "gelu" (erf, BERT's and MLPerf's
reference) would change its activation by up to 4.8e-4 (derivative 8.7e-4) by using these
functions (kernels/reference_dense.py, TANH_VS_ERF_MAX).

Custom ops (torch.ops.bert_kernels.*; cuBLASLt on CUDA tensors, kernels.reference_dense on CPU):
  dense_forward(x, weight, bias?, gelu) -> (y, pre)
  dense_dgrad(grad_y, weight, residual_grad?, gelu_pre?) -> (grad_x, grad_bias)
  dense_wgrad(x, grad_y, bias_grad) -> (grad_weight, grad_bias)

Autograd is a torch.autograd.Function around them, not register_autograd: a custom op may not
return its input, and returning the input unchanged as a second output ("residual") is what
brings the residual branch's gradient into this node's backward, where the GEMM adds it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from kernels import _loader
from kernels import reference_dense as ref

OP = "dense"
FEATURE_MULTIPLE = 8  # cuBLASLt: GeLU aux leading dimension; 16-byte aligned rows


def _check(x: Tensor, weight: Tensor, bias: Tensor | None) -> None:
    """Shape/dtype errors before tracing or launching (the C++ binding checks again)."""
    if x.dim() != 2:
        raise ValueError(f"{OP}: x must be (tokens, in), got {tuple(x.shape)}")
    _check_layer(x.shape[1], x.dtype, x.is_cuda, weight, bias)


def _check_layer(
    in_features: int, dtype: torch.dtype, is_cuda: bool, weight: Tensor, bias: Tensor | None
) -> None:
    """One layer's parameters against its input's features, dtype and device type."""
    if weight.dim() != 2 or weight.shape[1] != in_features:
        raise ValueError(f"{OP}: weight must be (out, {in_features}), got {tuple(weight.shape)}")
    if bias is not None and bias.shape != weight.shape[:1]:
        raise ValueError(f"{OP}: bias must be ({weight.shape[0]},), got {tuple(bias.shape)}")
    if any(t is not None and t.dtype != dtype for t in (weight, bias)):
        raise ValueError(
            f"{OP}: weight and bias must have the input's dtype {dtype}, got "
            f"{[t.dtype for t in (weight, bias) if t is not None]}"
        )
    if is_cuda:
        if dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(
                f"{OP} takes float16 or bfloat16 on CUDA (or run under autocast), got {dtype}"
            )
        for name, n in (("in", in_features), ("out", weight.shape[0])):
            if n % FEATURE_MULTIPLE:
                raise ValueError(
                    f"{OP}: {name} features must be a multiple of "
                    f"{FEATURE_MULTIPLE} for cuBLASLt, got {n}"
                )


def _check_gelu(approximate: str) -> None:
    if approximate != ref.GELU_APPROXIMATE:
        raise ValueError(
            f"{OP}: cuBLASLt's GELU epilogue is the tanh approximation; approximate must be "
            f"'tanh' (hidden_act gelu_tanh), got {approximate!r}. For erf GeLU (hidden_act "
            "gelu) use F.gelu(linear_bias(...)) instead."
        )


# ---- custom ops ---------------------------------------------------------------------------
@torch.library.custom_op("bert_kernels::dense_forward", mutates_args=())
def dense_forward(
    x: Tensor, weight: Tensor, bias: Tensor | None, gelu: bool
) -> tuple[Tensor, Tensor]:
    """x @ weight^T (+ bias) [-> gelu_tanh], one GEMM.

    x: (T, K), weight: (N, K), bias: (N,) or None; fp16/bf16 and contiguous on CUDA, K and N
    multiples of 8. Returns y: (T, N) and pre: (T, N) the pre-activation when gelu, else (0, N).
    """
    run = _loader.implementation(x, OP, "dense_forward", ref.dense_forward_ref)
    return run(x, weight, bias, gelu)


@dense_forward.register_fake
def _(x, weight, bias, gelu):
    _check(x, weight, bias)
    tokens, out = x.shape[0], weight.shape[0]
    return x.new_empty(tokens, out), x.new_empty(tokens if gelu else 0, out)


@torch.library.custom_op("bert_kernels::dense_dgrad", mutates_args=())
def dense_dgrad(
    grad_y: Tensor, weight: Tensor, residual_grad: Tensor | None, gelu_pre: Tensor | None
) -> tuple[Tensor, Tensor]:
    """grad_y @ weight, + residual_grad (beta = 1) or * gelu_tanh'(gelu_pre) (DGELU_BGRAD).

    grad_y: (T, N), weight: (N, K), residual_grad / gelu_pre: (T, K) or None, not both.
    Returns grad_x: (T, K) and grad_bias: (K,) = grad_x summed over tokens when gelu_pre is
    given, else (0,).
    """
    run = _loader.implementation(grad_y, OP, "dense_dgrad", ref.dense_dgrad_ref)
    return run(grad_y, weight, residual_grad, gelu_pre)


@dense_dgrad.register_fake
def _(grad_y, weight, residual_grad, gelu_pre):
    if residual_grad is not None and gelu_pre is not None:
        raise ValueError("dense_dgrad takes residual_grad or gelu_pre, not both")
    tokens, in_features = grad_y.shape[0], weight.shape[1]
    return (
        grad_y.new_empty(tokens, in_features),
        grad_y.new_empty(in_features if gelu_pre is not None else 0),
    )


@torch.library.custom_op("bert_kernels::dense_wgrad", mutates_args=())
def dense_wgrad(x: Tensor, grad_y: Tensor, bias_grad: bool) -> tuple[Tensor, Tensor]:
    """grad_y^T @ x and, with bias_grad, grad_y summed over tokens (BGRADB), one GEMM.

    x: (T, K), grad_y: (T, N). Returns grad_weight: (N, K) and grad_bias: (N,) or (0,).
    """
    run = _loader.implementation(x, OP, "dense_wgrad", ref.dense_wgrad_ref)
    return run(x, grad_y, bias_grad)


@dense_wgrad.register_fake
def _(x, grad_y, bias_grad):
    out = grad_y.shape[1]
    return x.new_empty(out, x.shape[1]), x.new_empty(out if bias_grad else 0)


# ---- autograd -----------------------------------------------------------------------------
class _Linear(torch.autograd.Function):
    """(y, x) with y = x @ weight^T + bias [-> gelu_tanh]; x comes back as the residual."""

    @staticmethod
    def forward(ctx, x, weight, bias, gelu):
        y, pre = dense_forward(x, weight, bias, gelu)
        ctx.save_for_backward(x, weight, pre)
        ctx.has_bias, ctx.gelu = bias is not None, gelu
        ctx.set_materialize_grads(False)  # an unused output's gradient stays None
        return y, x

    @staticmethod
    def backward(ctx, grad_y, grad_residual):
        x, weight, pre = ctx.saved_tensors
        if grad_y is None:
            return grad_residual, None, None, None
        grad_y = grad_y.contiguous()
        if ctx.gelu:  # no GEMM before it to fuse GeLU' into: PyTorch's elementwise kernel
            grad_y = torch.ops.aten.gelu_backward(grad_y, pre, approximate=ref.GELU_APPROXIMATE)
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x, _ = dense_dgrad(grad_y, weight, _contiguous(grad_residual), None)
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            grad_weight, grad_bias = dense_wgrad(x, grad_y, ctx.has_bias)
        return grad_x, grad_weight, grad_bias if ctx.has_bias else None, None


class _LinearGeluLinear(torch.autograd.Function):
    """(y, x) with y = gelu_tanh(x @ w1^T + b1) @ w2^T + b2; x comes back as the residual."""

    @staticmethod
    def forward(ctx, x, w1, b1, w2, b2):
        h, pre = dense_forward(x, w1, b1, True)
        y, _ = dense_forward(h, w2, b2, False)
        ctx.save_for_backward(x, w1, pre, h, w2)
        ctx.has_b1, ctx.has_b2 = b1 is not None, b2 is not None
        ctx.set_materialize_grads(False)
        return y, x

    @staticmethod
    def backward(ctx, grad_y, grad_residual):
        x, w1, pre, h, w2 = ctx.saved_tensors
        if grad_y is None:
            return grad_residual, None, None, None, None
        grad_y = grad_y.contiguous()
        grad_w2, grad_b2 = dense_wgrad(h, grad_y, ctx.has_b2)  # BGRADB
        grad_pre, grad_b1 = dense_dgrad(grad_y, w2, None, pre)  # DGELU_BGRAD
        grad_w1, _ = dense_wgrad(x, grad_pre, False)
        grad_x = None
        if ctx.needs_input_grad[0]:  # + residual, beta = 1
            grad_x, _ = dense_dgrad(grad_pre, w1, _contiguous(grad_residual), None)
        return (
            grad_x,
            grad_w1,
            grad_b1 if ctx.has_b1 else None,
            grad_w2,
            grad_b2 if ctx.has_b2 else None,
        )


def _contiguous(t: Tensor | None) -> Tensor | None:
    return None if t is None else t.contiguous()


def _prepare(x: Tensor, *params: Tensor | None) -> tuple[Tensor | None, ...]:
    """Under autocast, cast to its dtype as F.linear would; fp32 master weights then get fp32
    gradients through the cast's backward."""
    device = x.device.type
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        x, *params = (None if t is None else t.to(dtype) for t in (x, *params))
    return (x, *params)


def linear_bias(
    x: Tensor, weight: Tensor, bias: Tensor | None = None, *, return_residual: bool = False
) -> Tensor | tuple[Tensor, Tensor]:
    """F.linear(x, weight, bias) as one cuBLASLt GEMM with the BIAS epilogue.

    x: (T, K), weight: (N, K), bias: (N,) or None; fp16/bf16 on CUDA (cast under autocast),
    K and N multiples of 8. Returns y: (T, N). The backward computes grad_weight and grad_bias in
    one GEMM (BGRADB). With return_residual, also returns `residual`, x itself (after the
    autocast cast) to be used as the block's residual: its gradient is then added inside the
    data-gradient GEMM (beta = 1) instead of by autograd.
    """
    return _linear(x, weight, bias, False, return_residual)


def linear_bias_gelu(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    *,
    approximate: str = "tanh",
    return_residual: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """F.gelu(F.linear(x, weight, bias), approximate="tanh") as one GEMM (GELU_AUX_BIAS).

    Shapes and dtypes as linear_bias. The pre-activation (T, N) is kept for the backward, which
    runs PyTorch's GeLU' and then the fused weight/bias-gradient GEMM. approximate must be
    "tanh" (see the module docstring).
    """
    _check_gelu(approximate)
    return _linear(x, weight, bias, True, return_residual)


def _linear(
    x: Tensor, weight: Tensor, bias: Tensor | None, gelu: bool, return_residual: bool
) -> Tensor | tuple[Tensor, Tensor]:
    """linear_bias (gelu False) or linear_bias_gelu (True), after their argument checks."""
    x, weight, bias = _prepare(x, weight, bias)
    _check(x, weight, bias)
    if x.is_cuda:
        _loader.require(OP)
    y, residual = _Linear.apply(x, weight, bias, gelu)
    return (y, residual) if return_residual else y


def linear_gelu_linear(
    x: Tensor,
    w1: Tensor,
    b1: Tensor | None,
    w2: Tensor,
    b2: Tensor | None = None,
    *,
    approximate: str = "tanh",
    return_residual: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """F.linear(F.gelu(F.linear(x, w1, b1), approximate="tanh"), w2, b2): BERT's feed-forward.

    x: (T, K); w1: (F, K), b1: (F,); w2: (N, F), b2: (N,) or None (None when the bias goes to
    bias_dropout_residual_layernorm instead); K, F, N multiples of 8. Returns y: (T, N).
    Forward: GELU_AUX_BIAS, then BIAS/DEFAULT. Backward: 4 GEMMs, each with its reduction fused:
    grad_w2 + grad_b2 (BGRADB), grad of the pre-activation + grad_b1 (DGELU_BGRAD), grad_w1, and
    grad_x (+ the residual's gradient with return_residual, beta = 1).
    """
    _check_gelu(approximate)
    x, w1, b1, w2, b2 = _prepare(x, w1, b1, w2, b2)
    _check(x, w1, b1)
    _check_layer(w1.shape[0], x.dtype, x.is_cuda, w2, b2)
    if x.is_cuda:
        _loader.require(OP)
    y, residual = _LinearGeluLinear.apply(x, w1, b1, w2, b2)
    return (y, residual) if return_residual else y
