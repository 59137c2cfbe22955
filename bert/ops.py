"""The one place that picks an implementation for each op the model uses.

Every fused path has a plain-PyTorch reference beside it; the reference is the CPU path and the
test oracle. A backend is chosen by a config value, never by probing the hardware at import.
For the fused kernels of kernels/, the model picks each function once, when it is built
(`*_impl(flag)`), so its forward has no branches on flags.
"""
from __future__ import annotations

import functools
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

import kernels
from bert.config import ATTENTION_BACKENDS, ModelConfig
from bert.padding import key_padding_mask, pad_tokens, unpad_tokens
from data.batching import PackedBatch
from kernels.bias_dropout_residual_layernorm import bias_dropout_residual_layernorm
from kernels.dense import linear_bias, linear_bias_gelu, linear_gelu_linear
from kernels.embedding_backward import embedding as embedding_with_fused_backward
from kernels.softmax_cross_entropy import softmax_cross_entropy

LOW_PRECISION = (torch.float16, torch.bfloat16)


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                     max_seqlen: int, token_index: torch.Tensor, dropout_p: float,
                     backend: str = "padded_sdpa",
                     groups: PackedBatch | None = None) -> torch.Tensor:
    """Bidirectional self-attention within each packed sequence.

    q, k, v: (T, heads, head_dim); cu_seqlens: (B+1,) int32; token_index: (T,) int64.
    groups: the batch whose group_* fields hold its length groups (grouped_flash only).
    Returns (T, heads, head_dim). Tokens never attend across sequence boundaries.
    """
    if backend == "padded_sdpa":
        return padded_sdpa_attention(q, k, v, cu_seqlens, max_seqlen, token_index, dropout_p)
    if backend == "flash_varlen":
        return flash_varlen_attention(q, k, v, cu_seqlens, max_seqlen, dropout_p)
    if backend == "per_sequence":
        return per_sequence_attention(q, k, v, cu_seqlens, dropout_p)
    if backend == "grouped_flash":
        return grouped_attention(q, k, v, groups, dropout_p)
    raise ValueError(f"unknown attention backend {backend!r}; expected one of "
                     f"{ATTENTION_BACKENDS}")


def padded_sdpa_attention(q, k, v, cu_seqlens, max_seqlen, token_index, dropout_p):
    """Reference: pad only inside attention, run masked SDPA, unpad. Exact on any device."""
    batch = cu_seqlens.shape[0] - 1
    # (B, S, h, d) -> (B, h, S, d), the layout SDPA expects.
    qp, kp, vp = (pad_tokens(t, token_index, batch, max_seqlen).transpose(1, 2)
                  for t in (q, k, v))
    mask = key_padding_mask(cu_seqlens, max_seqlen)[:, None, None, :]
    out = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=mask, dropout_p=dropout_p)
    return unpad_tokens(out.transpose(1, 2), token_index)


def flash_varlen_attention(q, k, v, cu_seqlens, max_seqlen, dropout_p):
    """PyTorch's flash-attention varlen kernel on packed tokens (CUDA, fp16/bf16, with dropout).

    Not yet validated on a GPU in this project: configs keep model.attention=padded_sdpa until
    tests/kernels/test_attention.py has passed on one.
    """
    if not q.is_cuda or q.dtype not in (torch.float16, torch.bfloat16):
        raise RuntimeError("model.attention=flash_varlen needs CUDA tensors in fp16 or bf16 "
                           f"(got {q.device}, {q.dtype}); use padded_sdpa")
    out = torch.ops.aten._flash_attention_forward(
        q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, dropout_p, False, False)[0]
    return out


def per_sequence_attention(q, k, v, cu_seqlens, dropout_p):
    """CPU path: attention one sequence at a time, so the work is sum(l_i^2), not B * max^2.

    With REFERENCE 2's length mix a local batch of 16 has sum(l_i^2) of about 0.4 * B * 512^2,
    and nothing is padded, masked or scattered. The lengths are read from cu_seqlens on the
    host: free for a CPU tensor, a device sync per layer on a GPU, so CUDA tensors are refused
    (flash_varlen is the GPU path).
    q, k, v: (T, heads, head_dim); cu_seqlens: (B+1,) int32. Returns (T, heads, head_dim).
    """
    if q.is_cuda:
        raise RuntimeError("model.attention=per_sequence is the CPU path (it reads sequence "
                           "lengths on the host); use flash_varlen or padded_sdpa on CUDA")
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()  # CPU tensor: no device sync
    if dropout_p > 0.0:
        # Dropout's 1/(1-p) rescaling on V costs T*d multiplies instead of l^2 per sequence.
        v = v * (1.0 / (1.0 - dropout_p))
    # One transpose to (h, T, d): every sequence is then a (h, l, d) block whose matrices are
    # contiguous, which the batched GEMM needs to run at full speed (strided views: several x).
    # split() rather than slicing: its backward is one cat, not one full-size zero tensor per slice.
    qs, ks, vs = (t.transpose(0, 1).contiguous().split(lengths, dim=1) for t in (q, k, v))
    outs = [_sequence_attention(qi, ki, vi, dropout_p) for qi, ki, vi in zip(qs, ks, vs)]
    return torch.cat(outs, dim=1).transpose(0, 1)


