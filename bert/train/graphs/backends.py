"""Capture and replay of one shape's step: `backend.capture(shape, run, warm_up) -> replay`.

`run()` is the eager forward+backward on the shape's static buffers and returns the loss;
`warm_up()` is the same forward with a backward that leaves the parameters' gradients alone.
`replay()` runs the step again on whatever the buffers hold now and returns the loss tensor.

    CudaGraphBackend  torch.cuda.CUDAGraph: warm-up on a side stream, then one capture per
                      shape into one memory pool shared by all shapes
    EagerBackend      the CPU emulation and test double: `replay` calls `run` itself, and the
                      captures and replays are recorded
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

import torch

from bert.train.graphs.shapes import GraphShape

Replay = Callable[[], torch.Tensor]


class EagerBackend:
    """Runs every "replay" eagerly on the same static buffers a graph would read, so the
    padding, the buffer copies and the cache are tested without a GPU."""

    def __init__(self) -> None:
        self.captures: list[GraphShape] = []
        self.replays: Counter[GraphShape] = Counter()

    def capture(self, shape: GraphShape, run: Replay, warm_up: Callable[[], None]) -> Replay:
        self.captures.append(shape)

        def replay() -> torch.Tensor:
            self.replays[shape] += 1
            return run()

        return replay


class CudaGraphBackend:
    """One CUDA graph per shape. All graphs share one memory pool: a graph's forward and
    backward are one capture, so its activations are freed inside it, and graphs never
    replay concurrently; what stays allocated (each graph's loss) is never reused."""

    def __init__(self, device: torch.device, warmup_iters: int = 3, pool=None):
        """pool: a memory pool to capture into (torch.cuda.graph_pool_handle()), e.g. one that
        several models' graphs share because they never replay at once (the throughput
        bench's +graphs variants); None: the first graph's, shared by the later ones."""
        self.device = device
        self.warmup_iters = warmup_iters
        self.pool = pool

    def capture(self, shape: GraphShape, run: Replay, warm_up: Callable[[], None]) -> Replay:
        # Warm-up on a side stream (PyTorch's capture recipe): lazy initialization (cuBLAS
        # handles, autotuning, allocator growth) must not happen inside the capture.
        current = torch.cuda.current_stream(self.device)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(current)
        with torch.cuda.stream(side):
            for _ in range(self.warmup_iters):
                warm_up()
        current.wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # torch.cuda.graph synchronizes the device at capture start: once per shape.
        # thread_local: the prefetch thread keeps pinning and copying batches meanwhile, which
        # the default (global) mode would refuse for every thread
        with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
            loss = run()
        if self.pool is None:
            self.pool = graph.pool()

        def replay() -> torch.Tensor:
            graph.replay()
            return loss

        return replay
