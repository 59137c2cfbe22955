"""`open-bert-prepare`: data/prepare/cli.py, its --config read by bert/config.py.

data/ imports nothing of bert/ above bert.core, so the config is read here and handed down as
the sizes the prepared data must match (data/prepare/arguments.py, ModelShape).
"""

from __future__ import annotations

from bert.config import load_config
from data.prepare import cli
from data.prepare.arguments import ModelShape


def model_shape(name: str) -> ModelShape:
    """The sizes of config `name` (a shipped name or a YAML file) that data must agree on."""
    cfg = load_config(name)
    return ModelShape(
        cfg.data.max_seq_length,
        cfg.data.max_predictions_per_seq,
        cfg.eval.samples,
        cfg.model.vocab_size,
        f"config {name}",
    )


def main(argv: list[str] | None = None) -> int:
    return cli.main(argv, model_shape)