def _sequence_attention(q, k, v, dropout_p):
    """One sequence, no mask needed. q, k, v: (h, l, d) -> (h, l, d).

    Without dropout SDPA's fused CPU kernel is fastest; with dropout SDPA falls back to a math
    path with masked-row handling we do not need, so the math is written out here. V arrives
    already scaled by 1/(1-p), so dropping is a multiply by a 0/1 mask. The mask comes from
    uniform floats (rand >= p: exact to 2^-24) rather than bernoulli_, and is kept as floats:
    on the CPU that is about 2x faster for the l^2 probabilities (bool masks need conversions).
    """
    if dropout_p == 0.0:
        return F.scaled_dot_product_attention(q, k, v)
    scale = q.shape[-1] ** -0.5
    probs = torch.softmax(torch.matmul(q * scale, k.transpose(1, 2)), dim=-1)
    keep = torch.rand_like(probs).ge_(dropout_p)
    return torch.matmul(probs * keep, v)


# ---- grouped multi-stream attention (seed 000, IV-A-2) ---------------------------------------
def grouped_attention(q, k, v, batch: PackedBatch | None, dropout_p):
    """Sequences grouped by length, one attention launch per group, each on its own CUDA stream.

    One launch sized to the batch's longest sequence wastes work (padded_sdpa) or picks a kernel
    tuned for 512 (flash) when most sequences are short; per group, the launch is sized to the
    group's longest. The host made the groups (data.batching.attention_groups) and every shape
    comes from batch.group_shapes, so nothing is read back from the device.
    q, k, v: (T, heads, head_dim). Returns (T, heads, head_dim).
    """
    if batch is None or batch.group_order is None:
        raise ValueError("model.attention=grouped_flash needs the batch's length groups "
                         "(PackedBatch.group_*, made by data.batching.pack_samples)")
    shapes = batch.group_shapes
    token_counts = [tokens for _, tokens, _ in shapes]
    # One gather into group order for q, k and v: its backward is one scatter, not one per group.
    qs, ks, vs = (t.index_select(0, batch.group_order).split(token_counts) for t in (q, k, v))
    cu_seqlens = batch.group_cu_seqlens.split([seqs + 1 for seqs, _, _ in shapes])
    token_index = batch.group_token_index.split(token_counts)
    launches = [functools.partial(_group_attention, qs[g], ks[g], vs[g], cu_seqlens[g],
                                  shapes[g][2], token_index[g], dropout_p)
                for g in range(len(shapes))]
    outs = _run_concurrently(launches, q.device)
    return torch.cat(outs).index_select(0, batch.group_inverse)


def _group_attention(q, k, v, cu_seqlens, max_seqlen, token_index, dropout_p):
    """One group: flash varlen where it runs (CUDA fp16/bf16), else padded SDPA (exact)."""
    if q.is_cuda and q.dtype in LOW_PRECISION:
        return flash_varlen_attention(q, k, v, cu_seqlens, max_seqlen, dropout_p)
    return padded_sdpa_attention(q, k, v, cu_seqlens, max_seqlen, token_index, dropout_p)


_SIDE_STREAMS: dict[torch.device, list] = {}


def _side_streams(device: torch.device, count: int) -> list:
    """CUDA streams made on first use and reused by every layer and step."""
    streams = _SIDE_STREAMS.setdefault(device, [])
    while len(streams) < count:
        streams.append(torch.cuda.Stream(device))
    return streams[:count]


