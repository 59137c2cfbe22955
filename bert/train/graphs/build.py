"""The trainer's graph cache (Trainer.graphs): its buckets from the config, the trainer's own
step to capture, and what a capture needs from the rest of the run.

`build_graphs(trainer)` with run.cuda_graphs; the CPU tests pass backends.EagerBackend()."""

from __future__ import annotations

from functools import partial

import torch

from bert.core.errors import ConfigError
from bert.train.graphs.backends import CudaGraphBackend
from bert.train.graphs.cache import GraphCache
from bert.train.graphs.shapes import GraphBuckets
from data.packing import PackedBatch


def build_graphs(trainer, backend=None) -> GraphCache:
    """A GraphCache replaying `trainer.forward_backward` (backend None: CUDA graphs).

    One rank only: DDP's reducer is prepared by its own forward, which a replayed graph skips.
    The optimizer step stays eager; the gradients stay allocated and are zeroed in place (the
    graphs add into their addresses)."""
    ctx, cfg = trainer.ctx, trainer.cfg
    if ctx.world_size > 1:
        raise ConfigError(
            f"run.cuda_graphs=true runs on one rank for now, this run has {ctx.world_size} "
            f"(docs/cuda_graphs.md): set run.cuda_graphs=false"
        )
    trainer.optim.keep_gradients()
    geometry = trainer.geometry
    return GraphCache(
        graph_buckets(cfg, geometry.micro_batch_size),
        partial(trainer.forward_backward, accum=geometry.gradient_accumulation_steps),
        partial(warm_up, trainer),
        backend or CudaGraphBackend(ctx.device),
        ctx.device,
        cfg.run.graph_max_shapes,
    )


def warm_up(trainer, batch: PackedBatch) -> None:
    """A capture's warm-up step: the trainer's forward and a backward whose gradients are
    dropped, so the parameters' gradients are not touched."""
    params = [p for p in trainer.raw_model.parameters() if p.requires_grad]
    torch.autograd.grad(trainer.forward_loss(batch), params, allow_unused=True)


def graph_buckets(cfg, micro_batch_size: int) -> GraphBuckets:
    """The shapes' buckets: the data's length buckets (data.curriculum's edges when it is on,
    else data.max_seq_length alone) and run.graph_token_bucket / graph_masked_bucket."""
    data, run = cfg.data, cfg.run
    edges = data.curriculum.bucket_boundaries if data.curriculum.enabled else []
    return GraphBuckets(
        length_edges=tuple(edges or [data.max_seq_length]),
        sequences=micro_batch_size,
        token_bucket=run.graph_token_bucket,
        masked_bucket=run.graph_masked_bucket,
        max_masked=micro_batch_size * data.max_predictions_per_seq,
    )
