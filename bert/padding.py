"""Moving between the packed token layout [T, ...] and the padded layout [B, max_seqlen, ...].

`token_index` (T,) is computed on the host (data/batching.py): the position of each packed token
in the flattened padded layout, `seq * max_seqlen + pos`. Both directions are plain indexing ops,
so autograd gives the adjoint (scatter <-> gather) for free.
"""
from __future__ import annotations

import torch


def pad_tokens(x: torch.Tensor, token_index: torch.Tensor, batch: int,
               max_seqlen: int) -> torch.Tensor:
    """x: (T, *rest) -> (batch, max_seqlen, *rest), zeros where there is no token."""
    rest = x.shape[1:]
    padded = x.new_zeros((batch * max_seqlen, *rest))
    padded = padded.index_copy(0, token_index, x)
    return padded.view(batch, max_seqlen, *rest)


def unpad_tokens(padded: torch.Tensor, token_index: torch.Tensor) -> torch.Tensor:
    """padded: (batch, max_seqlen, *rest) -> (T, *rest), the tokens named by token_index."""
    flat = padded.reshape(-1, *padded.shape[2:])
    return flat.index_select(0, token_index)


def key_padding_mask(cu_seqlens: torch.Tensor, max_seqlen: int) -> torch.Tensor:
    """(batch, max_seqlen) bool, True where a key position holds a real token.

    Built on the device from cu_seqlens; max_seqlen is a host int, so no sync is needed.
    """
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).unsqueeze(1)
    positions = torch.arange(max_seqlen, device=cu_seqlens.device).unsqueeze(0)
    return positions < lengths
