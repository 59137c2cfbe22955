"""The command line of `open-bert-prepare` (cli.py holds the steps it runs).

The sizes that must match the model the data feeds (tokens per sample, masked tokens per
sample, eval samples, vocabulary size) come, in this order, from an explicit flag, from
`--config NAME` (a shipped config name or a YAML file, read through a `ModelShape` reader that
the console command hands in: data/ reads no config of bert/), or MLPerf's values.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable

from bert.core.inputs import int_arg, float_arg
from data.prepare.eval_pick import EVAL_SAMPLES
from data.prepare.instances import ExampleParams
from data.sources.shards import DataError


@dataclass(frozen=True)
class ModelShape:
    """What prepared data must agree on with the model it feeds, and where each was set."""

    max_seq_length: int  # data.max_seq_length
    max_predictions: int  # data.max_predictions_per_seq
    eval_samples: int  # eval.samples
    vocab_size: int  # model.vocab_size
    source: str  # "config tiny_cpu", or MLPerf's values


MLPERF = ModelShape(512, 76, EVAL_SAMPLES, 30522, "MLPerf's values")
TINY_VOCAB = 1024  # the default run's model.vocab_size (configs/tiny_cpu.yaml)
ShapeReader = Callable[[str], ModelShape]

# flag -> (ModelShape field, config key); explicit flags win over --config
SHAPED = {
    "max_seq_length": ("max_seq_length", "data.max_seq_length"),
    "max_predictions": ("max_predictions", "data.max_predictions_per_seq"),
    "eval_samples": ("eval_samples", "eval.samples"),
    "count": ("eval_samples", "eval.samples"),
    "size": ("vocab_size", "model.vocab_size"),
}

INPUT_FORMAT = """\
Input text: UTF-8 plain text, one sentence per line (a line is the unit the sentence pairs
are cut from, so a long paragraph on one line is one long "sentence"), and an empty line
between documents; nothing else (no markup, no titles needed). A training run's text can be
one file or many; `all --train-text` takes files, or folders of part-* files.

Your own text to a trained tiny model (`open-bert-train`'s default model):

    open-bert-prepare vocab train.txt --config tiny_cpu --out vocab.txt
    open-bert-prepare all --config tiny_cpu --train-text train.txt --eval-text eval.txt \\
        --vocab vocab.txt --out prepared --num-shards 4 --eval-samples 200
    open-bert-train --config tiny_cpu --set data.synthetic.enabled=false \\
        --set data.train_dir=prepared/train --set data.eval_file=prepared/eval/eval_200.hdf5 \\
        --set eval.samples=200

For MLPerf, the vocabulary is the vocab.txt that `open-bert-download` fetches (its "next:"
lines name it) and the sizes are MLPerf's (no --config needed).
"""


def shape_args() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(
        "--config",
        metavar="NAME",
        help="the training config the data feeds (a shipped name such as tiny_cpu, or a "
        "YAML file): its data.max_seq_length, data.max_predictions_per_seq, eval.samples "
        "and model.vocab_size become the defaults here (default: MLPerf's 512, 76, 10000, "
        "30522)",
    )
    p.add_argument(
        "--max-seq-length",
        type=int_arg(1),
        help="tokens per sample (default: --config's data.max_seq_length, else 512)",
    )
    p.add_argument(
        "--max-predictions",
        type=int_arg(1),
        help="masked tokens per sample at most (default: --config's "
        "data.max_predictions_per_seq, else 76)",
    )
    return p


def option_args(flag: str, **spec) -> argparse.ArgumentParser:
    """A parent parser (argparse `parents=`) holding the one option `flag` (add_argument's
    `spec`): every step that takes it shares the one definition."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(flag, **spec)
    return p


def workers_args() -> argparse.ArgumentParser:
    return option_args(
        "--workers",
        type=int_arg(1),
        default=1,
        help="processes, one file each (default %(default)s)",
    )


def quiet_args() -> argparse.ArgumentParser:
    return option_args(
        "--quiet",
        action="store_true",
        help="no progress or disk-estimate lines on stderr (results still on stdout)",
    )


def force_folder_args() -> argparse.ArgumentParser:
    return option_args(
        "--force",
        action="store_true",
        help="use an --out folder that holds files this step did not write (or "
        "wrote with other settings) as is: files under an output's name there "
        "are kept and taken as done",
    )


def example_args() -> argparse.ArgumentParser:
    d = ExampleParams()
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(
        "--vocab",
        required=True,
        help="WordPiece vocab.txt, one token per line: MLPerf's comes with open-bert-download; "
        "for a small model make one with `open-bert-prepare vocab`",
    )
    p.add_argument(
        "--masked-lm-prob",
        type=float_arg(0.0, inclusive=True, high=1.0),
        default=d.masked_lm_prob,
        help="share of a sample's tokens masked (default %(default)s)",
    )
    p.add_argument(
        "--short-seq-prob",
        type=float_arg(0.0, inclusive=True, high=1.0),
        default=d.short_seq_prob,
        help="chance of a shorter target length for a sample (default %(default)s)",
    )
    p.add_argument(
        "--dupe-factor",
        type=int_arg(1),
        default=d.dupe_factor,
        help="passes over the text, each masked anew (default %(default)s)",
    )
    return p


def reshard_args() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(
        "--num-shards",
        type=int_arg(1),
        required=True,
        help="training shards written: 4320 or 2048 for MLPerf; at least the number of "
        "training processes",
    )
    p.add_argument(
        "--shards-per-bucket",
        type=int_arg(1),
        default=32,
        help="outputs assembled together; a worker holds about this many shards "
        "(MLPerf: 36k samples, ~45 MB in memory each; default %(default)s)",
    )
    return p


def seed_args() -> argparse.ArgumentParser:
    return option_args(
        "--seed",
        type=int_arg(),
        default=12345,
        help="random_seed of the examples (every shard, as the reference) and of "
        "the reshard shuffle (default %(default)s)",
    )


def resolve_shape(args: argparse.Namespace, read_shape: ShapeReader | None) -> None:
    """Fill every size flag left out from --config, else MLPerf's values; record where each
    came from (args.sources: flag -> '--flag' or 'config KEY') for the errors."""
    config = getattr(args, "config", None)
    if config and read_shape is None:
        raise DataError("--config: this entry point reads no config; run open-bert-prepare")
    shape = read_shape(config) if config else MLPERF
    args.sources = {}
    for flag, (field, key) in SHAPED.items():
        if not hasattr(args, flag):
            continue
        option = "--" + flag.replace("_", "-")
        if getattr(args, flag) is not None:
            args.sources[flag] = option
            continue
        # a vocabulary made here is for a small model: without --config, the default run's
        small = flag == "size" and not config
        setattr(args, flag, TINY_VOCAB if small else getattr(shape, field))
        args.sources[flag] = f"{key} of {shape.source}, or {option}" if config else option
    args.vocab_limit = shape.vocab_size if config else None
