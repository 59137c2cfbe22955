"""Training checkpoints for `--resume`: everything a run needs to continue as if never stopped.

One front door: the trainer and the tools use what this module exports, never the files
behind it (tests/tools/test_architecture.py checks that). Behind it, one job a file:

    checkpointer.py   Checkpointer: the resume point (resolved once), restore, interval saves
    layout.py         the folder, its files and manifest (the on-disk format), reading them
    save.py           the atomic save and the pruning of old checkpoints
    resume_point.py   which checkpoint `checkpoint.resume` resumes from, and its checks
    settings.py       a resume keeps the saved training settings (config.json)

A checkpoint holds the run's state dict as the trainer hands it over
(bert/train/train_state.py): RANK names each rank's own part.
"""

from bert.train.checkpoint.checkpointer import Checkpointer
from bert.train.checkpoint.layout import RANK, checkpoint_root, step_dir

__all__ = ["RANK", "Checkpointer", "checkpoint_root", "step_dir"]
