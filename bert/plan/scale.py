"""The scale model: step time of one GPU kind at any GPU count and per-GPU batch,
calibrated from one measured point (item 3).

    compute   = (local batch + OVERHEAD_SAMPLES) / R
                R: the GPU's samples/s at large per-GPU batches; the per-step work that does not
                shrink with the batch (kernel launches, optimizer, host work) costs as much as
                OVERHEAD_SAMPLES samples, so per-GPU throughput R b / (b + b0) falls at small b
    gradients = 16-bit gradients (GRAD_BYTES x parameters) reduced over a two-level topology:
                inside an NVLink domain a reduce-scatter plus all-gather, 2 (n-1)/n x bytes over
                the NVLink bandwidth; between domains each GPU's 1/n shard over its own NIC, a
                ring all-reduce (2 (N-1)/N x bytes / n) or, with in-network reduction (SHARP),
                the shard sent once (bytes / n)
    exposed   = max(0, gradients - OVERLAP x local batch / R): the reduction runs under the
                backward pass (OVERLAP of the compute)
    step      = compute + exposed
    eval      = eval samples / (GPUs x EVAL_SPEED x R), once per MLPerf eval interval
    score     = samples to converge / throughput + evals x eval (run_start..run_stop; init apart)

Constants and their sources:
- GRAD_BYTES = 2: bf16/fp16 gradients, as every published BERT submission reduces them
  (NVIDIA's DistributedFusedLAMB reduce-scatters 16-bit gradients, REFERENCE 5).
- OVERLAP = 2/3: the backward pass is about two thirds of a step's FLOPs (forward : backward
  = 1 : 2, flops.py).
- Bandwidths: vendor datasheets (gpus.py).
- OVERHEAD_SAMPLES and EVAL_SPEED: fitted on the training subset named in validate.py
  (TRAINING), never on the results it scores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GRAD_BYTES = 2
OVERLAP = 2 / 3
OVERHEAD_SAMPLES = 20.0  # fitted: validate.TRAINING
EVAL_SPEED = 1.0  # eval samples/s per GPU over R, fitted: validate.TRAINING


@dataclass(frozen=True)
class Topology:
    gpus: int
    nvlink_domain: int  # GPUs that share NVLink (a node, or an NVL72 rack)
    nvlink_gbs: float  # per GPU, one direction
    network_gbs: float  # per GPU between domains, one direction
    sharp: bool = False  # in-network reduction between domains


@dataclass(frozen=True)
class ScaleStep:
    compute_s: float
    communication_s: float
    exposed_s: float

    @property
    def step_s(self) -> float:
        return self.compute_s + self.exposed_s


def gradient_seconds(params: int, topo: Topology) -> float:
    size = GRAD_BYTES * params
    n = max(1, min(topo.nvlink_domain, topo.gpus))
    domains = topo.gpus / n
    intra = 2 * (n - 1) / n * size / (topo.nvlink_gbs * 1e9) if n > 1 else 0.0
    inter = 0.0
    if domains > 1:
        factor = 1.0 if topo.sharp else 2 * (domains - 1) / domains
        inter = factor * size / n / (topo.network_gbs * 1e9)
    return intra + inter


def step(local_batch: float, params: int, topo: Topology, peak: float) -> ScaleStep:
    compute = (local_batch + OVERHEAD_SAMPLES) / peak
    comm = gradient_seconds(params, topo) if topo.gpus > 1 else 0.0
    exposed = max(0.0, comm - OVERLAP * local_batch / peak)
    return ScaleStep(compute, comm, exposed)


def eval_seconds(eval_samples: int, gpus: int, peak: float) -> float:
    return eval_samples / (gpus * EVAL_SPEED * peak)


def calibrate(rate_per_gpu: float, local_batch: float, params: int, topo: Topology) -> float:
    """R such that the model gives `rate_per_gpu` training samples/s per GPU at this point."""
    if not rate_per_gpu > 0 or not local_batch > 0:
        raise ValueError("calibration rate and batch must be > 0")
    lo, hi = rate_per_gpu * 0.5, rate_per_gpu * 1e4
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if local_batch / step(local_batch, params, topo, mid).step_s < rate_per_gpu:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


DATA = "bert/plan/published_results.json"


@dataclass(frozen=True)
class Point:
    """One measured point: training samples/s per GPU (evals excluded) at a GPU count."""

    gpus: int
    samples_per_s: float
    local_batch: float
    source: str


def published_results() -> list[dict]:
    import json
    from pathlib import Path

    return json.loads((Path(__file__).resolve().parents[2] / DATA).read_text())


def training_rate(row: dict) -> float:
    """A published result's training samples/s per GPU: its mean samples over the olympic mean
    run time less its evals (the logs' median eval time; where the logs time no eval, the
    model's eval at the whole-run rate)."""
    gpus, minutes = row["gpus"], row["olympic_mean_minutes"]
    whole = row["mean_samples"] / (minutes * 60) / gpus
    one_eval = row["eval_s_median"]
    if one_eval is None:
        local = row["global_batch_size"] / gpus
        one_eval = 10_000 / (gpus * EVAL_SPEED * whole * (local + OVERHEAD_SAMPLES) / local)
    return row["mean_samples"] / (minutes * 60 - row["evals_mean"] * one_eval) / gpus


def published_point(folder: str) -> tuple[Point, dict]:
    """The newest published result of that folder, as a calibration point."""
    rows = [r for r in published_results() if r["source"].endswith(":" + folder)]
    if not rows:
        raise ValueError(f"no published result {folder} in {DATA}")
    row = rows[-1]
    point = Point(
        row["gpus"],
        training_rate(row),
        row["global_batch_size"] / row["gpus"],
        f"{row['submitter']} {row['round']} {row['system']} ({row['gpus']} GPUs, batch "
        f"{row['global_batch_size']}): {row['source']}",
    )
    return point, row
