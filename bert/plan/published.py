"""The planner against published MLPerf BERT results (docs/plan.md).

Each row is one submission whose ten result logs were read (docs/data/published_bert_runs.json
holds every run's figures and the commit of the repository they were read from): its GPU count,
global batch, the per-GPU throughput the logs give and the olympic mean of the ten runs'
run_start..run_stop minutes. The planner takes the GPU count, throughput and batch, adds the
RCP's expected samples to converge at that batch (rcp.plan_for), and predicts the minutes.

What the logs give as throughput decides what the prediction adds:
- `whole_run`: samples over run_start..run_stop (the final `tracked_stats` throughput of the
  v3.1+ logs, which equals that ratio; computed the same way for the v2.x logs, which log none).
  Evals are inside it, so the prediction is RCP samples / throughput.
- `training`: a training-only rate (per block); the planner adds the eval schedule (MLPerf's
  interval; each eval a forward pass over 10,000 samples at three times the training rate plus
  `timing.EVAL_OVERHEAD_S`).
The throughput is an input, so this checks the convergence (and eval) part of the prediction,
not the FLOP-based step time.
"""

from __future__ import annotations

from dataclasses import dataclass

from bert.mlperf import rcp
from bert.plan import published_hyper, timing
from bert.train.config import mlperf_eval_interval

RUNS_FILE = "docs/data/published_bert_runs.json"


@dataclass(frozen=True)
class Published:
    submitter: str
    system: str
    round: str
    gpus: int
    per_gpu_samples_per_s: float
    global_batch_size: int
    minutes: float  # olympic mean of the 10 runs' run_start..run_stop, from the logs
    source: str  # repository@commit:folder the logs were read from
    throughput_basis: str = "whole_run"  # or "training" (see the module doc)


def _row(submitter, system, round_, gpus, per_gpu, batch, minutes, repo, commit, folder):
    return Published(
        submitter, system, round_, gpus, per_gpu, batch, minutes, f"{repo}@{commit[:12]}:{folder}"
    )


# Read from the logs (RUNS_FILE). v4.1 and v5.0 come from forks that mirror the official
# mlcommons results repositories (the index here holds no mlcommons copy of those rounds).
PUBLISHED = [
    _row(
        "NVIDIA",
        "DGX A100 (dgxa100_ngc22.04_pytorch), 8 x A100",
        "v2.0",
        8,
        300.76,
        448,
        18.4424,
        "mlcommons/training_results_v2.0",
        "a6ae3e16d97bca208ee5510f3614fcd4fa923650",
        "NVIDIA/results/dgxa100_ngc22.04_pytorch/bert",
    ),
    _row(
        "NVIDIA",
        "DGX A100 (dgxa100_ngc22.09_pytorch), 8 x A100",
        "v2.1",
        8,
        303.54,
        448,
        16.8821,
        "mlcommons/training_results_v2.1",
        "9b4d2df631498a2569fcfa85dfd5c830addac15a",
        "NVIDIA/results/dgxa100_ngc22.09_pytorch/bert",
    ),
    _row(
        "Dell",
        "XE9680, 8 x H100-SXM-80GB",
        "v3.1",
        8,
        942.72,
        768,
        5.5088,
        "mlcommons/training_results_v3.1",
        "f33f9444205023cf49bf19ec960992b39663f6fd",
        "Dell/results/XE9680x8H100-SXM-80GB/bert",
    ),
    _row(
        "Supermicro",
        "AS-8125GS-TNHR, 8 x H100-SXM-80GB",
        "v4.0",
        8,
        936.82,
        768,
        5.4616,
        "mlcommons/training_results_v4.0",
        "62f111b7690f163b269f32e4f93dcaaa13717c9c",
        "Supermicro/results/AS-8125GS-TNHR_8_H100-SXM-80GB/bert",
    ),
    _row(
        "Lenovo",
        "SR680a V3, 8 x H200-SXM-141GB (700 W)",
        "v4.1",
        8,
        1001.82,
        768,
        4.8734,
        "swsok/training_results_v4.1",
        "8821c7037ffd06e3775398fd39361a4c591d2235",
        "Lenovo/results/SR680aV3-8xH200_SXM_141GB_700W/bert",
    ),
    _row(
        "Dell",
        "XE9680L, 8 x B200-SXM-180GB",
        "v5.0",
        8,
        1465.37,
        768,
        3.3837,
        "prishajain1/training_results_v5.0",
        "0fdc28f013256aea84fa36fdaf1e0fa46094b18c",
        "Dell/results/1xXE9680Lx8B200-SXM-180GB/bert",
    ),
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
    samples = rcp.plan_for(row.global_batch_size, published_hyper.published()).samples_mean
    throughput = row.gpus * row.per_gpu_samples_per_s
    interval = mlperf_eval_interval(row.global_batch_size)
    evals = max(1, -(-int(samples) // interval))
    eval_s = 0.0
    if row.throughput_basis == "training":  # a whole-run rate has the evals inside it
        eval_s = evals * (eval_samples / (3 * throughput) + timing.EVAL_OVERHEAD_S)
    return Comparison(row, (samples / throughput + eval_s) / 60, samples, evals)
