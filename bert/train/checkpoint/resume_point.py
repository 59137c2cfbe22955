"""Which checkpoint a run resumes from, read whole before the MLPerf log opens.

`checkpoint.resume=auto` takes the newest checkpoint under the output dir that every rank can
read: a damaged one (a manifest, config.json, trainer.pt or rank file that is truncated,
overwritten or missing a key: `DamagedCheckpoint`) is reported and the next older one tried,
saying so. An explicit folder is used or refused, never replaced by another. The ranks agree on
each candidate (one all-reduce each), so a file damaged on one rank's view moves all of them.
A checkpoint that was written with other settings, or by another world size, is not damaged:
that is refused as the user's error, whichever checkpoint it is.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from bert.core.errors import CheckpointError, DamagedCheckpoint
from bert.train.checkpoint.layout import (
    MANIFEST,
    RANK,
    Manifest,
    checkpoint_root,
    complete_checkpoints,
    load_rank_state,
    load_trainer_state,
)
from bert.train.checkpoint.settings import check_resume_settings
from bert.train.distributed import DistContext, all_reduce_sum


@dataclass
class ResumePoint:
    folder: Path
    manifest: Manifest
    state: dict  # the run's state dict as saved: trainer.pt's, and this rank's under RANK


def resume_candidates(spec: str, output_dir: str | os.PathLike) -> list[Path]:
    """The checkpoint folders `checkpoint.resume` names, in the order they are tried: "" none,
    "auto" every complete one under the run's output dir, newest first (none yet: a fresh
    start), or an explicit folder (already expanded by the config), used or refused."""
    if not spec:
        return []
    if spec == "auto":
        return complete_checkpoints(checkpoint_root(output_dir))[::-1]
    folder = Path(spec)
    if not folder.is_dir():
        raise CheckpointError(
            f"checkpoint.resume={spec!r}: no such folder (pass a "
            f"checkpoints/step_N folder of an earlier run, or 'auto')"
        )
    if not (folder / MANIFEST).is_file():
        raise CheckpointError(
            f"checkpoint.resume={spec!r}: no {MANIFEST} there (not a complete "
            f"training checkpoint; use a step_N folder, or 'auto')"
        )
    return [folder]


def pick_resume_point(
    spec: str,
    output_dir: str,
    ctx: DistContext,
    global_batch_size: int,
    config: dict,
    say: Callable[[str], None],
) -> ResumePoint | None:
    """The checkpoint `spec` ("", "auto" or a folder) names, read; None for a fresh start."""
    candidates = resume_candidates(spec, output_dir)
    if spec != "auto":
        return _read_agreed(candidates[0], ctx, global_batch_size, config) if candidates else None
    if not candidates:
        say("resume auto: no complete checkpoint yet, starting fresh")
        return None
    skipped = []
    for folder in candidates:
        try:
            point = _read_agreed(folder, ctx, global_batch_size, config)
        except DamagedCheckpoint as err:
            skipped.append(f"{folder.name} ({err})")
            _warn(ctx, f"resume auto: {folder} is damaged, skipping it: {err}")
            continue
        if skipped:
            _warn(
                ctx,
                f"resume auto: resuming from {folder}, the newest intact checkpoint "
                f"({len(skipped)} newer one(s) damaged)",
            )
        return point
    raise CheckpointError(
        f"resume auto: no intact checkpoint under "
        f"{checkpoint_root(output_dir)}: {'; '.join(skipped)}"
    )


def check_compatible(
    manifest: Manifest, folder: Path, world_size: int, global_batch_size: int
) -> None:
    if manifest.world_size != world_size:
        raise CheckpointError(
            f"{folder}: saved by {manifest.world_size} ranks, this job has "
            f"{world_size}; resume with the same world size (each rank's "
            f"data position is saved separately)"
        )
    if manifest.global_batch_size != global_batch_size:
        raise CheckpointError(
            f"{folder}: saved with run.global_batch_size="
            f"{manifest.global_batch_size}, this run has {global_batch_size}"
        )


def _check_progress(folder: Path, manifest: Manifest, progress: dict) -> None:
    """The run resumes at trainer.pt's progress; it must be the step the manifest vouches for."""
    if (progress["step"], progress["samples"]) != (manifest.step, manifest.samples):
        raise DamagedCheckpoint(
            f"{folder}: trainer.pt is at step {progress['step']} ({progress['samples']} "
            f"samples), its manifest at step {manifest.step} ({manifest.samples} samples)"
        )


def _warn(ctx: DistContext, message: str) -> None:
    """A skipped checkpoint means lost steps and a damaged disk or save: on stderr whatever
    log.quiet says (the progress lines `say` prints are what quiet hides), once per job."""
    if ctx.is_main:
        print(f"warning: {message}", file=sys.stderr, flush=True)


def _read_agreed(
    folder: Path, ctx: DistContext, global_batch_size: int, config: dict
) -> ResumePoint:
    """Every file of `folder` this rank needs, or DamagedCheckpoint on every rank if any rank
    found one damaged. Settings that differ from the checkpoint's raise CheckpointError (every
    rank reads the same manifest and config.json, so they all raise alike)."""
    damage, point = None, None
    try:
        manifest = Manifest.read(folder)
        check_compatible(manifest, folder, ctx.world_size, global_batch_size)
        check_resume_settings(folder, manifest.seed, config)  # before the large files
        state = load_trainer_state(folder)
        _check_progress(folder, manifest, state["progress"])
        state.pop("config", None)  # the run's own config stands (checked just above)
        point = ResumePoint(folder, manifest, {**state, RANK: load_rank_state(folder, ctx.rank)})
    except DamagedCheckpoint as err:
        damage = err
    if ctx.is_distributed:
        flags = torch.zeros(ctx.world_size, dtype=torch.int64, device=ctx.device)
        flags[ctx.rank] = damage is not None
        damaged_ranks = all_reduce_sum(flags, ctx).nonzero().flatten().tolist()
        if damaged_ranks and damage is None:
            damage = DamagedCheckpoint(f"{folder}: damaged as rank {damaged_ranks[0]} reads it")
    if damage is not None:
        raise damage
    return point