def _run_concurrently(launches: list[Callable[[], torch.Tensor]],
                      device: torch.device) -> list[torch.Tensor]:
    """Run independent launches side by side: the first on the current stream, each other on
    a side stream. The side streams wait for the current one first (q, k, v are ready), and
    the current stream waits for all of them after (the scatter reads every output):
    wait_stream records and waits on the events that order the seed's kernels A -> FMHA -> C.
    Autograd runs each backward on its forward's stream, so the backward overlaps too.
    Elsewhere (CPU) the launches run in turn.
    """
    if device.type != "cuda" or len(launches) == 1:
        return [launch() for launch in launches]
    current = torch.cuda.current_stream(device)
    side = _side_streams(device, len(launches) - 1)
    for stream in side:  # before the first launch, so no side stream waits for it
        stream.wait_stream(current)
    outs = [launches[0]()]
    for stream, launch in zip(side, launches[1:]):
        with torch.cuda.stream(stream):
            outs.append(launch())
    for stream, out in zip(side, outs[1:]):
        current.wait_stream(stream)
        # Allocated on a side stream, read on the current one: keep the caching allocator
        # from handing its memory to the side stream again before that read is done.
        out.record_stream(current)
    return outs


# ---- fused kernels (kernels/), one config flag each ------------------------------------------
# Config flag -> the kernels/ op it switches on.
FUSED_KERNELS = {"fused_bias_dropout_residual_layernorm": "bias_dropout_residual_layernorm",
                 "fused_embedding_backward": "embedding_backward",
                 "fused_mlm_loss": "softmax_cross_entropy",
                 "fused_dense": "dense",
                 "fused_dense_gelu": "dense"}


def require_fused_kernels(cfg: ModelConfig, device: torch.device | str) -> None:
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
        raise RuntimeError(f"model.{flag}=true needs float16 or bfloat16 activations on CUDA "
                           f"(run.precision=bf16 or fp16), got {t.dtype}")


def _require_low_precision_gemm_on_cuda(flag: str, x: torch.Tensor) -> None:
    """The same for a dense kernel's input, which autocast casts inside kernels.dense."""
    autocast = torch.is_autocast_enabled("cuda")
    if not (autocast and torch.get_autocast_dtype("cuda") in LOW_PRECISION):
        _require_low_precision_on_cuda(flag, x)


# ---- dense layers (model.fused_dense, model.fused_dense_gelu) -----------------------------------
# A dense layer with F.linear's signature: (x (T, in), weight (out, in), bias (out,) or None)
# -> (T, out).
Linear = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]


def fused_linear(x: torch.Tensor, weight: torch.Tensor,
                 bias: torch.Tensor | None = None) -> torch.Tensor:
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
def linear_with_residual(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference: (F.linear(x, weight, bias), x)."""
    return F.linear(x, weight, bias), x


def fused_linear_with_residual(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
                               ) -> tuple[torch.Tensor, torch.Tensor]:
    """The same as one cuBLASLt GEMM. Under autocast the residual is x cast to 16 bits."""
    _require_low_precision_gemm_on_cuda("fused_dense", x)
    return linear_bias(x, weight, bias, return_residual=True)


def linear_with_residual_impl(fused: bool) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    return fused_linear_with_residual if fused else linear_with_residual


# gelu(F.linear(x, weight, bias)): (x (T, in), weight (out, in), bias (out,), approximate)
# -> (T, out).
def linear_gelu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, approximate: str,
                linear: Linear = F.linear) -> torch.Tensor:
    """Reference; with linear=fused_linear (fused_dense alone) the GeLU stays PyTorch's."""
    return F.gelu(linear(x, weight, bias), approximate=approximate)


def fused_linear_gelu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                      approximate: str) -> torch.Tensor:
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
SublayerOutput = Callable[[torch.Tensor, nn.Linear, nn.Dropout, nn.LayerNorm, torch.Tensor],
                          torch.Tensor]


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
    return fused_sublayer_end(linear(h, dense.weight, None), dense.bias, dropout, layer_norm,
                              residual)


def fused_sublayer_end(y, bias, dropout, layer_norm, residual):
    """LayerNorm(residual + dropout(y + bias)) in one kernel; y (T, hidden) from a bias-free GEMM.

    Under autocast the GEMM's output is fp16/bf16 while the residual, a LayerNorm output, is
    fp32 (autocast runs LayerNorm in fp32), unless fused_dense made it the GEMM's 16-bit input.
    The kernel takes one activation dtype, so the residual is cast and the hidden stream stays
    in 16 bits, as in NVIDIA's fused BERT. The
    dropout mask is kernels.reference.dropout_keep_mask's Philox mask, not torch's.
    """
    _require_low_precision_on_cuda("fused_bias_dropout_residual_layernorm", y)
    return bias_dropout_residual_layernorm(y, bias, residual.to(y.dtype), layer_norm.weight,
                                           layer_norm.bias, p=dropout.p, eps=layer_norm.eps,
                                           training=dropout.training)


