"""The scale model: step time of one GPU kind at any GPU count and per-GPU batch, calibrated from
one measured point of that kind.

    compute   = (local batch + overhead_samples) / R
                R: the GPU's samples/s at large per-GPU batches; the per-step work that does not
                shrink with the batch (kernel launches, the optimizer step, host work) costs as
                much as `overhead_samples` samples, so per-GPU throughput R b / (b + b0) falls
                at small per-GPU batches b
    gradients = GRAD_BYTES x parameters reduced over a two-level topology: inside an NVLink
                domain of n GPUs a reduce-scatter plus all-gather, 2 (n-1)/n x bytes over the
                NVLink bandwidth; between the D domains each GPU's 1/n shard all-reduced over
                its share of the network (the node's NICs x their rate / GPUs per node, as the
                result's system description or --nics-per-node/--nic-gbps state; else the
                datasheet): by ring, 2 (D-1)/D x bytes / n, or with in-network reduction
                (SHARP) SHARP_TRAFFIC x bytes / n, about half the ring's at large D; the two
                levels run one after the other (no overlap between them is assumed)
    exposed   = max(0, gradients - hidden x backward), backward = BACKWARD_SHARE x compute of
                the batch: the part of the reduction the backward pass does not hide
    step      = compute + exposed
    eval      = EVAL_SAMPLES / (GPUs x eval_speed x R), once per MLPerf eval interval
    score     = steps x step + evals x eval (MLPerf's run_start..run_stop; init apart)

Constants and their sources:
- GRAD_BYTES = 2: bf16/fp16 gradients, as the published BERT submissions reduce them (NVIDIA's
  DistributedFusedLAMB reduce-scatters 16-bit gradients, shared/REFERENCE.md 5).
- BACKWARD_SHARE = 2/3: the backward pass is two thirds of a step's FLOPs (forward : backward =
  1 : 2, bert/model/flops.py).
- EVAL_SAMPLES = 10,000: the MLPerf BERT eval set (every published log prints eval_samples 10000).
- Bandwidths and domain sizes: vendor datasheets (bert/core/gpus.py); per result, its NICs from
  its submission's system description (bert/plan/network.py).
- The ring's 2 (n-1)/n: the bytes each rank sends (and receives) in a ring all-reduce, NCCL's
  bus-bandwidth factor for all-reduce (nccl-tests, doc/PERFORMANCE.md).
- SHARP_TRAFFIC = 1: with SHARP the switches reduce: each rank sends its data up the
  aggregation tree once and receives the result once (NVIDIA SHARP documentation,
  Introduction; NCCL uses it through the NCCL-SHARP plugin), against the ring's 2 (D-1)/D.
- FITTED (overhead_samples, eval_speed, hidden): fitted on the training subset by
  `bert.plan.fit` (rounds v3.0 and v3.1, calibration points left out), never on the results the
  validation scores; tests/tools/test_plan_scale.py refits them and fails when they drift.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

GRAD_BYTES = 2
BACKWARD_SHARE = 2 / 3
EVAL_SAMPLES = 10_000
SHARP_TRAFFIC = 1.0


@dataclass(frozen=True)
class Fitted:
    """The scale model's free constants."""

    overhead_samples: float  # per-step work that does not shrink with the batch, in samples
    eval_speed: float  # eval samples/s per GPU, as a multiple of R
    hidden: float  # share of the backward pass the gradient reduction runs under (0 to 1)


# python -m bert.plan.fit (three significant figures; `hidden` reaches its bound 0: on the
# training subset the reduction is best modelled as not overlapping the backward at all)
FITTED = Fitted(overhead_samples=15.9, eval_speed=0.799, hidden=0.0)


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
    """Seconds one reduction of the 16-bit gradients takes over the topology (none on one GPU)."""
    if topo.gpus <= 1:
        return 0.0
    size = GRAD_BYTES * params
    n = max(1, min(topo.nvlink_domain, topo.gpus))
    domains = topo.gpus / n
    intra = 2 * (n - 1) / n * size / (topo.nvlink_gbs * 1e9) if n > 1 else 0.0
    inter = 0.0
    if domains > 1:
        factor = SHARP_TRAFFIC if topo.sharp else 2 * (domains - 1) / domains
        inter = factor * size / n / (topo.network_gbs * 1e9)
    return intra + inter


