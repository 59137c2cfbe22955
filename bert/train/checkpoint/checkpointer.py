"""A run's checkpoints as the trainer uses them: the point it resumes from, restoring it, and
saving at the configured step interval (the files and their checks: bert/train/resume.py).

The resume point is read whole when the Checkpointer is made, before the MLPerf log opens, so a
refused or damaged checkpoint writes nothing. Restoring happens in two parts: the init phase
loads weights, optimizer and RNG (`restore`); the data position waits for the run phase, when
the pipeline exists (`restore_pipeline`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from bert.config import Config
from bert.train.distributed import DistContext
from bert.train.checkpoint.layout import (
    TRAINER_FILE,
    Manifest,
    checkpoint_fit,
    checkpoint_root,
    rank_file,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from bert.train.checkpoint.resume_point import pick_resume_point


class Checkpointer:
    def __init__(
        self, cfg: Config, ctx: DistContext, global_batch_size: int, say: Callable[[str], None]
    ):
        self.cfg, self.ctx, self.say = cfg, ctx, say
        self.global_batch_size = global_batch_size
        self._point = pick_resume_point(
            cfg.checkpoint.resume, cfg.run.output_dir, ctx, global_batch_size, cfg.to_dict(), say
        )
        # the checkpoint this run resumes from, read whole before the log opens; None: fresh
        self.resume_from: Path | None = self._point.folder if self._point else None
        self.resume_manifest: Manifest | None = self._point.manifest if self._point else None
        self.last_step: int | None = None  # the step of the last checkpoint saved or resumed

    def restore(self, raw_model: torch.nn.Module, optim) -> tuple[dict, dict]:
        """Weights, optimizer, schedule and loss scale; then this rank's RNG (last, so nothing
        after it draws). Returns (progress: step, samples, accuracy; the pipeline's state)."""
        point, self._point = self._point, None  # the states are not kept
        with checkpoint_fit(point.folder / TRAINER_FILE):
            raw_model.load_state_dict(point.trainer_state["model"])
            optim.load_state_dict(point.trainer_state["optimizer"])
        with checkpoint_fit(point.folder / rank_file(self.ctx.rank)):
            set_rng_state(point.rank_state["rng"], self.ctx.device)
        progress = point.trainer_state["progress"]
        self.say(
            f"resumed from {point.folder}: step {progress['step']}, "
            f"{progress['samples']} samples trained"
        )
        return progress, point.rank_state["pipeline"]

    def restore_pipeline(self, pipeline, state: dict) -> None:
        with checkpoint_fit(self.resume_from / rank_file(self.ctx.rank)):
            pipeline.load_state_dict(state)

    def due(self, step: int) -> bool:
        interval = self.cfg.checkpoint.interval_steps
        return interval > 0 and step % interval == 0 and step != self.last_step

    def final_due(self, step: int) -> bool:
        """At the end of a run (or an interrupt): checkpoints on and this step not yet saved."""
        return self.saves_final and step != self.last_step

    @property
    def saves_final(self) -> bool:
        """The run's end is saved: checkpoint.final, or an interval's checkpoints."""
        return self.cfg.checkpoint.final or self.cfg.checkpoint.interval_steps > 0

    def save(
        self,
        step: int,
        samples: int,
        accuracy: float,
        raw_model: torch.nn.Module,
        optim,
        pipeline,
        seed: int,
    ) -> None:
        """Collective. A host sync (state copies): at checkpoint points only."""
        cfg, ctx = self.cfg, self.ctx
        optim_state = optim.state_dict()  # collective for the sharded optimizer
        trainer_state = None
        if ctx.is_main:
            trainer_state = {
                "model": raw_model.state_dict(),
                "optimizer": optim_state,
                "progress": {"step": step, "samples": samples, "accuracy": accuracy},
                "config": cfg.to_dict(),
            }
        rank_state = {"rng": rng_state(ctx.device), "pipeline": pipeline.state_dict()}
        manifest = Manifest(step, samples, ctx.world_size, self.global_batch_size, seed)
        folder = save_checkpoint(
            checkpoint_root(cfg.run.output_dir),
            manifest,
            ctx.rank,
            trainer_state,
            rank_state,
            cfg.checkpoint.keep,
        )
        self.last_step = step
        self.say(f"checkpoint: {folder}")
