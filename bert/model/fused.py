"""The fused kernels of the model: one record per `model.fused_*` flag (`FUSED_OPS`).

A record names the kernels/ op it needs, its config flag's description, its shape limits (which
ModelConfig checks, on the CPU too) and the layer functions it replaces
(bert/model/layer_functions.py). ModelConfig declares one flag per record and the model picks
its functions from the records of the flags that are on (`layer_functions`), so adding a
fusion of an existing layer function is its own files (the kernel, kernels/<op>.py, its test
and benchmark) plus one record here, with its replacement functions beside it. The plain-PyTorch
reference of each stays the CPU path and the test oracle. The attention backends are in
bert/model/attention.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType, SimpleNamespace
from typing import TYPE_CHECKING, Callable, Mapping, Optional

import torch
from torch import nn

import kernels
from bert.model.attention import LOW_PRECISION
from bert.model.layer_functions import end_sublayer, gemm_bias, pick_layer_functions
from kernels.bias_dropout_residual_layernorm import bias_dropout_residual_layernorm
from kernels.dense import FEATURE_MULTIPLE, linear_bias, linear_bias_gelu, linear_gelu_linear
from kernels.embedding_backward import embedding as embedding_with_fused_backward
from kernels.reference import HIDDEN
from kernels.softmax_cross_entropy import softmax_cross_entropy

if TYPE_CHECKING:
    from bert.model.config import ModelConfig


@dataclass(frozen=True)
class FusedOp:
    kernel: str  # the kernels/ op (kernels.OPS) the flag switches on
    doc: str  # the model.<flag> description --help-config prints
    # layer function (layer_functions.REFERENCE) -> its fused replacement
    replaces: Mapping[str, Callable]
    # what the flag needs that `cfg` lacks, as "<what> ..., got <value>"; None when it fits
    check: Callable[["ModelConfig"], Optional[str]] = lambda cfg: None
    # the record (benchmarks/results/gpu/...) of the window whose GPU tests passed for this
    # switch; None: not validated on a GPU yet, so off in every config (bert/gpu_status.py)
    gpu_validated: Optional[str] = None


# ---- shape limits ------------------------------------------------------------------------------
def _hidden_1024(cfg: "ModelConfig") -> Optional[str]:
    if cfg.hidden_size == HIDDEN:
        return None
    return (
        f"model.hidden_size={HIDDEN} (the kernel is built for BERT-Large only), got "
        f"{cfg.hidden_size}"
    )


def _padded_vocab(cfg: "ModelConfig", what: str = "") -> Optional[str]:
    if cfg.padded_vocab_size % FEATURE_MULTIPLE == 0:
        return None
    return (
        f"the padded vocabulary{what} to be a multiple of {FEATURE_MULTIPLE}, got "
        f"{cfg.padded_vocab_size} (model.pad_vocab_to_multiple_of="
        f"{cfg.pad_vocab_to_multiple_of})"
    )


def _gemm_features(cfg: "ModelConfig") -> Optional[str]:
    """cuBLASLt's epilogues: in and out features of every fused GEMM a multiple of 8."""
    for name in ("hidden_size", "intermediate_size"):
        if getattr(cfg, name) % FEATURE_MULTIPLE:
            return (
                f"model.{name} to be a multiple of {FEATURE_MULTIPLE} (cuBLASLt GEMM "
                f"features), got {getattr(cfg, name)}"
            )
    return None


def _dense(cfg: "ModelConfig") -> Optional[str]:
    return _gemm_features(cfg) or _padded_vocab(cfg, " (the MLM decoder's output features)")


def _dense_gelu(cfg: "ModelConfig") -> Optional[str]:
    if cfg.hidden_act != "gelu_tanh":
        return (
            f"model.hidden_act=gelu_tanh (cuBLASLt's GeLU epilogue is the tanh "
            f"approximation), got {cfg.hidden_act!r}; with erf gelu (MLPerf's reference "
            f"BERT) use model.fused_dense alone"
        )
    return _gemm_features(cfg)


def _require_low_precision_on_cuda(flag: str, t: torch.Tensor) -> None:
    if t.is_cuda and t.dtype not in LOW_PRECISION:
        raise RuntimeError(
            f"model.{flag}=true needs float16 or bfloat16 activations on CUDA "
            f"(run.precision=bf16 or fp16), got {t.dtype}"
        )


def _require_low_precision_gemm_on_cuda(flag: str, x: torch.Tensor) -> None:
    """The same for a dense kernel's input, which autocast casts inside kernels.dense."""
    autocast = torch.is_autocast_enabled("cuda")
    if not (autocast and torch.get_autocast_dtype("cuda") in LOW_PRECISION):
        _require_low_precision_on_cuda(flag, x)


# ---- the fused layer functions (each one's reference: bert/model/layer_functions.py) ----------
def fused_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """F.linear as one cuBLASLt GEMM with the bias in its epilogue; the backward makes the bias
    gradient inside the weight-gradient GEMM."""
    _require_low_precision_gemm_on_cuda("fused_dense", x)
    return linear_bias(x, weight, bias)


