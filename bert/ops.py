"""The one place that picks an implementation for each op the model uses.

Every fused path has a plain-PyTorch reference beside it; the reference is the CPU path and the
test oracle. A backend is chosen by a config value, never by probing the hardware at import.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from bert.padding import key_padding_mask, pad_tokens, unpad_tokens

ATTENTION_BACKENDS = ("padded_sdpa", "flash_varlen")


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                     max_seqlen: int, token_index: torch.Tensor, dropout_p: float,
                     backend: str = "padded_sdpa") -> torch.Tensor:
    """Bidirectional self-attention within each packed sequence.

    q, k, v: (T, heads, head_dim); cu_seqlens: (B+1,) int32; token_index: (T,) int64.
    Returns (T, heads, head_dim). Tokens never attend across sequence boundaries.
    """
    if backend == "padded_sdpa":
        return padded_sdpa_attention(q, k, v, cu_seqlens, max_seqlen, token_index, dropout_p)
    if backend == "flash_varlen":
        return flash_varlen_attention(q, k, v, cu_seqlens, max_seqlen, dropout_p)
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
