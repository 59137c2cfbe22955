"""Fused CUDA kernels for unpadded BERT-Large (hidden 1024, fp16/bf16), each with a reference twin.

Importing this package never fails for lack of a build and never touches the GPU. It registers
the custom ops `torch.ops.bert_kernels.*` (fake and autograd included, so they compose with
torch.compile and CUDA graphs); on CPU tensors they run their plain-PyTorch twins from
`kernels.reference`. A fused path that a configuration asks for calls `require(name)`, which
raises the original load error with a hint on how to build. Every kernel stays off by default
until validated on a GPU (kernels/VALIDATION.md).

    import kernels
    from kernels.bias_dropout_residual_layernorm import bias_dropout_residual_layernorm
    kernels.require("bias_dropout_residual_layernorm")      # or: if kernels.available(): ...
    y = bias_dropout_residual_layernorm(x, bias, residual, weight, ln_bias, p=0.1)
"""
# The op modules register their custom ops on import; they need torch, not the extension.
from kernels import bias_dropout_residual_layernorm, embedding_backward, softmax_cross_entropy
from kernels import dense
from kernels import lamb
from kernels._loader import available, load_error, require
from kernels._library import OPS

__all__ = ["OPS", "available", "load_error", "require", "bias_dropout_residual_layernorm",
           "embedding_backward", "softmax_cross_entropy", "dense", "lamb"]
