"""Inputs of the fused-LAMB benchmark and tests: shards laid out as the sharded optimizer lays
them out, with random state (lamb.py, tests/kernels/test_lamb_kernel.py)."""

from __future__ import annotations

import torch
from torch import Tensor

from bert.model import BertForPretraining, ModelConfig
from bert.optim.flat import FlatLayout
from bert.optim.params import param_groups
from bert.optim.shard_update import ShardBuffers, new_shard


def bert_large_param_groups(weight_decay: float = 0.01) -> list[dict]:
    """`param_groups` of the default model (BERT-Large: 336M parameters in 302 tensors), built
    on the meta device: shapes and groups, no memory."""
    with torch.device("meta"):
        model = BertForPretraining(ModelConfig())
    return param_groups(model, weight_decay)


def random_shard(
    shapes: list[torch.Size],
    group_of: list[int],
    decays: list[float],
    world: int,
    rank: int,
    dtype: torch.dtype,
    device: torch.device | str,
    seed: int = 0,
    align: int = 128,
) -> ShardBuffers:
    """Rank `rank`'s shard of parameters of these shapes and `dtype` among `world` ranks, laid out
    as the sharded optimizer lays them out (25 MiB buckets), with random weights, gradients and
    moments on the segments and zero padding."""
    layout = FlatLayout([(shape, dtype) for shape in shapes], world, 25 * 2**20, align)
    shard = new_shard(
        layout, dtype, layout.segments(rank)[dtype], group_of, decays, torch.device(device)
    )
    on_segments = torch.zeros_like(shard.master)
    for seg in layout.segments(rank)[dtype]:
        on_segments[seg.shard_start : seg.shard_start + seg.length] = 1.0
    gen = torch.Generator(shard.master.device).manual_seed(seed)

    def noise(scale: float) -> Tensor:
        return (
            torch.randn(on_segments.shape, generator=gen, device=on_segments.device)
            .mul_(on_segments)
            .mul_(scale)
        )

    shard.master.copy_(noise(0.05))
    shard.exp_avg.copy_(noise(1e-3))
    shard.exp_avg_sq.copy_(noise(1e-3).square_())
    shard.grad.copy_(noise(1.0))  # rounded to a 16-bit grad dtype
    return shard
