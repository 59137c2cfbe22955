"""Flat contiguous parameter and gradient buffers, split into buckets and per-rank shards.

One buffer per dtype holds every parameter of that dtype; each `nn.Parameter` becomes a view into
it (`param.data = buffer[start:start + n].view(shape)`), and its `.grad` a view into a twin
gradient buffer, so backward accumulates straight into the flat buffer and nothing is copied per
step. That is what lets one collective (or one fused kernel) cover many tensors ([Zeng],
IV-C-2: multi-tensor LAMB over contiguous buffers).

Layout of one dtype's buffer (W = ranks sharing the optimizer state, A = `align` elements):

    | bucket 0                   | bucket 1              | ...
    | p_k | pad | p_k-1 | pad |..| p_j | pad | ... | pad |
    |<- chunk 0 ->|<- chunk 1 ->|  ...                       each bucket is W equal chunks

- Buckets are filled walking the parameters in reverse order, since backward produces the last
  layers' gradients first; bucket 0 is the first one ready and is reduced first.
- Every parameter starts at a multiple of A; every bucket is padded to a multiple of W * A, so
  each rank's chunk of each bucket is A-aligned and the buffer divides by W. A parameter may
  straddle chunk boundaries: its pieces inside one rank's chunks are that rank's `Segment`s.
- Rank r's shard is the concatenation of chunk r of every bucket (in bucket order). Reducing a
  bucket scatters chunk r to rank r; gathering a bucket fills it from every rank's chunk.

`FlatLayout` is the plan (pure host arithmetic, no tensors); `FlatParams` moves a model onto it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


@dataclass(frozen=True)
class Slot:
    """Where parameter `index` lives: elements [start, start + numel) of its dtype's buffer."""

    index: int
    dtype: torch.dtype
    shape: torch.Size
    start: int
    numel: int
    bucket: int


@dataclass(frozen=True)
class Bucket:
    """A contiguous range [start, start + size) of one dtype's buffer, reduced as one unit.

    `shard_start`: where this bucket's chunk sits inside every rank's shard of that dtype.
    """

    index: int
    dtype: torch.dtype
    start: int
    size: int
    shard_start: int
    params: tuple[int, ...]
    world_size: int

    @property
    def chunk(self) -> int:
        return self.size // self.world_size

    def chunk_start(self, rank: int) -> int:
        return self.start + rank * self.chunk


@dataclass(frozen=True)
class Segment:
    """The part of parameter `index` inside one rank's shard.

    Shard elements [shard_start, shard_start + length) hold elements
    [param_start, param_start + length) of the flattened parameter.
    """

    index: int
    shard_start: int
    length: int
    param_start: int


class FlatLayout:
    """Offsets, buckets and shards for parameters of the given shapes and dtypes.

    Args:
        specs: (shape, dtype) per parameter, in optimizer order.
        world_size: ranks that split the optimizer state (the shard group).
        bucket_cap_bytes: a bucket is closed once it holds at least this many bytes; a larger
            parameter gets a bucket of its own. Buckets never split a parameter.
        align: element alignment of parameter starts and of every rank's chunk.
    """

    def __init__(
        self,
        specs: Sequence[tuple[torch.Size, torch.dtype]],
        world_size: int,
        bucket_cap_bytes: int,
        align: int = 128,
    ):
        if world_size < 1 or align < 1 or bucket_cap_bytes < 1:
            raise ValueError(
                f"bad layout: world_size={world_size}, align={align}, "
                f"bucket_cap_bytes={bucket_cap_bytes}"
            )
        self.world_size, self.align = world_size, align
        specs = [(torch.Size(shape), dtype) for shape, dtype in specs]
        groups = _plan_buckets(specs, bucket_cap_bytes, align)
        self.numel: dict[torch.dtype, int] = {}
        self.shard_numel: dict[torch.dtype, int] = {}
        self.buckets: list[Bucket] = []
        slots: dict[int, Slot] = {}
        for members in groups:
            bucket = self._place(members, specs, slots)
            self.buckets.append(bucket)
        self.slots: list[Slot] = [slots[i] for i in range(len(specs))]

    def _place(self, members: list[int], specs, slots: dict[int, Slot]) -> Bucket:
        """Appends one bucket to its dtype's buffer and records its parameters' slots."""
        dtype = specs[members[0]][1]
        start = self.numel.get(dtype, 0)
        offset, index = start, len(self.buckets)
        for i in members:
            shape = specs[i][0]
            slots[i] = Slot(i, dtype, shape, offset, shape.numel(), index)
            offset += _round_up(shape.numel(), self.align)
        size = _round_up(offset - start, self.world_size * self.align)
        shard_start = self.shard_numel.get(dtype, 0)
        self.numel[dtype] = start + size
        self.shard_numel[dtype] = shard_start + size // self.world_size
        return Bucket(index, dtype, start, size, shard_start, tuple(members), self.world_size)

    @property
    def dtypes(self) -> list[torch.dtype]:
        return list(self.numel)

    def segments(self, rank: int) -> dict[torch.dtype, list[Segment]]:
        """Rank `rank`'s pieces of every parameter, per dtype, in shard order."""
        out: dict[torch.dtype, list[Segment]] = {dtype: [] for dtype in self.dtypes}
        for bucket in self.buckets:
            lo, hi = bucket.chunk_start(rank), bucket.chunk_start(rank) + bucket.chunk
            for i in bucket.params:
                slot = self.slots[i]
                first, last = max(lo, slot.start), min(hi, slot.start + slot.numel)
                if first < last:
                    out[bucket.dtype].append(
                        Segment(
                            i, bucket.shard_start + first - lo, last - first, first - slot.start
                        )
                    )
        return out

    def unshard(self, dtype: torch.dtype, shards: Sequence[Tensor]) -> Tensor:
        """Every rank's shard (world_size tensors of shape (shard_numel,)) -> (numel,) buffer."""
        flat = shards[0].new_zeros(self.numel[dtype])
        for bucket in self.buckets:
            if bucket.dtype == dtype:
                for rank, shard in enumerate(shards):
                    flat[bucket.chunk_start(rank) : bucket.chunk_start(rank) + bucket.chunk] = (
                        shard[bucket.shard_start : bucket.shard_start + bucket.chunk]
                    )
        return flat

    def param_view(self, flat: Tensor, index: int) -> Tensor:
        """Parameter `index` as a view into its dtype's (numel,) buffer `flat`."""
        slot = self.slots[index]
        return flat[slot.start : slot.start + slot.numel].view(slot.shape)


