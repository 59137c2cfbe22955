"""The FLOP model of step time, throughput and time to train: what `--efficiency` selects (the
default is the scale model, scale.py).

    compute   = local batch x FLOPs per sample (unpadded, MLPerf mix) / (peak x efficiency)
    gradients = ring reduce-scatter + all-gather (sharded) or all-reduce (replicated) of the fp32
                gradients: 2 (W-1)/W x 4 bytes x parameters over the slowest link in the ring
                (NVLink on one node, the network across nodes); the reduction overlaps the last
                micro-batch's backward (2/3 of its compute) except at least one bucket, the
                sharded optimizer's parameter all-gather does not overlap
    step      = compute + exposed communication
    score     = samples to converge / throughput + evaluations x eval time
                (MLPerf's run_start..run_stop; initialization is shown apart, not scored)

The efficiency is given (`--efficiency`) and printed with every plan; `implied_efficiency` gives
the one a per-GPU throughput amounts to (this program's own GPU record where bert/core/gpus.py
has one, else the published MLPerf throughput).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

EVAL_OVERHEAD_S = 1.0  # per eval beyond its FLOPs: all-reduce, logging, host work (assumption)
BUCKET_MB = 25.0  # optim.bucket_cap_mb's default: the part of the reduction never overlapped


@dataclass(frozen=True)
class Rates:
    """What one GPU delivers, and how fast gradients move."""

    tflops: float  # dense 16-bit peak
    efficiency: float  # fraction of the peak the training step reaches
    link_gbs: float  # slowest link in the gradient ring, GB/s per GPU, one direction

    @property
    def flops_per_s(self) -> float:
        return self.tflops * 1e12 * self.efficiency


def implied_efficiency(samples_per_s: float, flops_per_sample: float, tflops: float) -> float:
    """The fraction of the peak a published per-GPU throughput amounts to."""
    return samples_per_s * flops_per_sample / (tflops * 1e12)


@dataclass(frozen=True)
class StepTime:
    compute_s: float
    communication_s: float  # all of it
    exposed_s: float  # what the step waits for

    @property
    def step_s(self) -> float:
        return self.compute_s + self.exposed_s


def step_time(
    local_batch: int,
    accumulation: int,
    flops_per_sample: float,
    params: int,
    world: int,
    sharded: bool,
    rates: Rates,
) -> StepTime:
    compute = local_batch * flops_per_sample / rates.flops_per_s
    if world == 1:
        return StepTime(compute, 0.0, 0.0)
    ring = 2 * (world - 1) / world
    half = ring / 2 * 4.0 * params / (rates.link_gbs * 1e9)  # one reduce-scatter (or gather)
    bucket = ring * BUCKET_MB * 2**20 / (rates.link_gbs * 1e9)
    window = 2 / 3 * compute / accumulation  # the last micro-batch's backward
    reduction = 2 * half if not sharded else half  # all-reduce, or the reduce-scatter alone
    exposed = max(reduction - window, min(bucket, reduction))
    if sharded:
        exposed += half  # the parameter all-gather after the update
    return StepTime(compute, 2 * half, exposed)


@dataclass(frozen=True)
class TimeToTrain:
    train_s: float
    evals: int
    eval_s: float  # all evals together

    @property
    def score_min(self) -> float:
        return (self.train_s + self.eval_s) / 60


def time_to_train(
    samples: float,
    samples_per_s: float,
    eval_interval: int,
    eval_samples: int,
    world: int,
    eval_flops_per_sample: float,
    rates: Rates,
) -> TimeToTrain:
    """Training until `samples`, with an eval every `eval_interval` samples (the last one at the
    converging point); eval time from the forward FLOPs of the eval set plus the overhead."""
    evals = max(1, math.ceil(samples / eval_interval - 1e-9))
    one_eval = eval_samples * eval_flops_per_sample / (world * rates.flops_per_s)
    return TimeToTrain(samples / samples_per_s, evals, evals * (one_eval + EVAL_OVERHEAD_S))