def step(
    local_batch: float, params: int, topo: Topology, peak: float, k: Fitted | None = None
) -> ScaleStep:
    k = k or FITTED
    compute = (local_batch + k.overhead_samples) / peak
    comm = gradient_seconds(params, topo)
    backward = BACKWARD_SHARE * local_batch / peak
    return ScaleStep(compute, comm, max(0.0, comm - k.hidden * backward))


def eval_seconds(eval_samples: int, gpus: int, peak: float, k: Fitted | None = None) -> float:
    return eval_samples / (gpus * (k or FITTED).eval_speed * peak)


def _solve(too_slow, what: str) -> float:
    """The R at which `too_slow(R)` turns False (it is True below, False above), by bisection in
    log space; raises ValueError where no R in (1, 1e7) samples/s per GPU gets there."""
    lo, hi = 1.0, 1e7
    if not too_slow(lo) or too_slow(hi):
        raise ValueError(f"{what}: no throughput per GPU explains it under the scale model")
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if too_slow(mid) else (lo, mid)
    return math.sqrt(lo * hi)


def calibrate(
    rate_per_gpu: float, local_batch: float, params: int, topo: Topology, k: Fitted | None = None
) -> float:
    """R such that the model gives `rate_per_gpu` training samples/s per GPU at this point."""
    if not (0 < rate_per_gpu < math.inf and 0 < local_batch < math.inf):
        raise ValueError("calibration rate and batch must be finite and > 0")
    return _solve(
        lambda r: local_batch / step(local_batch, params, topo, r, k).step_s < rate_per_gpu,
        f"{rate_per_gpu:g} samples/s per GPU at local batch {local_batch:g} on {topo.gpus} GPUs",
    )


# -- published results -------------------------------------------------------------------------

DATA = "bert/plan/published_results.json"


@dataclass(frozen=True)
class Point:
    """One measured point: training samples/s per GPU (evals excluded) at a GPU count."""

    gpus: int
    samples_per_s: float
    local_batch: float
    source: str


def published_results() -> list[dict]:
    return json.loads((Path(__file__).resolve().parents[2] / DATA).read_text())


def row_id(row: dict) -> str:
    """`round:folder`, e.g. `v4.0:Supermicro/results/AS-8125GS-TNHR_8_H100-SXM-80GB/bert`
    (a folder may recur in several rounds)."""
    return f"{row['round']}:{row['source'].split(':', 1)[1]}"


def predicted_seconds(
    row: dict, params: int, topo: Topology, peak: float, k: Fitted | None = None
) -> tuple[float, float]:
    """(training seconds, seconds of all evals) of a published result under the model, with the
    samples and evals that result actually took (so only the time model is tested)."""
    local = row["global_batch_size"] / row["gpus"]
    steps = row["mean_samples"] / row["global_batch_size"]
    one_eval = eval_seconds(EVAL_SAMPLES, row["gpus"], peak, k)
    return steps * step(local, params, topo, peak, k).step_s, row["evals_mean"] * one_eval


def measured_training_seconds(row: dict, params: int, topo: Topology, peak: float, k=None):
    """A result's olympic mean run time less its evals: the logs' median eval time where the
    logs time evals, else the model's eval at `peak`."""
    one_eval = row["eval_s_median"]
    if one_eval is None:
        one_eval = eval_seconds(EVAL_SAMPLES, row["gpus"], peak, k)
    return row["olympic_mean_minutes"] * 60 - row["evals_mean"] * one_eval


def calibrate_row(row: dict, params: int, topo: Topology, k: Fitted | None = None) -> float:
    """R such that the model's training time of this published result equals its measured one."""
    return _solve(
        lambda r: (
            predicted_seconds(row, params, topo, r, k)[0]
            > measured_training_seconds(row, params, topo, r, k)
        ),
        f"published result {row_id(row)}",
    )


def published_point(calibration: str, params: int, topo_for, k: Fitted | None = None):
    """(Point, R, row) of the published result `calibration` (a `row_id`); `topo_for(row)` gives
    the topology it ran on."""
    rows = [r for r in published_results() if row_id(r) == calibration]
    if not rows:
        raise ValueError(f"no published result {calibration} in {DATA}")
    row = rows[0]
    topo = topo_for(row)
    peak = calibrate_row(row, params, topo, k)
    local = row["global_batch_size"] / row["gpus"]
    point = Point(
        row["gpus"],
        local / step(local, params, topo, peak, k).step_s,
        local,
        f"{row['submitter']} {row['round']} {row['system']} ({row['gpus']} GPUs, batch "
        f"{row['global_batch_size']}): {row['source']}",
    )
    return point, peak, row
