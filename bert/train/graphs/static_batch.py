"""One graph shape's input buffers, and a batch copied into them with padding that changes
neither the loss nor the gradients.

A captured graph reads fixed addresses, so each shape owns one set of device tensors
(`StaticBatch.batch`, a PackedBatch whose max_seqlen is the shape's bound) and every batch of
that shape is copied into it (`load`). Only device copies and small device ops run, with
sizes from host ints: nothing is read back from the device.

Why the padding is neutral (tests/unit/test_cuda_graphs.py shows it on the model):
- padding tokens form their own sequences (shapes.py: 1..max_seqlen tokens each), so no real
  token attends to them, and per-token layers never mix tokens;
- padding masked rows and padding sequences carry the label -100, which both losses ignore
  (the mean is over the other rows), so padding rows get zero gradient and add nothing to
  any parameter's gradient.
"""

from __future__ import annotations

import torch

from bert.train.graphs.shapes import GraphShape
from data.packing import PackedBatch

IGNORE = -100  # F.cross_entropy's and the fused MLM loss's ignore_index


class StaticBatch:
    def __init__(self, shape: GraphShape, device: torch.device):
        def ints(n: int, fill: int = 0, dtype=torch.int64) -> torch.Tensor:
            return torch.full((n,), fill, dtype=dtype, device=device)

        t, b, m = shape.tokens, shape.sequences, shape.masked
        self.shape = shape
        self.batch = PackedBatch(
            input_ids=ints(t),
            segment_ids=ints(t),
            position_ids=ints(t),
            token_index=ints(t),
            cu_seqlens=ints(b + 1, dtype=torch.int32),
            masked_positions=ints(m),
            masked_labels=ints(m, IGNORE),
            nsp_labels=ints(b, IGNORE),
            max_seqlen=shape.max_seqlen,
        )

    def load(self, batch: PackedBatch) -> None:
        """Copy `batch` (tensors on the buffers' device) in; the rest becomes padding."""
        if batch.groups is not None or batch.query_subset is not None:
            raise ValueError("CUDA graphs pad only plain PackedBatches (no groups, no subset)")
        s, bound = self.batch, self.shape.max_seqlen
        tokens, seqs = batch.num_tokens, batch.num_sequences
        lengths, pad_seq, pad_pos = padding_layout(
            s.num_tokens - tokens, s.num_sequences - seqs, bound, s.input_ids.device
        )
        _fill(s.input_ids, batch.input_ids, 0)
        _fill(s.segment_ids, batch.segment_ids, 0)
        _fill(s.position_ids, batch.position_ids, pad_pos)
        # token_index addresses the padded [sequences, max_seqlen] layout: the batch's own was
        # made for its max_seqlen, so it is recomputed for the shape's bound
        seq = torch.div(batch.token_index, batch.max_seqlen, rounding_mode="floor")
        _fill(s.token_index, seq * bound + batch.position_ids, (pad_seq + seqs) * bound + pad_pos)
        _fill(s.cu_seqlens, batch.cu_seqlens, (tokens + lengths.cumsum(0)).to(torch.int32))
        _fill(s.masked_positions, batch.masked_positions, 0)  # a real token, label ignored
        _fill(s.masked_labels, batch.masked_labels, IGNORE)
        _fill(s.nsp_labels, batch.nsp_labels, IGNORE)


def _fill(static: torch.Tensor, values: torch.Tensor, padding) -> None:
    """static[:n] = values, static[n:] = padding (a number or a tensor of the rest's size)."""
    n = values.shape[0]
    static[:n].copy_(values)
    rest = static[n:]
    if torch.is_tensor(padding):
        rest.copy_(padding)
    else:
        rest.fill_(padding)


def padding_layout(
    pad_tokens: int, pad_seqs: int, bound: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """pad_tokens tokens dealt to pad_seqs sequences of 1..bound tokens (the first ones
    full): (lengths (P,), sequence of each token (N,), position in it (N,)), int64, made on
    the device from host ints (no host read). Needs P <= N <= P * bound (shapes.py)."""
    if not pad_seqs <= pad_tokens <= pad_seqs * bound:
        raise ValueError(f"{pad_tokens} padding tokens do not fit {pad_seqs} x 1..{bound}")
    index = torch.arange(pad_seqs, device=device)
    # every sequence gets one token; the rest fill them in turn, bound - 1 more at most
    lengths = (pad_tokens - pad_seqs - index * (bound - 1)).clamp(0, bound - 1) + 1
    seq = torch.repeat_interleave(index, lengths, output_size=pad_tokens)
    starts = lengths.cumsum(0) - lengths
    pos = torch.arange(pad_tokens, device=device) - starts[seq]
    return lengths, seq, pos