def fused_linear_with_residual(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """linear_with_residual as one cuBLASLt GEMM: the residual's gradient is added in this
    layer's data-gradient GEMM (C = residual gradient, beta = 1). Under autocast the residual
    is x cast to 16 bits."""
    _require_low_precision_gemm_on_cuda("fused_dense", x)
    return linear_bias(x, weight, bias, return_residual=True)


def fused_linear_gelu(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, approximate: str
) -> torch.Tensor:
    """One cuBLASLt GEMM with bias and GeLU in its epilogue. cuBLASLt's GeLU is the tanh form:
    approximate must be "tanh" (the config requires hidden_act=gelu_tanh)."""
    _require_low_precision_gemm_on_cuda("fused_dense_gelu", x)
    return linear_bias_gelu(x, weight, bias, approximate=approximate)


def fused_sublayer_end(y, bias, dropout, layer_norm, residual):
    """LayerNorm(residual + dropout(y + bias)) in one kernel; y (T, hidden) from a bias-free GEMM.

    Under autocast the GEMM's output is fp16/bf16 while the residual, a LayerNorm output, is
    fp32 (autocast runs LayerNorm in fp32), unless fused_dense made it the GEMM's 16-bit input.
    The kernel takes one activation dtype, so the residual is cast and the hidden stream stays
    in 16 bits, as in NVIDIA's fused BERT. The
    dropout mask is kernels.reference.dropout_keep_mask's Philox mask, not torch's.
    """
    _require_low_precision_on_cuda("fused_bias_dropout_residual_layernorm", y)
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
    _require_low_precision_gemm_on_cuda("fused_dense_gelu", x)
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
    _require_low_precision_on_cuda("fused_mlm_loss", logits)
    return softmax_cross_entropy(logits, labels, vocab_size)


# ---- the table: config flag -> kernel, description, shape limits, replaced functions -----------
FUSED_OPS: dict[str, FusedOp] = {
    "fused_bias_dropout_residual_layernorm": FusedOp(
        "bias_dropout_residual_layernorm",
        "end of every attention/FFN sublayer",
        {"sublayer_end": fused_sublayer_end},
        _hidden_1024,
    ),
    "fused_embedding_backward": FusedOp(
        "embedding_backward",
        "word-embedding gradient with packed atomics",
        {"word_embedding": fused_backward_word_embedding},
        _hidden_1024,
    ),
    "fused_mlm_loss": FusedOp(
        "softmax_cross_entropy",
        "MLM softmax cross-entropy, its gradient made in the forward",
        {"mlm_cross_entropy": fused_mlm_cross_entropy},
        _padded_vocab,
    ),
    "fused_dense": FusedOp(
        "dense",
        "cuBLASLt dense layers (kernels/dense.py), the bias, GeLU and gradient reductions in "
        "the GEMMs' epilogues; every dense layer's in and out features must be multiples of 8. "
        "fused_dense: GEMM + bias as one GEMM (bias gradient inside the weight-gradient GEMM) "
        "for QKV, attention output, FFN (unless fused_dense_gelu), MLM transform, decoder and "
        "pooler; the residual's gradient is added inside the QKV/FFN data-gradient GEMM. Fits "
        "either GeLU.",
        {"linear": fused_linear, "linear_with_residual": fused_linear_with_residual},
        _dense,
    ),
    "fused_dense_gelu": FusedOp(
        "dense",
        "fused_dense_gelu: GEMM + bias + GeLU as one GEMM, and GeLU' + bias gradient inside the "
        "next data-gradient GEMM: FFN and MLM transform. cuBLASLt's GeLU is the tanh "
        "approximation, so it needs hidden_act=gelu_tanh: open division / experimental "
        "(MLPerf's BERT uses erf gelu).",
        {"linear_gelu": fused_linear_gelu, "feed_forward": fused_gelu_feed_forward},
        _dense_gelu,
    ),
}
# Config flag -> the kernels/ op it switches on.
FUSED_KERNELS = {flag: op.kernel for flag, op in FUSED_OPS.items()}


def enabled(cfg: "ModelConfig") -> list[str]:
    """The fused flags on in `cfg`, in FUSED_OPS order."""
    return [flag for flag in FUSED_OPS if getattr(cfg, flag)]


def layer_functions(
    cfg: "ModelConfig", own: Mapping[str, Callable] = MappingProxyType({})
) -> SimpleNamespace:
    """The functions the layers of a model with `cfg` call: each flag's replacements over the
    references (ModelConfig refuses two flags that replace the same function), then `own`, a
    module's own replacements (model.fp8_linear's encoder GEMMs, which hold per-GEMM state)."""
    replacements: dict[str, Callable] = {}
    for flag in enabled(cfg):
        replacements.update(FUSED_OPS[flag].replaces)
    return pick_layer_functions({**replacements, **own})


def require_fused_kernels(cfg: "ModelConfig", device: torch.device | str) -> None:
    """On CUDA, fail now, with the build hint, for every fused kernel `cfg` asks for that this
    process cannot load (rather than at the first step). On the CPU their PyTorch twins run."""
    if torch.device(device).type != "cuda":
        return
    for flag in enabled(cfg):
        try:
            kernels.require(FUSED_OPS[flag].kernel)
        except RuntimeError as err:
            raise RuntimeError(f"model.{flag}=true: {err}") from err
