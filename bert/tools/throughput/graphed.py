"""The `+graphs` variants of bench_throughput.py: forward and backward replayed as CUDA graphs
over bucketed batch shapes, as the trainer runs them with run.cuda_graphs (bert/train/graphs:
the same shapes, static buffers, cache and capture), the LAMB step eager between replays.

Each batch is copied into its shape's static buffers and that shape's graph replays; the first
batch of a shape captures it (after the backend's warm-up iterations), so the bench's warm-up,
which steps through every batch, captures every shape before any timing. The gradients are
allocated once and zeroed in place (a graph adds into their addresses), so a graphed variant
keeps them between timed blocks.

On CUDA every +graphs variant of one process captures into one memory pool: they never replay
at once, and nothing a graph leaves in the pool is read after another graph replays (the loss
is not read; the gradients live outside the pool), so the pool holds the largest variant's
activations once rather than once per variant (BERT-Large's step keeps about 15 GB of
activations: 2026-11-28 throughput_eager.json, peak 20.6 GB, resident 5.5 GB). On the CPU the
eager emulation (EagerBackend) runs the same padding, copies and cache, which the CPU tests use.
"""

from __future__ import annotations

import functools
from typing import Callable

import torch
from torch.profiler import record_function

from bert.train.config import RunConfig
from bert.train.graphs.backends import CudaGraphBackend, EagerBackend
from bert.train.graphs.cache import GraphCache
from bert.train.graphs.shapes import GraphBuckets
from data.packing import PackedBatch


def graph_buckets(batch_size: int, max_length: int, max_predictions: int) -> GraphBuckets:
    """The trainer's buckets (bert/train/graphs/build.py) for the bench's batches: one length
    edge, the workload's longest length (data.max_seq_length's role), and run.cuda_graphs's
    default bucket sizes."""
    run = RunConfig()
    return GraphBuckets(
        length_edges=(max_length,),
        sequences=batch_size,
        token_bucket=run.graph_token_bucket,
        masked_bucket=run.graph_masked_bucket,
        max_masked=batch_size * max_predictions,
    )


@functools.cache
def shared_pool(device: torch.device):
    """The one memory pool of this process's graphed variants on `device` (module doc)."""
    return torch.cuda.graph_pool_handle()


def backend_for(device: torch.device):
    """CUDA graphs in the shared pool on CUDA; the eager emulation elsewhere."""
    if device.type != "cuda":
        return EagerBackend()
    return CudaGraphBackend(device, pool=shared_pool(device))


def graphed_training_step(
    model: torch.nn.Module,
    forward_loss: Callable[[PackedBatch], torch.Tensor],
    batches: list[PackedBatch],
    optimizer: torch.optim.Optimizer,
    buckets: GraphBuckets,
    backend,
) -> tuple[Callable[[int], None], Callable[[], dict]]:
    """Step i on batch i (mod the batches): zero the kept gradients in place, replay the batch's
    graph (eagerly when no shape fits it), the optimizer step. forward_loss(batch) is the
    variant's forward and loss (under autocast without the cast cache: a graph would keep
    reading a cast made from old weights). Returns the step and the cache's counts
    (graph_captures, graph_replays, graph_fallbacks)."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    device = params[0].device

    def run(batch: PackedBatch) -> torch.Tensor:
        loss = forward_loss(batch)
        loss.backward()
        return loss.detach()

    def warm_up(batch: PackedBatch) -> None:
        # the gradients are dropped: the kept .grad tensors are left as they are
        torch.autograd.grad(forward_loss(batch), params, allow_unused=True)

    cache = GraphCache(buckets, run, warm_up, backend, device, RunConfig().graph_max_shapes)

    def step(i: int) -> None:
        optimizer.zero_grad(set_to_none=False)
        batch = batches[i % len(batches)]
        with record_function("bench::forward_backward"):
            if cache.run(batch) is None:
                run(batch)
        with record_function("bench::optimizer"):
            optimizer.step()

    return step, cache.metrics
