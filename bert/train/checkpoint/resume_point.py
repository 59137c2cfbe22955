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

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from bert.core.errors import CheckpointError, DamagedCheckpoint
from bert.train.distributed import DistContext, all_reduce_sum
from bert.train.checkpoint.layout import (
    Manifest,
    check_compatible,
    checkpoint_root,
    complete_checkpoints,
    load_rank_state,
    load_trainer_state,
    resolve_resume,
)
from bert.train.checkpoint.settings import check_resume_settings


@dataclass
class ResumePoint:
    folder: Path
    manifest: Manifest
    trainer_state: dict  # model, optimizer, progress (and the config)
    rank_state: dict  # this rank's RNG and data position


def pick_resume_point(
    spec: str,
    output_dir: str,
    ctx: DistContext,
    global_batch_size: int,
    config: dict,
    say: Callable[[str], None],
) -> ResumePoint | None:
    """The checkpoint `spec` ("", "auto" or a folder) names, read; None for a fresh start."""
    if spec != "auto":
        folder = resolve_resume(spec, output_dir)
        return None if folder is None else _read_agreed(folder, ctx, global_batch_size, config)
    candidates = complete_checkpoints(checkpoint_root(output_dir))[::-1]
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
        trainer_state = load_trainer_state(folder)
        _check_progress(folder, manifest, trainer_state["progress"])
        point = ResumePoint(folder, manifest, trainer_state, load_rank_state(folder, ctx.rank))
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
