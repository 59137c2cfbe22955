"""What MFU needs beyond the FLOP count (bert/model/flops.py, `batch_flops`, which counts a
packed batch from its T real tokens, M masked tokens, B sequences and sum(l_i^2)): the sum of
squared sequence lengths of each batch, and the device's peak rate.

T, M and B are shapes the host knows. sum(l_i^2) needs the lengths, which on a GPU run live
on the device: `SquareSums` takes them on the prefetch thread, where each micro-batch is packed
on the host, and hands them to the main thread in the same order (the pipeline packs the
micro-batches of a step in order, and hands steps out in order). Each entry carries its token
count, checked against the batch the step received: a mismatch stops the attention count
rather than let it drift.

The rate: on a GPU of a kind bert/core/gpus.py knows, its datasheet dense bf16 peak; else (the
CPU, an unknown GPU) a square matmul in the run's precision, timed once at start.
"""

from __future__ import annotations

import collections
import time
from typing import Callable, Sequence

import numpy as np
import torch

from bert.core.gpus import GPUS


class SquareSums:
    """sum(l_i^2) of each packed micro-batch, from the packing thread to the step (FIFO)."""

    def __init__(self) -> None:
        self._queue: collections.deque = collections.deque()  # (tokens, square sum)
        self.broken = False

    def wrap(self, pack: Callable) -> Callable:
        """`pack` that also records the lengths of what it packed (host numpy)."""

        def pack_and_count(samples):
            packed = pack(samples)
            lengths = np.diff(np.asarray(packed.cu_seqlens, dtype=np.int64))
            self._queue.append((int(lengths.sum()), float((lengths**2).sum())))
            return packed

        return pack_and_count

    def take(self, batches: Sequence) -> float | None:
        """The square sum of the micro-batches of one step; None once the order is lost."""
        total = 0.0
        for batch in batches:
            if self.broken or not self._queue:
                self.broken = True
                return None
            tokens, squares = self._queue.popleft()
            if tokens != batch.num_tokens:
                self.broken = True
                return None
            total += squares
        return total


def device_peak(device: torch.device, precision: str) -> tuple[float, str]:
    """(peak FLOP/s, where the number comes from) for MFU."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device).lower()
        for key in sorted(GPUS, key=len, reverse=True):  # a100-80gb before a100
            if _matches(key, name, device):
                kind = GPUS[key]
                return (
                    kind.bf16_tflops * 1e12,
                    f"datasheet: {kind.name} dense bf16 "
                    f"{kind.bf16_tflops:g} TFLOP/s (bert/core/gpus.py)",
                )
    return measured_matmul_rate(device, precision)


def _matches(key: str, name: str, device: torch.device) -> bool:
    model, _, memory = key.partition("-")
    if model not in name:
        return False
    if not memory:
        return True
    gib = torch.cuda.get_device_properties(device).total_memory / 2**30
    return abs(gib - float(memory.removesuffix("gb"))) < 8


def measured_matmul_rate(device: torch.device, precision: str) -> tuple[float, str]:
    """Best of a few square matmuls in the run's precision, timed now (a few 0.1 s)."""
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    if device.type == "cpu":
        dtype = torch.float32 if dtype == torch.float16 else dtype
    n = 4096 if device.type == "cuda" else 512
    # its own generator: the run's random stream (dropout, resume) must not see this
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=generator)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=generator)
    best = float("inf")
    for _ in range(4):
        _sync(device)
        start = time.perf_counter()
        a @ b
        _sync(device)
        best = min(best, time.perf_counter() - start)
    rate = 2.0 * n**3 / best
    return rate, (
        f"measured at start: {n}x{n}x{n} {str(dtype).removeprefix('torch.')} "
        f"matmul on {device.type}, best of 4 ({rate / 1e12:.3g} TFLOP/s)"
    )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
