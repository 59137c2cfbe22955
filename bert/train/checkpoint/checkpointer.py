"""A run's checkpoints as the trainer uses them: the point it resumes from, restoring it, and
saving at the configured step interval.

The resume point is resolved once, here, and read whole when the Checkpointer is made, before
the MLPerf log opens, so a refused or damaged checkpoint writes nothing; whatever else depends
on whether the run resumes reads `resuming`. The checkpoint moves as the run's state dict
(`state_dict()` / `load_state_dict()` of the object the trainer hands over,
bert/train/train_state.py): this code splits it into the files and joins it back, without
knowing what the trainer keeps in it beyond its progress.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Callable, ContextManager, Protocol

from bert.config import Config
from bert.train.checkpoint.layout import RANK, Manifest, checkpoint_fit, checkpoint_root
from bert.train.checkpoint.resume_point import pick_resume_point
from bert.train.checkpoint.save import save_checkpoint
from bert.train.distributed import DistContext


class Stateful(Protocol):
    """What a checkpoint saves and restores: "progress" ({"step", "samples", ...}) and RANK
    (this rank's own part) among its entries; the rest is the same on every rank."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


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
        # the step of the last checkpoint saved or resumed (a fresh run's start needs none)
        self.last_step = self.resume_manifest.step if self._point else 0
        self.seed: int | None = None  # the run's seed, written in each manifest (run_seed)

    @property
    def resuming(self) -> bool:
        return self.resume_from is not None

    def run_seed(self, fresh: Callable[[], int]) -> int:
        """The seed the run trains with: the checkpoint's when resuming (the data order depends
        on it), else `fresh()`."""
        self.seed = self.resume_manifest.seed if self.resuming else fresh()
        return self.seed

    def restore(self, state: Stateful) -> None:
        """Hands the checkpoint's state dict to `state` (nothing on a fresh start); the states
        are not kept here."""
        point, self._point = self._point, None
        if point is None:
            return
        with self.fit():
            state.load_state_dict(point.state)
        progress = point.state["progress"]
        self.say(
            f"resumed from {point.folder}: step {progress['step']}, "
            f"{progress['samples']} samples trained"
        )

    def fit(self) -> ContextManager[None]:
        """Around loading the resumed state into what this config builds (the data position
        waits for the pipeline, which opens at run_start): a state that does not fit is a
        DamagedCheckpoint naming the checkpoint."""
        return checkpoint_fit(self.resume_from) if self.resuming else nullcontext()

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

    def save(self, state: Stateful) -> None:
        """Collective (the state dict may gather shards). A host sync: checkpoint points only."""
        cfg, ctx = self.cfg, self.ctx
        shared = state.state_dict()
        rank_state = shared.pop(RANK)
        step, samples = shared["progress"]["step"], shared["progress"]["samples"]
        manifest = Manifest(step, samples, ctx.world_size, self.global_batch_size, self.seed)
        folder = save_checkpoint(
            checkpoint_root(cfg.run.output_dir),
            manifest,
            ctx.rank,
            {**shared, "config": cfg.to_dict()} if ctx.is_main else None,
            rank_state,
            cfg.checkpoint.keep,
        )
        self.last_step = step
        self.say(f"checkpoint: {folder}")
