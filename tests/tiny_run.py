"""The "tiny run" the integration tests train: a 1-layer, width-32 BERT on small synthetic
64-token shards, on the CPU, in seconds.

- `TINY_DATA` / `make_tiny_data(folder, **changed)`: the synthetic shards (data.synthetic's
  `generate`) the tiny model is shaped for: 2 shards of 48 samples, 40 eval samples.
- `TINY_SHAPE`: the model and sample-shape keys of every tiny run.
- `tiny_settings(data_dir, out, **changed)`: the config keys every tiny run sets, with the test's
  own keys (`changed`) on top: step budget, schedule, logging, division, checkpoints, ...
  run.max_steps is not among the shared keys: each test passes its own.
Their `--set key=value` arguments: `bert.tools.common.set_args`, shared with the GPU tools.
- `trainer_config(data_dir, out, *extra)`: the config of the Trainer run in-process on the
  tiny shards (4 steps, quiet), `extra` `key=value` items on top.
The shards as a fixture: `tiny_data` (tests/conftest.py).

Used by tests/integration/test_reliability.py, test_resume.py, test_obs.py, test_trust.py,
test_obs_distributed.py and tests/unit/test_trainer.py and its neighbours; keep a change here in
step with what they assert.
"""

from __future__ import annotations

from pathlib import Path

from data.synthetic import generate

TINY_DATA = {
    "num_shards": 2,
    "samples_per_shard": 48,
    "eval_samples": 40,
    "max_seq_length": 64,
    "max_predictions": 10,
    "vocab_size": 256,
    "seed": 5,
}


def make_tiny_data(folder: Path, **changed) -> Path:
    """Writes the tiny shards and eval.hdf5 into `folder` (TINY_DATA, `changed` on top)."""
    generate(folder, **{**TINY_DATA, **changed})
    return folder


# The tiny model and the shape of its samples.
TINY_SHAPE = {
    "model.vocab_size": TINY_DATA["vocab_size"],
    "model.hidden_size": 32,
    "model.num_hidden_layers": 1,
    "model.num_attention_heads": 2,
    "model.intermediate_size": 64,
    "model.max_position_embeddings": 64,
    "data.max_seq_length": TINY_DATA["max_seq_length"],
    "data.max_predictions_per_seq": TINY_DATA["max_predictions"],
}


def tiny_settings(data_dir: Path, out: Path, **changed) -> dict:
    """The shared settings of a tiny run on `data_dir` (make_tiny_data's shards) writing into
    `out`, with `changed` on top (a key of `changed` keeps its place if it is shared)."""
    return {
        **TINY_SHAPE,
        "data.synthetic.enabled": False,  # on in the config run_pretraining.py reads by default
        "data.train_dir": data_dir,
        "data.eval_file": data_dir / "eval.hdf5",
        "run.global_batch_size": 8,
        "eval.interval_samples": 16,
        "eval.samples": 40,
        "run.device": "cpu",
        "run.seed": 7,
        "run.output_dir": out,
        "optim.lr": 1e-2,
        "submission.division": "open",  # open: the target is not required
        **changed,
    }


def trainer_config(data_dir: Path, out: Path, *extra: str):
    """The Trainer's config for 4 quiet steps on `data_dir` (make_tiny_data's shards), writing
    into `out`; `extra` ("key=value") on top. Every other key keeps its section's default (the
    closed division among them)."""
    from bert.config import load_config

    settings = {
        **TINY_SHAPE,
        "data.train_dir": data_dir,
        "data.eval_file": data_dir / "eval.hdf5",
        "run.global_batch_size": 8,
        "run.max_steps": 4,
        "eval.interval_samples": 16,
        "eval.samples": 40,
        "run.device": "cpu",
        "run.seed": 7,
        "run.output_dir": out,
        "log.quiet": "true",
        "schedule.total_steps": 10,
        "optim.lr": "1e-3",
    }
    return load_config(None, [f"{key}={value}" for key, value in settings.items()] + list(extra))
