"""The training run's own configs, one per concern: the run itself (`run:`), evaluation
(`eval:`), training checkpoints (`checkpoint:`), progress and audit logging (`log:`) and the
MLPerf submission it belongs to (`submission:`). Paths are expanded once, here."""
from __future__ import annotations

import importlib.util
import math
import os
from dataclasses import dataclass
from typing import Literal

from bert.core.errors import check


@dataclass
class RunConfig:
    """Batching, step budget, device, precision and seed of one run."""

    global_batch_size: int = 448  # samples per optimizer step over all ranks
    gradient_accumulation_steps: int = 1  # micro-batches per optimizer step on each rank
    max_steps: int = 0  # 0: schedule.total_steps
    max_samples: int = 0  # 0: no limit beyond max_steps
    seed: int = -1  # -1: drawn from os.urandom and logged
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"  # bf16 and fp16 under autocast
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: cuda when PyTorch sees a GPU
    threads: int = 0  # torch intra-op threads on CPU; 0: PyTorch's (one per core); README
    cache_cleared: bool = False  # the launcher flushed the page cache before this run (logged)
    init_checkpoint: str = ""  # weights to start from: .pt (ours, NVIDIA), HF .bin/.safetensors
    output_dir: str = "results/run"  # the MLPerf log, checkpoints
    # evaluate the initial model (init_checkpoint) once and stop: the starting accuracy
    # (about 0.34085 for the MLPerf phase-1 checkpoint, REFERENCE 2); no training data is read
    eval_only: bool = False

    def __post_init__(self) -> None:
        self.init_checkpoint = os.path.expanduser(self.init_checkpoint)
        self.output_dir = os.path.expanduser(self.output_dir)
        check(self.global_batch_size > 0,
              f"run.global_batch_size={self.global_batch_size} must be > 0")
        check(self.gradient_accumulation_steps > 0,
              f"run.gradient_accumulation_steps={self.gradient_accumulation_steps} must be > 0")
        for name in ("max_steps", "max_samples"):
            check(getattr(self, name) >= 0, f"run.{name}={getattr(self, name)} must be >= 0")


@dataclass
class EvalConfig:
    """When and on what the MLM accuracy is measured, and the target that ends the run."""

    target_mlm_accuracy: float = 0.720  # masked-LM accuracy that ends the run (success)
    interval_samples: int = 0  # 0: the MLPerf formula (150,000 for GBS <= 2048)
    samples: int = 10000  # 0: the whole eval file
    batch_size: int = 128  # per rank

    def __post_init__(self) -> None:
        check(0.0 < self.target_mlm_accuracy <= 1.0,
              f"eval.target_mlm_accuracy={self.target_mlm_accuracy} must be in (0, 1]")
        check(self.batch_size > 0, f"eval.batch_size={self.batch_size} must be > 0")
        for name in ("interval_samples", "samples"):
            check(getattr(self, name) >= 0, f"eval.{name}={getattr(self, name)} must be >= 0")


@dataclass
class CheckpointConfig:
    """Training checkpoints (bert/train/resume.py) under run.output_dir/checkpoints."""

    # every N optimizer steps and at the end of the run; 0: none. Each costs a host copy of the
    # model and the full optimizer state, so MLPerf timing runs leave it off.
    interval_steps: int = 0
    keep: int = 2  # newest complete checkpoints kept; 0: keep all
    # "" start fresh; "auto" continue from the newest complete checkpoint under output_dir (a
    # fresh start when there is none); or a checkpoint folder (.../checkpoints/step_N)
    resume: str = ""

    def __post_init__(self) -> None:
        self.resume = os.path.expanduser(self.resume)
        for name in ("interval_steps", "keep"):
            check(getattr(self, name) >= 0,
                  f"checkpoint.{name}={getattr(self, name)} must be >= 0")


@dataclass
class LogConfig:
    """Human progress lines and the audit trail (MLPerf lines: bert/train/mlperf.py)."""

    interval_s: float = 10.0  # seconds between progress lines
    quiet: bool = False  # no progress lines (--quiet); the run_stop line is still printed
    record_samples_dir: str = ""  # audit trail: DIR/rank<R>.txt, `step shard index` per sample
    # the metrics (metrics.jsonl's scalars) also as TensorBoard events in OUTPUT_DIR/tensorboard;
    # needs the tensorboard package (pip install '.[track]')
    tensorboard: bool = False
    all_ranks: bool = False  # every rank logs at info (default: rank 0 only; others warnings)

    def __post_init__(self) -> None:
        self.record_samples_dir = os.path.expanduser(self.record_samples_dir)
        check(not self.tensorboard or importlib.util.find_spec("tensorboard") is not None,
              "log.tensorboard=true needs the tensorboard package: pip install tensorboard "
              "(or the project's [track] extra)")


@dataclass
class SubmissionConfig:
    """What the MLPerf log says about the submission (the checker's submission_* keys)."""

    org: str = "open-bert"  # submission_org
    platform: str = "cpu"  # submission_platform: the system's name
    division: Literal["closed", "open"] = "closed"  # submission_division
    status: str = "onprem"  # submission_status (e.g. onprem, cloud, research)


def mlperf_eval_interval(global_batch_size: int) -> int:
    """Samples between evals by the MLPerf BERT rule: floor(0.05*(230.23*GBS+3e6)/25e3)*25e3."""
    return int(math.floor(0.05 * (230.23 * global_batch_size + 3_000_000) / 25_000) * 25_000)
