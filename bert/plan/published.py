"""The planner against published MLPerf BERT results (issue 29, item 6; docs/plan.md).

Each row feeds the planner a published run's GPU count, per-GPU training throughput and global
batch; the planner adds the RCP's expected samples to converge at that batch (rcp.plan_for) and
the eval schedule (MLPerf's interval; each eval a forward pass over 10,000 samples at three times
the training throughput plus `timing.EVAL_OVERHEAD_S`), and predicts run_start..run_stop in
minutes, which is compared with the published score. The throughput is an input, so this checks
the convergence and eval parts of the prediction, not the FLOP-based step time.
"""
from __future__ import annotations

from dataclasses import dataclass

from bert.plan import rcp, timing
from bert.train.config import mlperf_eval_interval


@dataclass(frozen=True)
class Published:
    submitter: str
    system: str
    round: str
    gpus: int
    per_gpu_samples_per_s: float
    global_batch_size: int
    minutes: float  # the published score: olympic mean of 10 runs (x the RCP scaling factor)
    source: str


# Only figures read from the sources named; see docs/plan.md for what is and is not verified.
PUBLISHED = [
    Published("Supermicro", "AS-8125GS-TNHR, 8 x H100-SXM5-80GB", "v4.0", 8, 973.0, 768, 5.306,
              "score and per-GPU throughput: REFERENCE 7; global batch 768: "
              "mlcommons/training_results_v4.0 Supermicro/results/"
              "AS-8125GS-TNHR_8_H100-SXM-80GB/bert/result_0.txt (global_batch_size)"),
    Published("NVIDIA", "8 x H200-SXM5-141GB", "v4.1", 8, 1032.0, 768, 4.972,
              "score and per-GPU throughput: REFERENCE 7; global batch 768 NOT read from the "
              "logs: NVIDIA's 8-GPU Hopper config (48 packed rows x 8, REFERENCE 3)"),
]


@dataclass(frozen=True)
class Comparison:
    row: Published
    predicted_minutes: float
    samples: float
    evals: int

    @property
    def error(self) -> float:
        """(predicted - published) / published"""
        return (self.predicted_minutes - self.row.minutes) / self.row.minutes


def predict(row: Published, eval_samples: int = 10_000) -> Comparison:
    samples = rcp.plan_for(row.global_batch_size).samples_mean
    throughput = row.gpus * row.per_gpu_samples_per_s
    interval = mlperf_eval_interval(row.global_batch_size)
    evals = max(1, -(-int(samples) // interval))
    eval_s = evals * (eval_samples / (3 * throughput) + timing.EVAL_OVERHEAD_S)
    return Comparison(row, (samples / throughput + eval_s) / 60, samples, evals)
