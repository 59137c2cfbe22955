"""A resumed run continues the saved run, so it must be given the saved run's training settings.

The schedule, the optimizer state, the RNG and the data position all come from the checkpoint;
a changed `optim.lr` or `run.seed` on the command line would be logged as this run's
hyperparameter while the checkpoint's went on being used. So every checkpoint keeps the config
of the run that wrote it (`config.json`, beside the manifest), and a resume compares each key
with it: a difference is refused with one error naming the key, the saved and the given value.

Free to change on resume (RESUME_FREE): what cannot change the trained weights or the logged
hyperparameters' truth: where files are, logging, checkpointing, evaluation (its own keys are
logged with this run's values), the step budget, and kernel or backend choices that compute the
same math. `run.seed` may stay at -1, its default: the run then takes the checkpoint's seed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bert.config import flatten
from bert.core.errors import CheckpointError, DamagedCheckpoint
from bert.core.files import write_text_atomic
from bert.core.readers import read_json

CONFIG_FILE = "config.json"

RESUME_FREE_SECTIONS = ("checkpoint.", "log.", "eval.", "submission.", "model.fused_", "dist.")
RESUME_FREE_KEYS = frozenset(
    {
        "run.output_dir",
        "run.device",
        "run.threads",
        "run.cache_cleared",
        "run.init_checkpoint",
        "run.eval_only",
        "run.max_steps",
        "run.max_samples",
        "run.max_nonfinite_steps",
        "run.cuda_graphs",  # padding is neutral: the same math, graphed or not
        "run.graph_token_bucket",
        "run.graph_masked_bucket",
        "run.graph_max_shapes",
        "data.train_dir",
        "data.eval_file",
        "data.prefetch_depth",
        "data.synthetic.cache_dir",
        "model.attention",
        "model.compile_sublayers",
        "model.bert_config_file",
        "optim.fused_kernel",
        "optim.bucket_cap_mb",
    }
)
SEED_KEY = "run.seed"  # -1 (the default) on resume: the checkpoint's seed


def write_config(folder: Path, config: dict) -> None:
    """The run's config beside the checkpoint (rank 0, before the manifest marks it complete)."""
    write_text_atomic(folder / CONFIG_FILE, json.dumps(config, indent=1, sort_keys=True))


def saved_config(folder: Path) -> dict:
    """The config a checkpoint was trained with (every checkpoint of the current manifest
    version has config.json; older ones are refused by their manifest)."""
    if not (folder / CONFIG_FILE).exists():
        raise DamagedCheckpoint(
            f"{folder}: no {CONFIG_FILE} (not a complete checkpoint of this version)"
        )
    saved = read_json(folder / CONFIG_FILE, "checkpoint config", DamagedCheckpoint)
    sections = [name for name, value in saved.items() if not isinstance(value, dict)]
    if sections:
        raise DamagedCheckpoint(
            f"checkpoint config {str(folder / CONFIG_FILE)!r}: "
            f"{sections[0]!r} is not a section (a JSON object)"
        )
    return saved


def changed_settings(saved: dict, given: dict, saved_seed: int) -> list[tuple[str, Any, Any]]:
    """(key, saved value, given value) of each training setting the resume would change."""
    saved_flat, given_flat = flatten(saved), flatten(given)
    saved_flat[SEED_KEY] = saved_seed  # the seed it ran with, also when drawn at random
    if given_flat.get(SEED_KEY, -1) < 0:
        given_flat[SEED_KEY] = saved_seed
    changed = []
    for key in sorted(set(saved_flat) | set(given_flat)):
        if key in RESUME_FREE_KEYS or key.startswith(RESUME_FREE_SECTIONS):
            continue
        if saved_flat.get(key) != given_flat.get(key):
            changed.append((key, saved_flat.get(key), given_flat.get(key)))
    return changed


def check_resume_settings(folder: Path, saved_seed: int, config: dict) -> None:
    """CheckpointError naming the first changed training setting (and how many more)."""
    changed = changed_settings(saved_config(folder), config, saved_seed)
    if not changed:
        return
    key, saved, given = changed[0]
    more = (
        f" (and {len(changed) - 1} more: {', '.join(k for k, _, _ in changed[1:])})"
        if len(changed) > 1
        else ""
    )
    raise CheckpointError(
        f"resume from {folder}: {key}={given!r} given, the checkpoint was trained with "
        f"{key}={saved!r}{more}; a resumed run continues with the saved settings (schedule, "
        f"optimizer state, seed, data order): drop the change, or start a new run "
        f"from its weights (run.init_checkpoint={folder / 'trainer.pt'})"
    )
