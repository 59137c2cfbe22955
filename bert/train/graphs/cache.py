"""The graph cache: shape -> (static buffers, captured step), and the eager fallback.

`GraphCache.run(batch)` pads a batch to its shape (shapes.py), copies it into that shape's
buffers (static_batch.py) and replays the shape's graph, capturing it on the shape's first
batch (which is then replayed like every later one: a capture only records). A batch that fits
no bucket, or of a new shape once `max_shapes` are captured, returns None: the trainer runs it
eagerly. The counts are host ints, reported at the progress points (metrics.jsonl).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

import torch

from bert.train.graphs.shapes import GraphBuckets, GraphShape, batch_shape
from bert.train.graphs.static_batch import StaticBatch
from data.packing import PackedBatch

# the step on a batch: forward + backward, returning the (detached) loss
Step = Callable[[PackedBatch], torch.Tensor]


@dataclass
class GraphCounts:
    captures: int = 0
    replays: int = 0
    fallbacks: int = 0  # batches run eagerly: no bucket fits, or max_shapes reached


class GraphCache:
    def __init__(
        self,
        buckets: GraphBuckets,
        step: Step,
        warm_up: Callable[[PackedBatch], None],
        backend,
        device: torch.device,
        max_shapes: int,
    ):
        """backend: `capture(shape, run, warm_up) -> replay` (backends.py)."""
        self.buckets, self.step, self.warm_up = buckets, step, warm_up
        self.backend, self.device, self.max_shapes = backend, device, max_shapes
        self.graphs: dict[GraphShape, tuple[StaticBatch, Callable[[], torch.Tensor]]] = {}
        self.counts = GraphCounts()

    def run(self, batch: PackedBatch) -> torch.Tensor | None:
        """The step replayed on `batch`, or None: run it eagerly."""
        shape = batch_shape(batch, self.buckets)
        if shape is None or (shape not in self.graphs and len(self.graphs) >= self.max_shapes):
            self.counts.fallbacks += 1
            return None
        static, replay = self.graphs.get(shape) or self._capture(shape, batch)
        static.load(batch)
        self.counts.replays += 1
        return replay()

    def _capture(self, shape: GraphShape, batch: PackedBatch):
        static = StaticBatch(shape, self.device)
        static.load(batch)  # the warm-up runs on real values
        replay = self.backend.capture(
            shape, lambda: self.step(static.batch), lambda: self.warm_up(static.batch)
        )
        self.graphs[shape] = (static, replay)
        self.counts.captures += 1
        return self.graphs[shape]

    def metrics(self) -> dict[str, int]:
        """The counts for a metrics record: graph_captures, graph_replays, graph_fallbacks."""
        return {f"graph_{key}": value for key, value in asdict(self.counts).items()}
