"""The fused layer functions of bert/model/fused.py's records, each one's reference in
bert/model/layer_functions.py: a record names them by dotted path, so the config reads the
records without importing torch (bert/core/lazy.py); the model imports this module when it
picks its functions (fused.layer_functions).
"""

from __future__ import annotations

import torch
from torch import nn

from bert.model.attention import LOW_PRECISION
from bert.model.layer_functions import end_sublayer, gemm_bias
from kernels.bias_dropout_residual_layernorm import bias_dropout_residual_layernorm
from kernels.dense import linear_bias, linear_bias_gelu, linear_gelu_linear
from kernels.embedding_backward import embedding as embedding_with_fused_backward
from kernels.softmax_cross_entropy import softmax_cross_entropy


def require_low_precision_on_cuda(flag: str, t: torch.Tensor) -> None:
    if t.is_cuda and t.dtype not in LOW_PRECISION:
        raise RuntimeError(
            f"model.{flag}=true needs float16 or bfloat16 activations on CUDA "
            f"(run.precision=bf16 or fp16), got {t.dtype}"
        )


def require_low_precision_gemm_on_cuda(flag: str, x: torch.Tensor) -> None:
    """The same for a dense kernel's input, which autocast casts inside kernels.dense."""
    autocast = torch.is_autocast_enabled("cuda")
    if not (autocast and torch.get_autocast_dtype("cuda") in LOW_PRECISION):
        require_low_precision_on_cuda(flag, x)


# ---- the fused layer functions (each one's reference: bert/model/layer_functions.py) ----------
def fused_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """F.linear as one cuBLASLt GEMM with the bias in its epilogue; the backward makes the bias
    gradient inside the weight-gradient GEMM."""
    require_low_precision_gemm_on_cuda("fused_dense", x)
    return linear_bias(x, weight, bias)


def fused_linear_with_residual(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """linear_with_residual as one cuBLASLt GEMM: the residual's gradient is added in this
    layer's data-gradient GEMM (C = residual gradient, beta = 1). Under autocast the residual
    is x cast to 16 bits."""
    require_low_precision_gemm_on_cuda("fused_dense", x)
    return linear_bias(x, weight, bias, return_residual=True)


def fused_linear_gelu(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, approximate: str
) -> torch.Tensor:
    """One cuBLASLt GEMM with bias and GeLU in its epilogue. cuBLASLt's GeLU is the tanh form:
    approximate must be "tanh" (the config requires hidden_act=gelu_tanh)."""
    require_low_precision_gemm_on_cuda("fused_dense_gelu", x)
    return linear_bias_gelu(x, weight, bias, approximate=approximate)


def fused_sublayer_end(y, bias, dropout, layer_norm, residual):
    """LayerNorm(residual + dropout(y + bias)) in one kernel; y (T, hidden) from a bias-free GEMM.

    Under autocast the GEMM's output is fp16/bf16 while the residual, a LayerNorm output, is
    fp32 (autocast runs LayerNorm in fp32), unless fused_dense made it the GEMM's 16-bit input.
    The kernel takes one activation dtype, so the residual is cast and the hidden stream stays
    in 16 bits, as in NVIDIA's fused BERT. The
    dropout mask is kernels.reference.dropout_keep_mask's Philox mask, not torch's.
    """
    require_low_precision_on_cuda("fused_bias_dropout_residual_layernorm", y)
    return bias_dropout_residual_layernorm(
        y,
        bias,
        residual.to(y.dtype),
        layer_norm.weight,
        layer_norm.bias,
        p=dropout.p,
        eps=layer_norm.eps,
        training=dropout.training,
    )


def fused_gelu_feed_forward(
    x, intermediate, output, dropout, layer_norm, approximate, *, sublayer_end=None
):
    """model.fused_dense_gelu: both GEMMs and the GeLU in one autograd node. Forward: GEMM + bias
    + GeLU (pre-activation kept), GEMM (+ bias unless sublayer_end adds it). Backward: GeLU' and
    the first bias gradient ride the second layer's data-gradient GEMM, the other bias gradient
    its weight-gradient GEMM, the residual's gradient the first layer's data-gradient GEMM.
    approximate must be "tanh"."""
    require_low_precision_gemm_on_cuda("fused_dense_gelu", x)
    y, residual = linear_gelu_linear(
        x,
        intermediate.weight,
        intermediate.bias,
        output.weight,
        gemm_bias(output.bias, sublayer_end),
        approximate=approximate,
        return_residual=True,
    )
    return end_sublayer(y, output.bias, dropout, layer_norm, residual, sublayer_end)


def fused_backward_word_embedding(input_ids: torch.Tensor, table: nn.Embedding) -> torch.Tensor:
    """The same lookup; its weight gradient is the kernels' atomic scatter-add instead of
    PyTorch's sort and segment reduction."""
    return embedding_with_fused_backward(input_ids, table.weight)


def fused_mlm_cross_entropy(
    logits: torch.Tensor, labels: torch.Tensor, vocab_size: int
) -> torch.Tensor:
    """The same loss; the forward also writes softmax - one_hot in the logits' dtype, so no fp32
    copy of the logits is made and the backward is one scaling."""
    require_low_precision_on_cuda("fused_mlm_loss", logits)
    return softmax_cross_entropy(logits, labels, vocab_size)