def sublayer_output_impl(fused: bool, fused_dense: bool = False) -> SublayerOutput:
    """fused: model.fused_bias_dropout_residual_layernorm; fused_dense: model.fused_dense."""
    output = fused_sublayer_output if fused else sublayer_output
    return functools.partial(output, linear=fused_linear) if fused_dense else output


# A post-LN feed-forward sublayer, LayerNorm(x + dropout(output(gelu(intermediate(x))))):
# (x (T, hidden), intermediate, output, dropout, layer_norm, approximate) -> (T, hidden).
FeedForwardSublayer = Callable[[torch.Tensor, nn.Linear, nn.Linear, nn.Dropout, nn.LayerNorm,
                                str], torch.Tensor]


def feed_forward(x, intermediate, output, dropout, layer_norm, approximate,
                 first=linear_with_residual, sublayer_output: SublayerOutput = sublayer_output):
    """Reference; first/sublayer_output: their fused_dense and fused LayerNorm variants."""
    pre, residual = first(x, intermediate.weight, intermediate.bias)
    return sublayer_output(F.gelu(pre, approximate=approximate), output, dropout, layer_norm,
                           residual)


def fused_gelu_feed_forward(x, intermediate, output, dropout, layer_norm, approximate):
    """model.fused_dense_gelu: both GEMMs and the GeLU in one autograd node. Forward: GEMM + bias
    + GeLU (pre-activation kept), GEMM + bias. Backward: GeLU' and the first bias gradient ride
    the second layer's data-gradient GEMM, the other bias gradient its weight-gradient GEMM, the
    residual's gradient the first layer's data-gradient GEMM. approximate must be "tanh"."""
    _require_low_precision_gemm_on_cuda("fused_dense_gelu", x)
    y, residual = linear_gelu_linear(x, intermediate.weight, intermediate.bias, output.weight,
                                     output.bias, approximate=approximate, return_residual=True)
    return add_and_norm(y, dropout, layer_norm, residual)


def fused_gelu_feed_forward_fused_end(x, intermediate, output, dropout, layer_norm, approximate):
    """The same with the output bias left to the fused bias + dropout + residual + LayerNorm."""
    _require_low_precision_gemm_on_cuda("fused_dense_gelu", x)
    y, residual = linear_gelu_linear(x, intermediate.weight, intermediate.bias, output.weight,
                                     None, approximate=approximate, return_residual=True)
    return fused_sublayer_end(y, output.bias, dropout, layer_norm, residual)


def feed_forward_impl(fused: bool, fused_dense: bool = False,
                      fused_dense_gelu: bool = False) -> FeedForwardSublayer:
    """fused: model.fused_bias_dropout_residual_layernorm; then the two dense flags."""
    if fused_dense_gelu:
        return fused_gelu_feed_forward_fused_end if fused else fused_gelu_feed_forward
    if not (fused or fused_dense):
        return feed_forward
    return functools.partial(feed_forward, first=linear_with_residual_impl(fused_dense),
                             sublayer_output=sublayer_output_impl(fused, fused_dense))


# Word-embedding lookup: (input_ids (T,), table) -> (T, hidden).
def word_embedding(input_ids: torch.Tensor, table: nn.Embedding) -> torch.Tensor:
    return table(input_ids)


def fused_backward_word_embedding(input_ids: torch.Tensor, table: nn.Embedding) -> torch.Tensor:
    """The same lookup; its weight gradient is the kernels' atomic scatter-add instead of
    PyTorch's sort and segment reduction."""
    return embedding_with_fused_backward(input_ids, table.weight)


def word_embedding_impl(fused: bool) -> Callable[[torch.Tensor, nn.Embedding], torch.Tensor]:
    return fused_backward_word_embedding if fused else word_embedding


# MLM loss: (logits (M, padded_vocab), labels (M,) int64, vocab_size) -> mean over the M rows.
def mlm_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Reference. The vocabulary padding columns are dropped so they never enter the softmax."""
    return F.cross_entropy(logits[:, :vocab_size].float(), labels)


def fused_mlm_cross_entropy(logits: torch.Tensor, labels: torch.Tensor,
                            vocab_size: int) -> torch.Tensor:
    """The same loss; the forward also writes softmax - one_hot in the logits' dtype, so no fp32
    copy of the logits is made and the backward is one scaling."""
    _require_low_precision_on_cuda("fused_mlm_loss", logits)
    return softmax_cross_entropy(logits, labels, vocab_size)


def mlm_cross_entropy_impl(fused: bool) -> Callable[[torch.Tensor, torch.Tensor, int],
                                                     torch.Tensor]:
    return fused_mlm_cross_entropy if fused else mlm_cross_entropy
