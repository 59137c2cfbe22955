"""Writing a checkpoint atomically, and pruning old ones.

Writing is atomic at every level. Each file is written to a temporary name and renamed; all of
a checkpoint goes into `step_N.partial/`; after a barrier (every rank's file is on disk) rank 0
writes the manifest and renames the folder to `step_N`. A run killed at any moment leaves the
previous complete checkpoint intact, plus at most a `*.partial` folder that loading ignores and
the next save removes. Rank 0 keeps the newest `checkpoint.keep` complete checkpoints.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from bert.core.files import atomic_path, write_text_atomic
from bert.train.checkpoint.layout import (
    DELETING_SUFFIX,
    MANIFEST,
    PARTIAL_SUFFIX,
    TRAINER_FILE,
    Manifest,
    complete_checkpoints,
    rank_file,
    step_dir,
)
from bert.train.checkpoint.settings import write_config


def atomic_torch_save(obj: Any, path: Path) -> None:
    """torch.save under a temporary name, synced to disk, then renamed over `path`."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def save_checkpoint(
    root: Path,
    manifest: Manifest,
    rank: int,
    trainer_state: dict | None,
    rank_state: dict,
    keep: int,
) -> Path:
    """Collective: every rank calls it at the same step. Returns the complete folder.
    trainer_state: rank 0's (with the run's "config"), None elsewhere."""
    final = step_dir(root, manifest.step)
    partial = final.with_name(final.name + PARTIAL_SUFFIX)
    if rank == 0:
        shutil.rmtree(partial, ignore_errors=True)  # left by a run killed while saving
        partial.mkdir(parents=True)
    _barrier()  # the folder exists before anyone writes into it
    atomic_torch_save(rank_state, partial / rank_file(rank))
    if rank == 0:
        atomic_torch_save(trainer_state, partial / TRAINER_FILE)
        write_config(partial, trainer_state["config"])  # read on resume (settings.py)
    _barrier()  # every rank's file is on disk
    if rank == 0:
        write_text_atomic(partial / MANIFEST, manifest.to_json())
        remove_folder(final)  # a same-step folder from an earlier attempt
        os.replace(partial, final)
        prune(root, keep)
    _barrier()  # nobody reports the checkpoint before it is complete
    return final


def prune(root: Path, keep: int) -> None:
    """Keep the newest `keep` complete checkpoints; drop older ones and stale partial folders."""
    complete = complete_checkpoints(root)
    for old in complete[:-keep] if keep > 0 else []:
        remove_folder(old)
    for stale in [*root.glob(f"step_*{PARTIAL_SUFFIX}"), *root.glob(f"step_*{DELETING_SUFFIX}")]:
        shutil.rmtree(stale, ignore_errors=True)


def remove_folder(folder: Path) -> None:
    """Delete a checkpoint folder so that no moment leaves it half there under its name: first
    renamed (atomic; the new name is no checkpoint's), then deleted. A kill in between leaves a
    `.deleting` folder, which nothing reads and the next prune removes."""
    doomed = folder.with_name(folder.name + DELETING_SUFFIX)
    if doomed.exists():  # left by an earlier interrupted removal
        shutil.rmtree(doomed, ignore_errors=True)
    try:
        os.replace(folder, doomed)
    except FileNotFoundError:
        return
    shutil.rmtree(doomed, ignore_errors=True)
