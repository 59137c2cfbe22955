"""Collectives of the sharded optimizer: broadcast, bucket reduce-scatter, shard all-gather.

NCCL gets the tensor collectives (`reduce_scatter_tensor`, `all_gather_into_tensor`); gloo
all-reduces a bucket and keeps this rank's slice, unless `tensor_collectives=True`.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.distributed as dist
from torch import Tensor

# Newer PyTorch renames the tensor collectives; the signatures are unchanged.
_all_gather_tensor = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_tensor = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


class ShardComm:
    """The optimizer's collectives. Without an initialized process group: one rank, no-ops."""

    def __init__(
        self, process_group, shard_group, replica_group, tensor_collectives: Optional[bool]
    ):
        self.active = dist.is_available() and dist.is_initialized()
        self.group, self.shard_group, self.replica_group = process_group, None, replica_group
        self.shard_world, self.shard_rank, self.replica_world = 1, 0, 1
        self.tensor_collectives = False
        if not self.active:
            return
        if replica_group is not None and shard_group is None:
            raise ValueError("replica_group needs an explicit shard_group")
        self.shard_group = shard_group if shard_group is not None else process_group
        self.shard_world = dist.get_world_size(self.shard_group)
        self.shard_rank = dist.get_rank(self.shard_group)
        if replica_group is not None:
            self.replica_world = dist.get_world_size(replica_group)
        if self.world != dist.get_world_size(process_group):
            raise ValueError(
                f"shard group ({self.shard_world}) x replica group "
                f"({self.replica_world}) must cover the process group "
                f"({dist.get_world_size(process_group)})"
            )
        nccl = dist.get_backend(self.shard_group) == "nccl"
        self.tensor_collectives = nccl if tensor_collectives is None else tensor_collectives

    @property
    def world(self) -> int:
        """Ranks whose gradients are averaged."""
        return self.shard_world * self.replica_world

    def broadcast(self, tensor: Tensor) -> None:
        """Rank 0's values everywhere (what DDP does at construction)."""
        if self.world > 1:
            src = dist.get_global_rank(self.group or dist.group.WORLD, 0)
            dist.broadcast(tensor, src=src, group=self.group)

    def reduce_scatter(self, bucket: Tensor, out: Tensor) -> Callable[[], None]:
        """Starts summing `bucket` (size,) over ranks into this rank's chunk `out` (size / W,).

        Returns the function that waits for it (and for the cross-replica sum, if any).
        """
        work, local = None, bucket
        if self.shard_world > 1 and self.tensor_collectives:
            work = _reduce_scatter_tensor(out, bucket, group=self.shard_group, async_op=True)
            local = out
        elif self.shard_world > 1:
            work = dist.all_reduce(bucket, group=self.shard_group, async_op=True)
            local = bucket.view(self.shard_world, -1)[self.shard_rank]

        def finish() -> None:
            if work is not None:
                work.wait()
            if local.data_ptr() != out.data_ptr():
                out.copy_(local)
            if self.replica_world > 1:
                dist.all_reduce(out, group=self.replica_group)

        return finish

    def all_gather(self, bucket: Tensor, chunk: Tensor) -> Callable[[], None]:
        """Starts filling `bucket` (size,) with every rank's `chunk` (size / W,); returns wait."""
        if self.shard_world == 1:
            bucket.copy_(chunk)
            return lambda: None
        if self.tensor_collectives:
            work = _all_gather_tensor(bucket, chunk, group=self.shard_group, async_op=True)
        else:
            outputs = list(bucket.view(self.shard_world, -1).unbind(0))
            work = dist.all_gather(outputs, chunk, group=self.shard_group, async_op=True)
        return work.wait

    def all_reduce_sum(self, tensor: Tensor) -> Tensor:
        """In-place sum over the shard group (replicas hold identical shards)."""
        if self.shard_world > 1:
            dist.all_reduce(tensor, group=self.shard_group)
        return tensor

    def gather_shards(self, shard: Tensor) -> list[Tensor]:
        """Every shard-group rank's copy of `shard`, in rank order (for checkpoints)."""
        if self.shard_world == 1:
            return [shard]
        out = [torch.empty_like(shard) for _ in range(self.shard_world)]
        dist.all_gather(out, shard, group=self.shard_group)
        return out
