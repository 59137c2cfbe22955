"""The fused-kernel choices of the model: one config flag per fusion (kernels/).

Every fused path has a plain-PyTorch reference beside it; the reference is the CPU path and the
test oracle. The model picks each function once, when it is built (`*_impl(flag)`), so its
forward has no branches on flags. The attention backends are in bert/model/attention.py.

`FUSED_OPS` is the table of fusions: per `model.fused_*` flag, the kernels/ op it needs and its
shape limits, which ModelConfig checks (on the CPU too). Adding a fusion: the kernel
(kernels/<op>.py), a `FusedOp` entry and an `*_impl` pair here, the flag in ModelConfig, and
the `*_impl` call where the model builds the layer it replaces.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

import kernels
from bert.model.attention import LOW_PRECISION
from kernels.bias_dropout_residual_layernorm import bias_dropout_residual_layernorm
from kernels.dense import FEATURE_MULTIPLE, linear_bias, linear_bias_gelu, linear_gelu_linear
from kernels.embedding_backward import embedding as embedding_with_fused_backward
from kernels.reference import HIDDEN
from kernels.softmax_cross_entropy import softmax_cross_entropy

if TYPE_CHECKING:
    from bert.model.config import ModelConfig


# ---- the table: config flag -> kernel and shape limits ------------------------------------------
@dataclass(frozen=True)
class FusedOp:
    kernel: str  # the kernels/ op (kernels.OPS) the flag switches on
    # what the flag needs that `cfg` lacks, as "<what> ..., got <value>"; None when it fits
    check: Callable[["ModelConfig"], Optional[str]]
    # the record (benchmarks/results/gpu/...) of the window whose GPU tests passed for this
    # switch; None: not validated on a GPU yet, so off in every config (bert/gpu_status.py)
    gpu_validated: Optional[str] = None


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


FUSED_OPS: dict[str, FusedOp] = {
    "fused_bias_dropout_residual_layernorm": FusedOp(
        "bias_dropout_residual_layernorm", _hidden_1024
    ),
    "fused_embedding_backward": FusedOp("embedding_backward", _hidden_1024),
    "fused_mlm_loss": FusedOp("softmax_cross_entropy", _padded_vocab),
    "fused_dense": FusedOp("dense", _dense),
    "fused_dense_gelu": FusedOp("dense", _dense_gelu),
}
# Config flag -> the kernels/ op it switches on.
FUSED_KERNELS = {flag: op.kernel for flag, op in FUSED_OPS.items()}


def require_fused_kernels(cfg: "ModelConfig", device: torch.device | str) -> None:
    """On CUDA, fail now, with the build hint, for every fused kernel `cfg` asks for that this
    process cannot load (rather than at the first step). On the CPU their PyTorch twins run."""
    if torch.device(device).type != "cuda":
        return
    for flag, op in FUSED_KERNELS.items():
        if getattr(cfg, flag):
            try:
                kernels.require(op)
            except RuntimeError as err:
                raise RuntimeError(f"model.{flag}=true: {err}") from err


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


# ---- dense layers (model.fused_dense, model.fused_dense_gelu) -----------------------------------
# A dense layer with F.linear's signature: (x (T, in), weight (out, in), bias (out,) or None)
# -> (T, out).
Linear = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]


def fused_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """F.linear as one cuBLASLt GEMM with the bias in its epilogue; the backward makes the bias
    gradient inside the weight-gradient GEMM."""
    _require_low_precision_gemm_on_cuda("fused_dense", x)
    return linear_bias(x, weight, bias)


def linear_impl(fused: bool) -> Linear:
    return fused_linear if fused else F.linear


# A block's first dense layer, whose input is also the block's residual:
# (x (T, in), weight (out, in), bias (out,)) -> (y (T, out), residual (T, in)).
# Add `residual`, not x, at the end of the block: with fused_dense its gradient then joins this
# layer's data-gradient GEMM (C = residual gradient, beta = 1) instead of a separate add.
def linear_with_residual(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference: (F.linear(x, weight, bias), x)."""
    return F.linear(x, weight, bias), x


