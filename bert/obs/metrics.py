"""The metrics record of a run: one dict per progress point and per eval, built from host values.

Nothing here reads the device inside a step. The trainer adds each step's host-side facts
(`step_done`: tokens, FLOPs, seconds the step waited for its data); the loss and the lr come in
with a progress point, where bert/train/progress.py has read them anyway; the optimizer's
gradient norm, loss scale and skipped-step count are read at that same point (`read_optimizer`).

Train record (kind "train"), over the interval since the previous point:
    step, samples        optimizer steps and samples trained so far (global)
    loss                 mean loss of the interval's steps on rank 0 (MLM + NSP)
    lr                   the lr of the next update (bert/optim/schedule.py lr_at(updates so far))
    grad_norm            global gradient norm of the last step, before clipping (unscaled)
    loss_scale           fp16 loss scale (null without fp16); skipped_steps: fp16 overflows so far
    samples_per_s        global samples per second of training time over the interval (its
                         seconds measured by bert/train/progress.py, whose console line shows
                         this same figure; an eval's time is no part of any interval)
    tokens_per_s         rank 0's real (unpadded) tokens per second
    tflops_per_s, mfu    rank 0's useful FLOP rate (bert/model/flops.py), and its share of the peak
                         (null when the FLOPs could not be counted)
    peak_memory_mib      CUDA: torch.cuda.max_memory_allocated; CPU: the process's peak RSS
    data_wait_share      share of the interval's wall time the step waited for its batch
Eval record (kind "eval"): step, samples, eval_mlm_accuracy, eval_seconds.
Every record has "kind" and "time" (Unix seconds).
"""

from __future__ import annotations

import math
import resource
import sys
import time
from dataclasses import dataclass
from typing import Callable

import torch


@dataclass
class Interval:
    """Host-side sums since the last train point."""

    steps: int = 0
    tokens: int = 0
    flops: float = 0.0
    flops_known: bool = True
    data_wait_s: float = 0.0


def peak_memory_mib(device: torch.device) -> float:
    """The most memory the run has held so far (no device sync: allocator statistics)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def _finite_or_none(value: float | None) -> float | None:
    """JSON has no NaN or inf: a non-finite value (a diverged loss) is written as null and
    flagged by the caller's `finite` field."""
    return value if value is not None and math.isfinite(value) else None


class MetricsRecorder:
    """Builds the records and hands them to `write` (the sinks)."""

    def __init__(
        self,
        write: Callable[[dict], None],
        device: torch.device,
        peak_flops: float | None,
        start_samples: int = 0,
    ) -> None:
        self.write = write
        self.device = device
        self.peak_flops = peak_flops
        self.interval = Interval()
        self.last_point = time.perf_counter()
        self.last_samples = start_samples
        self.last_record: dict | None = None

    def restart_clock(self, samples: int, now: float | None = None) -> None:
        """The interval starts now (the run phase begins; an eval ended)."""
        self.interval = Interval()
        self.last_point = time.perf_counter() if now is None else now
        self.last_samples = samples

    def step_done(self, tokens: int, flops: float | None, data_wait_s: float) -> None:
        iv = self.interval
        iv.steps += 1
        iv.tokens += tokens
        iv.data_wait_s += data_wait_s
        if flops is None:
            iv.flops_known = False
        else:
            iv.flops += flops

    def train_point(
        self, step: int, samples: int, loss: float, lr: float, optimizer: dict, seconds: float
    ) -> dict:
        """One train record over the interval since the last point (`seconds` of training,
        Progress's clock: the console shows the same rate); starts the next one."""
        now = time.perf_counter()
        seconds = max(seconds, 1e-9)
        iv = self.interval
        flop_rate = iv.flops / seconds if iv.flops_known and iv.steps else None
        record = {
            "kind": "train",
            "time": time.time(),
            "step": step,
            "samples": samples,
            "loss": _finite_or_none(loss),
            "finite": math.isfinite(loss),
            "lr": lr,
            **optimizer,
            "samples_per_s": (samples - self.last_samples) / seconds,
            "tokens_per_s": iv.tokens / seconds,
            "tflops_per_s": None if flop_rate is None else flop_rate / 1e12,
            "mfu": (
                flop_rate / self.peak_flops if flop_rate is not None and self.peak_flops else None
            ),
            "peak_memory_mib": peak_memory_mib(self.device),
            "data_wait_share": min(iv.data_wait_s / seconds, 1.0),
            "interval_steps": iv.steps,
        }
        self.write(record)
        self.last_record = record
        self.restart_clock(samples, now)
        return record

    def eval_point(self, step: int, samples: int, accuracy: float, seconds: float) -> dict:
        record = {
            "kind": "eval",
            "time": time.time(),
            "step": step,
            "samples": samples,
            "eval_mlm_accuracy": accuracy,
            "eval_seconds": seconds,
        }
        self.write(record)
        return record


def read_optimizer(optim) -> dict:
    """Gradient norm, loss scale and skipped steps: host reads, for progress points only."""
    norm = optim.grad_norm()
    return {
        "grad_norm": _finite_or_none(norm),
        "loss_scale": optim.loss_scale(),
        "skipped_steps": optim.skipped_steps(),
    }
