"""Self-attention over packed sequences: the functions of the backends `model.attention` chooses
from (their table, which needs no torch: bert/model/attention_backends.py).

    padded_sdpa    reference: pad only inside attention, masked SDPA, unpad; exact anywhere
    per_sequence   CPU: one sequence at a time, sum(l_i^2) work, nothing padded
    flash_varlen   CUDA fp16/bf16: PyTorch's flash varlen kernel on packed tokens
    grouped_flash  [Zeng]'s length groups, one launch per group, each on its own CUDA stream

`resolve(name)` returns the backend's record once, when the model is built; every backend's
`attend(q, k, v, batch, dropout_p)` has the same signature (`Attend`), so the forward never
branches on the name.
"""

from __future__ import annotations

import functools
from typing import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# the table's names, where the model and its tools have always found them
from bert.model.attention_backends import BACKENDS, AttentionBackend, resolve  # noqa: F401
from data.packing import PackedBatch, key_padding_mask, pad_tokens, unpad_tokens

LOW_PRECISION = (torch.float16, torch.bfloat16)

# The SDPA kernels padded_sdpa may use on CUDA, in this priority order; it is the yardstick the
# attention and fused-model tests and the throughput bench compare against, so it must be right
# before it is fast. Left out: cuDNN attention, PyTorch's default on H100/H200 since 2.11, whose
# backward with a boolean mask is reported to return NaN in grad_q at sequence lengths 64 mod 128
# (pytorch/pytorch issue 196678); flash attention takes no mask. The GPU window's probe
# (scripts/bench/probe_sdpa.py) checks every backend against an fp64 reference on the device and
# records which of these it found correct (kernels/VALIDATION.md). CPU: PyTorch's own choice.
PADDED_SDPA_CUDA_BACKENDS = (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH)

# (q, k, v (T, heads, head_dim), batch, dropout_p) -> (T, heads, head_dim): bidirectional
# self-attention within each packed sequence; tokens never attend across sequence boundaries.
Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, PackedBatch, float], torch.Tensor]


def padded_sdpa_attention(
    q,
    k,
    v,
    cu_seqlens,
    max_seqlen,
    token_index,
    dropout_p,
    queries: tuple[torch.Tensor, int] | None = None,
):
    """Reference: pad only inside attention, run masked SDPA, unpad. Exact on any device.
    queries: (token_index, max_seqlen) of q when q holds a subset of the tokens (the last
    layer's, QuerySubset); keys and values are always every token."""
    batch = cu_seqlens.shape[0] - 1
    q_index, q_max = queries or (token_index, max_seqlen)
    # (B, S, h, d) -> (B, h, S, d), the layout SDPA expects.
    qp = pad_tokens(q, q_index, batch, q_max).transpose(1, 2)
    kp, vp = (pad_tokens(t, token_index, batch, max_seqlen).transpose(1, 2) for t in (k, v))
    mask = key_padding_mask(cu_seqlens, max_seqlen)[:, None, None, :]
    out = masked_sdpa(qp, kp, vp, mask, dropout_p)
    return unpad_tokens(out.transpose(1, 2), q_index)


def masked_sdpa(q, k, v, mask, dropout_p):
    """SDPA with a boolean mask; on CUDA only the kernels of PADDED_SDPA_CUDA_BACKENDS."""
    if not q.is_cuda:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    with sdpa_kernel(list(PADDED_SDPA_CUDA_BACKENDS), set_priority=True):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)


def flash_varlen_attention(
    q, k, v, cu_seqlens, max_seqlen, dropout_p, queries: tuple[torch.Tensor, int] | None = None
):
    """PyTorch's flash-attention varlen kernel on packed tokens (CUDA, fp16/bf16, with dropout).
    queries: (cu_seqlens, max_seqlen) of q when q holds a subset of each sequence's tokens.

    Its GPU status: BACKENDS["flash_varlen"].gpu_validated (tests/unit/test_attention.py::
    test_cuda_backend_on_gpu is the acceptance test).
    """
    if not q.is_cuda or q.dtype not in (torch.float16, torch.bfloat16):
        raise RuntimeError(
            "model.attention=flash_varlen needs CUDA tensors in fp16 or bf16 "
            f"(got {q.device}, {q.dtype}); use padded_sdpa"
        )
    cu_q, max_q = queries or (cu_seqlens, max_seqlen)
    out = torch.ops.aten._flash_attention_forward(
        q, k, v, cu_q, cu_seqlens, max_q, max_seqlen, dropout_p, False, False
    )[0]
    return out