def fused_linear_with_residual(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same as one cuBLASLt GEMM. Under autocast the residual is x cast to 16 bits."""
    _require_low_precision_gemm_on_cuda("fused_dense", x)
    return linear_bias(x, weight, bias, return_residual=True)


def linear_with_residual_impl(fused: bool) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    return fused_linear_with_residual if fused else linear_with_residual


# gelu(F.linear(x, weight, bias)): (x (T, in), weight (out, in), bias (out,), approximate)
# -> (T, out).
def linear_gelu(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    approximate: str,
    linear: Linear = F.linear,
) -> torch.Tensor:
    """Reference; with linear=fused_linear (fused_dense alone) the GeLU stays PyTorch's."""
    return F.gelu(linear(x, weight, bias), approximate=approximate)


def fused_linear_gelu(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, approximate: str
) -> torch.Tensor:
    """One cuBLASLt GEMM with bias and GeLU in its epilogue. cuBLASLt's GeLU is the tanh form:
    approximate must be "tanh" (the config requires hidden_act=gelu_tanh)."""
    _require_low_precision_gemm_on_cuda("fused_dense_gelu", x)
    return linear_bias_gelu(x, weight, bias, approximate=approximate)


def linear_gelu_impl(fused_dense: bool, fused_dense_gelu: bool) -> Callable[..., torch.Tensor]:
    if fused_dense_gelu:
        return fused_linear_gelu
    return functools.partial(linear_gelu, linear=fused_linear) if fused_dense else linear_gelu


# The end of a post-LN sublayer, LayerNorm(residual + dropout(dense(h))):
# (h (T, in), dense, dropout, layer_norm, residual (T, hidden)) -> (T, hidden).
SublayerOutput = Callable[
    [torch.Tensor, nn.Linear, nn.Dropout, nn.LayerNorm, torch.Tensor], torch.Tensor
]


def sublayer_output(h, dense, dropout, layer_norm, residual, linear: Linear = F.linear):
    """Reference: LayerNorm(residual + dropout(dense(h))); linear=fused_linear with fused_dense."""
    return add_and_norm(linear(h, dense.weight, dense.bias), dropout, layer_norm, residual)


def add_and_norm(y, dropout, layer_norm, residual):
    """LayerNorm(residual + dropout(y)), y (T, hidden) with its bias. The add is in the
    LayerNorm's dtype: a no-op cast for the reference, whose residual is a LayerNorm output;
    with fused_dense under autocast the residual is the GEMM's 16-bit input, and the sum stays
    fp32 as in the reference instead of being rounded to 16 bits first."""
    return layer_norm(residual.to(layer_norm.weight.dtype) + dropout(y))


def fused_sublayer_output(h, dense, dropout, layer_norm, residual, linear: Linear = F.linear):
    """The same, with bias + dropout + residual + LayerNorm in one kernel after a bias-free GEMM
    (linear=fused_linear with fused_dense)."""
    return fused_sublayer_end(
        linear(h, dense.weight, None), dense.bias, dropout, layer_norm, residual
    )


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


def sublayer_output_impl(fused: bool, fused_dense: bool = False) -> SublayerOutput:
    """fused: model.fused_bias_dropout_residual_layernorm; fused_dense: model.fused_dense."""
    output = fused_sublayer_output if fused else sublayer_output
    return functools.partial(output, linear=fused_linear) if fused_dense else output


# A post-LN feed-forward sublayer, LayerNorm(x + dropout(output(gelu(intermediate(x))))):
# (x (T, hidden), intermediate, output, dropout, layer_norm, approximate) -> (T, hidden).
FeedForwardSublayer = Callable[
    [torch.Tensor, nn.Linear, nn.Linear, nn.Dropout, nn.LayerNorm, str], torch.Tensor
]


def feed_forward(
    x,
    intermediate,
    output,
    dropout,
    layer_norm,
    approximate,
    first=linear_with_residual,
    sublayer_output: SublayerOutput = sublayer_output,
):
    """Reference; first/sublayer_output: their fused_dense and fused LayerNorm variants."""
    pre, residual = first(x, intermediate.weight, intermediate.bias)
    return sublayer_output(
        F.gelu(pre, approximate=approximate), output, dropout, layer_norm, residual
    )


def fused_gelu_feed_forward(x, intermediate, output, dropout, layer_norm, approximate):
    """model.fused_dense_gelu: both GEMMs and the GeLU in one autograd node. Forward: GEMM + bias
    + GeLU (pre-activation kept), GEMM + bias. Backward: GeLU' and the first bias gradient ride
    the second layer's data-gradient GEMM, the other bias gradient its weight-gradient GEMM, the
    residual's gradient the first layer's data-gradient GEMM. approximate must be "tanh"."""
    _require_low_precision_gemm_on_cuda("fused_dense_gelu", x)
    y, residual = linear_gelu_linear(
        x,
        intermediate.weight,
        intermediate.bias,
        output.weight,
        output.bias,
        approximate=approximate,
        return_residual=True,
    )
    return add_and_norm(y, dropout, layer_norm, residual)


def fused_gelu_feed_forward_fused_end(x, intermediate, output, dropout, layer_norm, approximate):
    """The same with the output bias left to the fused bias + dropout + residual + LayerNorm."""
    _require_low_precision_gemm_on_cuda("fused_dense_gelu", x)
    y, residual = linear_gelu_linear(
        x,
        intermediate.weight,
        intermediate.bias,
        output.weight,
        None,
        approximate=approximate,
        return_residual=True,
    )
    return fused_sublayer_end(y, output.bias, dropout, layer_norm, residual)


def feed_forward_impl(
    fused: bool, fused_dense: bool = False, fused_dense_gelu: bool = False
) -> FeedForwardSublayer:
    """fused: model.fused_bias_dropout_residual_layernorm; then the two dense flags."""
    if fused_dense_gelu:
        return fused_gelu_feed_forward_fused_end if fused else fused_gelu_feed_forward
    if not (fused or fused_dense):
        return feed_forward
    return functools.partial(
        feed_forward,
        first=linear_with_residual_impl(fused_dense),
        sublayer_output=sublayer_output_impl(fused, fused_dense),
    )


# Word-embedding lookup: (input_ids (T,), table) -> (T, hidden).
def word_embedding(input_ids: torch.Tensor, table: nn.Embedding) -> torch.Tensor:
    return table(input_ids)


def fused_backward_word_embedding(input_ids: torch.Tensor, table: nn.Embedding) -> torch.Tensor:
    """The same lookup; its weight gradient is the kernels' atomic scatter-add instead of
    PyTorch's sort and segment reduction."""
    return embedding_with_fused_backward(input_ids, table.weight)


def compiled_impl(
    fn: Callable[..., torch.Tensor], compile_sublayers: bool
) -> Callable[..., torch.Tensor]:
    """model.compile_sublayers: `fn` under torch.compile, the competitor to the hand-written
    fusions. dynamic=True keeps the token count symbolic, so one graph serves every batch; the
    modules are arguments, not constants, so one graph also serves every layer (measured on
    CPU: 1 graph for 12 layers x 3 token counts; tests/unit/test_compile_sublayers.py)."""
    return torch.compile(fn, dynamic=True) if compile_sublayers else fn


def word_embedding_impl(fused: bool) -> Callable[[torch.Tensor, nn.Embedding], torch.Tensor]:
    return fused_backward_word_embedding if fused else word_embedding


# MLM loss: (logits (M, padded_vocab), labels (M,) int64, vocab_size) -> mean over the M rows.
def mlm_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Reference. The vocabulary padding columns are dropped so they never enter the softmax."""
    return F.cross_entropy(logits[:, :vocab_size].float(), labels)


def fused_mlm_cross_entropy(
    logits: torch.Tensor, labels: torch.Tensor, vocab_size: int
) -> torch.Tensor:
    """The same loss; the forward also writes softmax - one_hot in the logits' dtype, so no fp32
    copy of the logits is made and the backward is one scaling."""
    _require_low_precision_on_cuda("fused_mlm_loss", logits)
    return softmax_cross_entropy(logits, labels, vocab_size)


def mlm_cross_entropy_impl(
    fused: bool,
) -> Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]:
    return fused_mlm_cross_entropy if fused else mlm_cross_entropy
