"""A training checkpoint on disk: its folder, its files, its manifest, and reading them back.

Layout, under `<run.output_dir>/checkpoints/` (on a multi-node job, a filesystem all ranks see):

    step_00000120/
        trainer.pt       rank 0: model, optimizer (full, world-size independent: the sharded
                         optimizer gathers its shards), LR schedule, loss scale, progress
        rank_00000.pt    one per rank: that rank's RNG states and data position
        config.json      rank 0: the run's config; a resume must train with the same
                         settings (settings.py)
        manifest.json    written last, by rank 0: marks the checkpoint complete

The files hold a run's state dict as it hands it over (bert/train/train_state.py): each rank's
own part (RANK) in its rank file, the rest, the same on every rank, in trainer.pt. A step_N
folder without its manifest is no checkpoint (save.py writes it last).

Resuming needs the same world size and global batch (the data position is per rank); the
optimizer's own state_dict could move to another world size, the data stream cannot.
"""

from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from bert.core.checkpoint_files import MANIFEST, TRAINER_FILE
from bert.core.errors import DamagedCheckpoint
from bert.core.readers import read_json, read_torch, require_keys

FORMAT = "open-bert-train-state"
# 2: the optimizer state follows the fp16 skip rule (bert/optim/registry.py): a v1 replicated
# schedule counted skipped steps, and it had no skip count
VERSION = 2
RANK = "rank"  # the state dict's per-rank part, saved in each rank's own file
# What each file must hold: checked when a checkpoint is picked, before the log opens, so a
# damaged file is refused (or skipped by `auto`) before anything is written.
TRAINER_KEYS = {"model": dict, "optimizer": dict, "progress": dict}
PROGRESS_KEYS = {"step": int, "samples": int, "accuracy": (int, float)}
RANK_KEYS = {"rng": dict, "pipeline": dict}
PARTIAL_SUFFIX = ".partial"
DELETING_SUFFIX = ".deleting"  # a folder being removed (save.remove_folder)
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


def load_trainer_state(folder: Path) -> dict:
    """The rank-0 file (model, optimizer, schedule, progress); every rank reads it."""
    path = folder / TRAINER_FILE
    state = read_torch(path, "training state", DamagedCheckpoint)
    require_keys(state, TRAINER_KEYS, path, "training state", DamagedCheckpoint, types=TRAINER_KEYS)
    require_keys(
        state["progress"],
        PROGRESS_KEYS,
        path,
        "training state's progress",
        DamagedCheckpoint,
        types=PROGRESS_KEYS,
    )
    return state


def load_rank_state(folder: Path, rank: int) -> dict:
    path = folder / rank_file(rank)
    state = read_torch(path, "rank state", DamagedCheckpoint)
    require_keys(state, RANK_KEYS, path, "rank state", DamagedCheckpoint, types=RANK_KEYS)
    require_keys(state["rng"], ("cpu",), path, "rank state's rng", DamagedCheckpoint)
    return state


@contextmanager
def checkpoint_fit(folder: Path) -> Iterator[None]:
    """Loading a checkpoint's states into the model, optimizer, RNG or data pipeline: a state
    that does not fit them (a tensor of another shape, a missing entry) is a DamagedCheckpoint
    naming the checkpoint."""
    try:
        yield
    except (RuntimeError, KeyError, ValueError, TypeError, IndexError) as err:
        first = " ".join(str(err).split())[:200]
        raise DamagedCheckpoint(
            f"{folder}: does not fit what this config builds ({first})"
        ) from None