def per_sequence_attention(q, k, v, cu_seqlens, dropout_p, cu_queries=None):
    """CPU path: attention one sequence at a time, so the work is sum(l_i^2), not B * max^2.

    With REFERENCE 2's length mix a local batch of 16 has sum(l_i^2) of about 0.4 * B * 512^2,
    and nothing is padded, masked or scattered. The lengths are read from cu_seqlens on the
    host: free for a CPU tensor, a device sync per layer on a GPU, so CUDA tensors are refused
    (flash_varlen is the GPU path).
    q, k, v: (T, heads, head_dim); cu_seqlens: (B+1,) int32. Returns (T, heads, head_dim).
    cu_queries: (B+1,) int32 when q holds a subset of each sequence's tokens (QuerySubset).
    """
    if q.is_cuda:
        raise RuntimeError(
            "model.attention=per_sequence is the CPU path (it reads sequence "
            "lengths on the host); use flash_varlen or padded_sdpa on CUDA"
        )
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()  # CPU tensor: no device sync
    if dropout_p > 0.0:
        # Dropout's 1/(1-p) rescaling on V costs T*d multiplies instead of l^2 per sequence.
        v = v * (1.0 / (1.0 - dropout_p))
    # One transpose to (h, T, d): every sequence is then a (h, l, d) block whose matrices are
    # contiguous, which the batched GEMM needs to run at full speed (strided views: several x).
    # split() rather than slicing: its backward is one cat, not one full-size zero tensor per slice.
    q_lengths = lengths if cu_queries is None else (cu_queries[1:] - cu_queries[:-1]).tolist()
    qs = q.transpose(0, 1).contiguous().split(q_lengths, dim=1)
    ks, vs = (t.transpose(0, 1).contiguous().split(lengths, dim=1) for t in (k, v))
    outs = [_sequence_attention(qi, ki, vi, dropout_p) for qi, ki, vi in zip(qs, ks, vs)]
    return torch.cat(outs, dim=1).transpose(0, 1)