def _plan_buckets(
    specs: list[tuple[torch.Size, torch.dtype]], cap_bytes: int, align: int
) -> list[list[int]]:
    """Parameter indices per bucket, in the order the buckets fill up during backward.

    Walks the parameters last to first; each dtype has one open bucket, closed once it reaches
    `cap_bytes`. Buckets left open at the end close in the order they were opened.
    """
    closed: list[list[int]] = []
    open_: dict[torch.dtype, list[int]] = {}
    fill: dict[torch.dtype, int] = {}
    for i in reversed(range(len(specs))):
        shape, dtype = specs[i]
        open_.setdefault(dtype, []).append(i)
        fill[dtype] = fill.get(dtype, 0) + _round_up(shape.numel(), align) * dtype.itemsize
        if fill[dtype] >= cap_bytes:
            closed.append(open_.pop(dtype))
            fill[dtype] = 0
    return closed + [members for members in open_.values()]


class FlatParams:
    """Rebinds `params` (and their grads) as views into flat per-dtype buffers.

    `params[dtype]` and `grads[dtype]` are the (numel,) buffers. The model must already be on its
    final device: a later `.to()` would copy parameters out of the buffers. The initial values
    are copied in once; padding stays zero in both buffers.
    """

    def __init__(self, params: Sequence[torch.nn.Parameter], layout: FlatLayout):
        devices = {p.device for p in params}
        if len(devices) != 1:
            raise ValueError(f"parameters on several devices: {sorted(map(str, devices))}")
        device = devices.pop()
        self.layout = layout
        self.param_list = list(params)
        self.params = {d: torch.zeros(n, dtype=d, device=device) for d, n in layout.numel.items()}
        self.grads = {d: torch.zeros(n, dtype=d, device=device) for d, n in layout.numel.items()}
        with torch.no_grad():
            for i, p in enumerate(self.param_list):
                view = layout.param_view(self.params[layout.slots[i].dtype], i)
                view.copy_(p.detach())
                p.data = view
        self.attach_grads()

    def attach_grads(self) -> None:
        """Points every `.grad` back at its view (host metadata only, no device work).

        Needed after anything that replaced a `.grad` (e.g. `model.zero_grad(set_to_none=True)`);
        a `.grad` that is None would otherwise be allocated fresh by autograd, outside the buffer.
        """
        for i, p in enumerate(self.param_list):
            view = self.layout.param_view(self.grads[self.layout.slots[i].dtype], i)
            if p.grad is None or p.grad.data_ptr() != view.data_ptr():
                p.grad = view

    def zero_grad(self) -> None:
        for buffer in self.grads.values():
            buffer.zero_()
        self.attach_grads()

    def bucket(self, buffers: dict[torch.dtype, Tensor], bucket: Bucket) -> Tensor:
        """(size,) view of `bucket` inside `buffers` (either `self.params` or `self.grads`)."""
        return buffers[bucket.dtype][bucket.start : bucket.start + bucket.size]
