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

import importlib

from kernels._library import OPS
from kernels._loader import available, load_error, require

# The op modules (kernels/<op>.py, one per kernels/csrc/<op>/) register their custom ops on
# import; they need torch, not the extension. Found from the sources: a new op edits no list.
for _op in OPS:
    importlib.import_module(f"kernels.{_op}")

__all__ = ["OPS", "available", "load_error", "require", *OPS]
