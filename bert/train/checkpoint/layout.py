"""Training checkpoints for `--resume`: everything a run needs to continue as if never stopped.

Layout, under `<run.output_dir>/checkpoints/` (on a multi-node job, a filesystem all ranks see):

    step_00000120/
        trainer.pt       rank 0: model, optimizer (full, world-size independent: the sharded
                         optimizer gathers its shards), LR schedule, loss scale, progress
        rank_00000.pt    one per rank: that rank's RNG states and data position
        config.json      rank 0: the run's config; a resume must train with the same
                         settings (bert/train/resume_settings.py)
        manifest.json    written last, by rank 0: marks the checkpoint complete

Writing is atomic at every level. Each file is written to a temporary name and renamed; all of
a checkpoint goes into `step_N.partial/`; after a barrier (every rank's file is on disk) rank 0
writes the manifest and renames the folder to `step_N`. A run killed at any moment leaves the
previous complete checkpoint intact, plus at most a `*.partial` folder that loading ignores and
the next save removes. Rank 0 keeps the newest `checkpoint.keep` complete checkpoints.

Resuming needs the same world size and global batch (the data position is per rank); the
optimizer's own state_dict could move to another world size, the data stream cannot. It also
needs the same training settings (model shapes, optimizer, precision, schedule, seed, data
order), which `bert/train/resume_settings.py` compares with config.json before any state is read.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch
import torch.distributed as dist

from bert.core.errors import CheckpointError, DamagedCheckpoint
from bert.core.files import atomic_path, write_text_atomic
from bert.core.readers import read_json, read_torch, require_keys
from bert.train.checkpoint.settings import write_config

FORMAT = "open-bert-train-state"
# 2: the optimizer state follows the fp16 skip rule (bert/optim/registry.py): a v1 replicated
# schedule counted skipped steps, and it had no skip count
VERSION = 2
MANIFEST = "manifest.json"
TRAINER_FILE = "trainer.pt"
PARTIAL_SUFFIX = ".partial"
DELETING_SUFFIX = ".deleting"  # a folder being removed (remove_folder)
# Bounds far beyond any real run (BERT-Large converges in tens of thousands of steps), so a
# manifest's numbers cannot be huge enough to overflow a schedule or a data offset.
MAX_STEP = 10**9
MAX_WORLD_SIZE = 10**6
_STEP_DIR = re.compile(r"^step_(\d{8,})$")


@dataclass(frozen=True)
class Manifest:
    step: int  # optimizer steps completed
    samples: int  # samples trained
    world_size: int
    global_batch_size: int
    seed: int  # the run seed: the data order depends on it

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "version": VERSION, **self.__dict__}, indent=1)

    @classmethod
    def read(cls, folder: Path) -> "Manifest":
        path = folder / MANIFEST
        values = read_json(path, "checkpoint manifest", DamagedCheckpoint)
        if values.get("format") != FORMAT or values.get("version") != VERSION:
            raise DamagedCheckpoint(f"{folder}: {MANIFEST} is not a {FORMAT} v{VERSION} manifest")
        fields = tuple(cls.__dataclass_fields__)
        require_keys(
            values,
            fields,
            path,
            "checkpoint manifest",
            DamagedCheckpoint,
            types=dict.fromkeys(fields, int),
        )
        manifest = cls(**{k: values[k] for k in fields})
        manifest.check_plausible(path)
        return manifest

    def check_plausible(self, path: Path) -> None:
        """Every step trains exactly one global batch (a skipped fp16 step too), so a manifest
        whose numbers disagree was not written by a run: resuming from it would start the
        schedule, the data order and the MLPerf log at an impossible point."""
        if not 1 <= self.world_size <= MAX_WORLD_SIZE or self.global_batch_size < 1:
            raise DamagedCheckpoint(
                f"{path}: world_size {self.world_size} and global_batch_size "
                f"{self.global_batch_size} are not those of a run"
            )
        if not 0 <= self.step <= MAX_STEP:
            raise DamagedCheckpoint(f"{path}: step {self.step} is outside [0, {MAX_STEP}]")
        if self.samples != self.step * self.global_batch_size:
            raise DamagedCheckpoint(
                f"{path}: samples {self.samples} is not step {self.step} x global_batch_size "
                f"{self.global_batch_size}"
            )


def checkpoint_root(output_dir: str | os.PathLike) -> Path:
    return Path(output_dir) / "checkpoints"


def step_dir(root: Path, step: int) -> Path:
    return root / f"step_{step:08d}"


def rank_file(rank: int) -> str:
    return f"rank_{rank:05d}.pt"


def complete_checkpoints(root: Path) -> list[Path]:
    """Complete checkpoint folders under `root`, oldest first (partial ones are skipped)."""
    if not root.is_dir():
        return []
    found = [
        (int(m.group(1)), p)
        for p in root.iterdir()
        if (m := _STEP_DIR.match(p.name)) and (p / MANIFEST).is_file()
    ]
    return [p for _, p in sorted(found)]


def resolve_resume(spec: str, output_dir: str | os.PathLike) -> Path | None:
    """The checkpoint folder `checkpoint.resume` names: "" none, "auto" the newest complete one
    under the run's output dir (None when there is none yet: a fresh start), or an explicit
    folder (already expanded by the config)."""
    if not spec:
        return None
    if spec == "auto":
        found = complete_checkpoints(checkpoint_root(output_dir))
        return found[-1] if found else None
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
    return folder


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


# -- RNG ----------------------------------------------------------------------------------------


def rng_state(device: torch.device) -> dict[str, Any]:
    """This rank's torch generators (dropout draws from them)."""
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["cpu"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


# -- writing ------------------------------------------------------------------------------------


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
    """Collective: every rank calls it at the same step. Returns the complete folder."""
    final = step_dir(root, manifest.step)
    partial = final.with_name(final.name + PARTIAL_SUFFIX)
    if rank == 0:
        shutil.rmtree(partial, ignore_errors=True)  # left by a run killed while saving
        partial.mkdir(parents=True)
    _barrier()  # the folder exists before anyone writes into it
    atomic_torch_save(rank_state, partial / rank_file(rank))
    if rank == 0:
        atomic_torch_save(trainer_state, partial / TRAINER_FILE)
        write_config(partial, trainer_state["config"])  # read on resume (resume_settings.py)
    _barrier()  # every rank's file is on disk
    if rank == 0:
        write_text_atomic(partial / MANIFEST, manifest.to_json())
        remove_folder(final)  # a same-step folder from an earlier attempt
        os.replace(partial, final)
        _prune(root, keep)
    _barrier()  # nobody reports the checkpoint before it is complete
    return final


def _prune(root: Path, keep: int) -> None:
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


# -- reading ------------------------------------------------------------------------------------


def load_trainer_state(folder: Path, mmap: bool = False) -> dict:
    """The rank-0 file (model, optimizer, schedule, progress); every rank reads it. `mmap`:
    tensors are mapped, not read (for a look at the config alone)."""
    path = folder / TRAINER_FILE
    state = read_torch(path, "training state", DamagedCheckpoint, mmap=mmap)
    require_keys(
        state,
        ("model", "optimizer", "progress"),
        path,
        "training state",
        DamagedCheckpoint,
        types={"model": dict, "optimizer": dict, "progress": dict},
    )
    require_keys(
        state["progress"],
        ("step", "samples", "accuracy"),
        path,
        "training state's progress",
        DamagedCheckpoint,
        types={"step": int, "samples": int, "accuracy": (int, float)},
    )
    return state


@contextmanager
def checkpoint_fit(path: Path) -> Iterator[None]:
    """Loading a checkpoint file's states into the model, optimizer, RNG or data pipeline: a
    state that does not fit them (a tensor of another shape, a missing entry) is a
    DamagedCheckpoint naming the file."""
    try:
        yield
    except (RuntimeError, KeyError, ValueError, TypeError, IndexError) as err:
        first = " ".join(str(err).split())[:200]
        raise DamagedCheckpoint(f"{path}: does not fit what this config builds ({first})") from None


def load_rank_state(folder: Path, rank: int) -> dict:
    path = folder / rank_file(rank)
    state = read_torch(path, "rank state", DamagedCheckpoint)
    require_keys(
        state,
        ("rng", "pipeline"),
        path,
        "rank state",
        DamagedCheckpoint,
        types={"rng": dict, "pipeline": dict},
    )
    require_keys(state["rng"], ("cpu",), path, "rank state's rng", DamagedCheckpoint)
    return state
