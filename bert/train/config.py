"""The training run's own configs, one per concern: the run itself (`run:`), evaluation
(`eval:`), training checkpoints (`checkpoint:`), progress and audit logging (`log:`), the
ranks' process group (`dist:`) and the MLPerf submission it belongs to (`submission:`). Paths
are expanded once, here (bert/core/settings.py: frozen, validated sections)."""

from __future__ import annotations

import importlib.util
import math
from typing import Literal

from bert.core.errors import check, install_hint
from bert.core.settings import ExpandedPath, F, section

SEED_MAX = 2**63 - 1  # torch.manual_seed takes a 64-bit seed


@section("run")
class RunConfig:
    """Batching, step budget, device, precision and seed of one run."""

    global_batch_size: int = F(448, "samples per optimizer step over all ranks", gt=0)
    gradient_accumulation_steps: int = F(1, "micro-batches per optimizer step on each rank", gt=0)
    max_steps: int = F(0, "0: schedule.total_steps", ge=0)
    max_samples: int = F(0, "0: no limit beyond max_steps", ge=0)
    seed: int = F(-1, "-1: drawn from os.urandom and logged", ge=-1, le=SEED_MAX)
    precision: Literal["fp32", "bf16", "fp16"] = F("fp32", "bf16 and fp16 under autocast")
    device: Literal["auto", "cpu", "cuda"] = F("auto", "auto: cuda when PyTorch sees a GPU")
    threads: int = F(
        0, "torch intra-op threads on CPU; 0: PyTorch's (one per core); README", ge=0, le=4096
    )
    cache_cleared: bool = F(False, "the launcher flushed the page cache before this run (logged)")
    init_checkpoint: ExpandedPath = F(
        "", "weights to start from: .pt (ours, NVIDIA), HF .bin/.safetensors"
    )
    output_dir: ExpandedPath = F("results/run", "the MLPerf log, checkpoints", min_length=1)
    eval_only: bool = F(
        False,
        "evaluate the initial model (init_checkpoint) once and stop: the "
        "starting accuracy (about 0.34085 for the MLPerf phase-1 "
        "checkpoint, REFERENCE 2); no training data is read",
    )
    max_nonfinite_steps: int = F(
        10,
        "consecutive steps with a non-finite loss after which the "
        "run stops with an error naming the step (diverged); 0: "
        "never (bert/train/step_guard.py)",
        ge=0,
    )
    cuda_graphs: bool = F(
        False,
        "replay forward+backward as one CUDA graph per padded batch "
        "shape, eager for a batch no shape fits (docs/cuda_graphs.md); "
        "CUDA, one rank; not yet validated on a GPU",
    )
    graph_token_bucket: int = F(1024, "cuda_graphs: tokens padded to a multiple of this", gt=0)
    graph_masked_bucket: int = F(
        128, "cuda_graphs: masked tokens padded to a multiple of this", gt=0
    )
    graph_max_shapes: int = F(
        32, "cuda_graphs: most shapes captured; a new shape past them runs eagerly", gt=0
    )


@section("dist")
class DistConfig:
    """The ranks' process group (bert/train/distributed.py)."""

    timeout_s: float = F(
        600.0,
        "seconds a collective (and the rendezvous) waits for the "
        "slowest rank; then the run stops with one error naming the "
        "ranks that never came (stalled or dead). Above the longest "
        "gap between collectives: a checkpoint save, an eval, the "
        "first step's compilation",
        gt=0,
        le=7 * 24 * 3600,
    )


@section("eval")
class EvalConfig:
    """When and on what the MLM accuracy is measured, and the target that ends the run."""

    target_mlm_accuracy: float = F(
        0.720, "masked-LM accuracy that ends the run (success)", gt=0, le=1
    )
    interval_samples: int = F(0, "0: the MLPerf formula (150,000 for GBS <= 2048)", ge=0)
    samples: int = F(10000, "0: the whole eval file", ge=0)
    batch_size: int = F(128, "per rank", gt=0)


@section("checkpoint")
class CheckpointConfig:
    """Training checkpoints (bert/train/checkpoint/) under run.output_dir/checkpoints."""

    interval_steps: int = F(
        0,
        "every N optimizer steps and at the end of the run; 0: none. "
        "Each costs a host copy of the model and the full optimizer "
        "state, so MLPerf timing runs leave it off.",
        ge=0,
    )
    final: bool = F(
        True,
        "a checkpoint when the run ends (also stopped by a signal): the trained model with "
        "its config, for --resume, run.init_checkpoint and `open-bert-convert hf-export "
        "OUT/checkpoints/step_N`. Written after run_stop, outside the timed region; false: "
        "a run keeps no model unless interval_steps is set",
    )
    keep: int = F(2, "newest complete checkpoints kept; 0: keep all", ge=0)
    resume: ExpandedPath = F(
        "",
        '"" start fresh; "auto" continue from the newest complete '
        "checkpoint under output_dir (a fresh start when there is "
        "none); or a checkpoint folder (.../checkpoints/step_N)",
    )


@section("log")
class LogConfig:
    """Human progress lines and the audit trail (MLPerf lines: bert/mlperf/writer.py)."""

    interval_s: float = F(10.0, "seconds between progress lines", ge=0)
    quiet: bool = F(False, "no progress lines (--quiet); the run_stop line is still printed")
    record_samples_dir: ExpandedPath = F(
        "", "audit trail: DIR/rank<R>.txt, `step shard index` per sample"
    )
    tensorboard: bool = F(
        False,
        "the metrics (metrics.jsonl's scalars) also as TensorBoard "
        "events in OUTPUT_DIR/tensorboard; needs the tensorboard "
        "package (pip install 'open-bert-mlperf[track]')",
    )
    all_ranks: bool = F(False, "every rank logs at info (default: rank 0 only; others warnings)")

    def __post_init__(self) -> None:
        check(
            not self.tensorboard or importlib.util.find_spec("tensorboard") is not None,
            f"log.tensorboard=true needs the tensorboard package: {install_hint('track')}",
        )


@section("submission")
class SubmissionConfig:
    """What the MLPerf log says about the submission (the checker's submission_* keys)."""

    org: str = F("open-bert", "submission_org")
    platform: str = F("cpu", "submission_platform: the system's name")
    division: Literal["closed", "open"] = F("closed", "submission_division")
    status: str = F("onprem", "submission_status (e.g. onprem, cloud, research)")


def mlperf_eval_interval(global_batch_size: int) -> int:
    """Samples between evals by the MLPerf BERT rule: floor(0.05*(230.23*GBS+3e6)/25e3)*25e3."""
    return int(math.floor(0.05 * (230.23 * global_batch_size + 3_000_000) / 25_000) * 25_000)


def run_device_type(requested: str) -> str:
    """ "cpu" or "cuda": what run.device resolves to on this machine ("auto": cuda when PyTorch
    sees a GPU). The config's checks and the device the trainer picks both read it."""
    if requested != "auto":
        return requested
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