def _sequence_attention(q, k, v, dropout_p):
    """One sequence, no mask needed. q: (h, lq, d), k, v: (h, l, d) -> (h, lq, d).

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


# ---- grouped multi-stream attention ([Zeng], IV-A-2) ---------------------------------------
def grouped_attention(q, k, v, batch: PackedBatch, dropout_p):
    """Sequences grouped by length, one attention launch per group, each on its own CUDA stream.

    One launch sized to the batch's longest sequence wastes work (padded_sdpa) or picks a kernel
    tuned for 512 (flash) when most sequences are short; per group, the launch is sized to the
    group's longest. The host made the groups (data.packing.group_by_length) and every shape
    comes from batch.groups.shapes, so nothing is read back from the device.
    q, k, v: (T, heads, head_dim). Returns (T, heads, head_dim).
    """
    groups = batch.groups
    if groups is None:
        raise ValueError(
            "model.attention=grouped_flash needs the batch's length groups "
            "(PackedBatch.groups: data.packing.pack_samples(..., "
            "attention_groups=True))"
        )
    shapes = groups.shapes
    token_counts = [tokens for _, tokens, _ in shapes]
    # One gather into group order for q, k and v: its backward is one scatter, not one per group.
    qs, ks, vs = (t.index_select(0, groups.order).split(token_counts) for t in (q, k, v))
    cu_seqlens = groups.cu_seqlens.split([seqs + 1 for seqs, _, _ in shapes])
    token_index = groups.token_index.split(token_counts)
    inputs = [(qs[g], ks[g], vs[g], cu_seqlens[g], token_index[g]) for g in range(len(shapes))]
    launches = [
        functools.partial(_group_attention, *inputs[g][:4], shapes[g][2], inputs[g][4], dropout_p)
        for g in range(len(shapes))
    ]
    outs = _run_concurrently(launches, inputs, q.device)
    return torch.cat(outs).index_select(0, groups.inverse)


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


def _run_concurrently(
    launches: list[Callable[[], torch.Tensor]],
    inputs: list[tuple[torch.Tensor, ...]],
    device: torch.device,
) -> list[torch.Tensor]:
    """Run independent launches side by side: the first on the current stream, each other on
    a side stream. The side streams wait for the current one first (q, k, v are ready), and
    the current stream waits for all of them after (the scatter reads every output):
    wait_stream records and waits on the events that order the seed's kernels A -> FMHA -> C.
    Autograd runs each backward on its forward's stream, so the backward overlaps too.
    Elsewhere (CPU) the launches run in turn. `inputs[g]`: the tensors launch g reads.
    """
    if device.type != "cuda" or len(launches) == 1:
        return [launch() for launch in launches]
    current = torch.cuda.current_stream(device)
    side = _side_streams(device, len(launches) - 1)
    for stream in side:  # before the first launch, so no side stream waits for it
        stream.wait_stream(current)
    outs = [launches[0]()]
    for stream, launch, tensors in zip(side, launches[1:], inputs[1:]):
        with torch.cuda.stream(stream):
            # Made on the current stream, read on a side stream, in forward and (saved for
            # backward) again in backward: without the record, the caching allocator could
            # hand the memory to the current stream when Python frees it while the side
            # kernel still reads it. Gradients crossing streams are recorded by autograd.
            for tensor in tensors:
                tensor.record_stream(stream)
            outs.append(launch())
    for stream, out in zip(side, outs[1:]):
        current.wait_stream(stream)
        # Allocated on a side stream, read on the current one: keep the caching allocator
        # from handing its memory to the side stream again before that read is done.
        out.record_stream(current)
    return outs


# ---- the entry points attention_backends.py's records name ---------------------------------
def _padded_sdpa(q, k, v, batch: PackedBatch, dropout_p: float) -> torch.Tensor:
    return padded_sdpa_attention(
        q, k, v, batch.cu_seqlens, batch.max_seqlen, batch.token_index, dropout_p
    )


def _flash_varlen(q, k, v, batch: PackedBatch, dropout_p: float) -> torch.Tensor:
    return flash_varlen_attention(q, k, v, batch.cu_seqlens, batch.max_seqlen, dropout_p)


def _per_sequence(q, k, v, batch: PackedBatch, dropout_p: float) -> torch.Tensor:
    return per_sequence_attention(q, k, v, batch.cu_seqlens, dropout_p)


# The same with q for the last layer's queries only (PackedBatch.query_subset): (Q, h, d).
def _padded_sdpa_subset(q, k, v, batch: PackedBatch, dropout_p: float) -> torch.Tensor:
    sub = batch.query_subset
    return padded_sdpa_attention(
        q,
        k,
        v,
        batch.cu_seqlens,
        batch.max_seqlen,
        batch.token_index,
        dropout_p,
        queries=(sub.token_index, sub.max_seqlen),
    )


def _flash_varlen_subset(q, k, v, batch: PackedBatch, dropout_p: float) -> torch.Tensor:
    sub = batch.query_subset
    return flash_varlen_attention(
        q,
        k,
        v,
        batch.cu_seqlens,
        batch.max_seqlen,
        dropout_p,
        queries=(sub.cu_seqlens, sub.max_seqlen),
    )


def _per_sequence_subset(q, k, v, batch: PackedBatch, dropout_p: float) -> torch.Tensor:
    return per_sequence_attention(
        q, k, v, batch.cu_seqlens, dropout_p, cu_queries=batch.query_subset.cu_seqlens
    )


def _grouped_subset(q, k, v, batch: PackedBatch, dropout_p: float) -> torch.Tensor:
    """A few queries per sequence leave nothing to group: one flash launch where it runs."""
    if q.is_cuda and q.dtype in LOW_PRECISION:
        return _flash_varlen_subset(q, k, v, batch, dropout_p)
    return _padded_sdpa_subset(q, k, v, batch, dropout_p)
