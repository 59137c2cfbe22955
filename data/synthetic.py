"""Synthetic MLPerf-format shards with a realistic length mix and a learnable hidden language.

    python -m data.synthetic --out DIR [--num-shards 4] [--samples-per-shard 4096]
        [--eval-samples 2000] [--max-seq-length 128] [--max-predictions 20]
        [--vocab-size 1024] [--seed 12345]

writes DIR/part_00000_of_00004.hdf5 ... and DIR/eval.hdf5 in the variable-length format, and
DIR/synthetic.json, the settings: the mark of a folder this module wrote. DIR must be new or
empty (or already hold these settings' data); a folder holding anything else is refused with
one `error:` line and exit status 2, so a user's data is never overwritten. The training default
(`ensure_synthetic_data`) keeps its data in a cache folder, one subfolder per settings.

The samples come from a hidden language that a tiny BERT learns in minutes
(data/synthetic_language.py).
"""

from __future__ import annotations

import dataclasses
import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

from bert.core.inputs import command_parser, int_arg
from bert.core.errors import ConfigError
from bert.core.files import temp_name, write_text_atomic
from bert.core.readers import read_json_if_any
from data.sources.shards import SHARD_GLOB, DataError, write_samples
from data.synthetic_language import (
    EVAL_STREAM,
    FIRST_WORD_ID,
    MIN_LENGTH,
    TRAIN_STREAM,
    generate_samples,
    successor_table,
)


class GeneratedData(NamedTuple):
    train_files: list[Path]
    eval_file: Path


def shard_name(index: int, count: int) -> str:
    """MLPerf shard file name, e.g. part_00003_of_00004.hdf5."""
    return f"part_{index:05d}_of_{count:05d}.hdf5"


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------


def generate(
    out_dir: str | os.PathLike,
    num_shards: int = 4,
    samples_per_shard: int = 4096,
    eval_samples: int = 2000,
    max_seq_length: int = 128,
    max_predictions: int = 20,
    vocab_size: int = 1024,
    seed: int = 12345,
) -> GeneratedData:
    """Write `num_shards` training shards and eval.hdf5 into `out_dir`; deterministic per seed.

    The low-level writer, for a folder the caller owns (tests, scripts); users' folders go
    through `write_marked_folder`, which refuses any folder holding files it did not write.

    Every file is written atomically, so rerunning into a complete folder (same arguments)
    rewrites identical files. Shards of another shard count already in the folder are an
    error: they would silently join the training set.
    """
    for name, value in (
        ("num_shards", num_shards),
        ("samples_per_shard", samples_per_shard),
        ("eval_samples", eval_samples),
        ("max_predictions", max_predictions),
    ):
        if value < 1:
            raise ValueError(f"{name}={value} must be >= 1")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    train_files = [out / shard_name(k, num_shards) for k in range(num_shards)]
    _refuse_foreign_shards(out, train_files)
    succ = successor_table(seed, vocab_size)
    for k, path in enumerate(train_files):
        rng = np.random.default_rng([seed, TRAIN_STREAM, k])
        write_samples(
            path, generate_samples(rng, succ, samples_per_shard, max_seq_length, max_predictions)
        )
    eval_rng = np.random.default_rng([seed, EVAL_STREAM])
    eval_file = write_samples(
        out / "eval.hdf5",
        generate_samples(eval_rng, succ, eval_samples, max_seq_length, max_predictions),
    )
    return GeneratedData(train_files, eval_file)


def _refuse_foreign_shards(out: Path, train_files: list[Path]) -> None:
    foreign = sorted(set(out.glob(SHARD_GLOB)) - set(train_files))
    if foreign:
        raise DataError(
            f"{out}: holds shards this run would not write ({foreign[0].name}"
            f"{' and others' if len(foreign) > 1 else ''}); use an empty folder"
        )


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = command_parser("python -m data.synthetic", __doc__)
    parser.add_argument(
        "--out",
        required=True,
        help="output folder: new, empty, or one this command wrote with the "
        "same settings (anything else is refused)",
    )
    parser.add_argument("--num-shards", type=int_arg(), default=4)
    parser.add_argument("--samples-per-shard", type=int_arg(), default=4096)
    parser.add_argument("--eval-samples", type=int_arg(), default=2000)
    parser.add_argument("--max-seq-length", type=int_arg(), default=128)
    parser.add_argument("--max-predictions", type=int_arg(), default=20)
    parser.add_argument("--vocab-size", type=int_arg(), default=1024)
    parser.add_argument("--seed", type=int_arg(), default=12345)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Exit status 0, or 2 with one `error:` line (a folder it may not write, bad arguments)."""
    args = _parse_args(argv)
    params = dict(
        num_shards=args.num_shards,
        samples_per_shard=args.samples_per_shard,
        eval_samples=args.eval_samples,
        max_seq_length=args.max_seq_length,
        max_predictions=args.max_predictions,
        vocab_size=args.vocab_size,
        seed=args.seed,
    )
    out = Path(args.out)
    start = time.perf_counter()
    try:
        wrote = write_marked_folder(out, params, what="--out=")
    except (DataError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not wrote:
        print(
            f"{out}: already holds the synthetic data of these settings ({MANIFEST}); "
            f"nothing written"
        )
        return 0
    for k in range(args.num_shards):
        print(f"wrote {out / shard_name(k, args.num_shards)} ({args.samples_per_shard} samples)")
    print(f"wrote {out / EVAL_NAME} ({args.eval_samples} samples)")
    print(
        f"{args.num_shards * args.samples_per_shard + args.eval_samples} samples, "
        f"max_seq_length {args.max_seq_length}, vocab {args.vocab_size}, seed {args.seed}, "
        f"in {time.perf_counter() - start:.2f} s"
    )
    return 0


# --------------------------------------------------------------------------------------------
# Folders synthetic data may go to: never one holding files this module did not write
# --------------------------------------------------------------------------------------------

MANIFEST = "synthetic.json"  # marks a folder this module wrote, with the settings it used
MARK_FORMAT = "open-bert-synthetic"
CACHE_MARK = ".open-bert-cache"  # marks a cache root this module created
EVAL_NAME = "eval.hdf5"


def read_mark(folder: Path) -> dict | None:
    """The settings a folder of ours was written with; None if it holds no readable mark."""
    mark = read_json_if_any(folder / MANIFEST)
    if mark is None:
        return None
    # before the format field, the mark was the bare settings
    return mark.get("params") if mark.get("format") == MARK_FORMAT else mark


def _first_difference(saved: dict, wanted: dict) -> str:
    key = next(k for k in sorted(set(saved) | set(wanted)) if saved.get(k) != wanted.get(k))
    return f"made with {key}={saved.get(key)}, these settings have {key}={wanted.get(key)}"


def folder_state(folder: Path, params: dict) -> str:
    """'missing', 'empty', 'same' (ours, these settings), 'other' (ours, other settings) or
    'foreign' (holds files this module did not write)."""
    if not folder.exists():
        return "missing"
    if not folder.is_dir():
        return "foreign"
    if not any(folder.iterdir()):
        return "empty"
    mark = read_mark(folder)
    if mark is None:
        return "foreign"
    return "same" if mark == params else "other"


def _refusal(folder: Path, state: str, params: dict, what: str) -> str:
    if state == "foreign":
        return (
            f"{what}{folder}: holds files this program did not write (no {MANIFEST}); "
            f"synthetic data is never written into such a folder: name a new or empty one"
        )
    return (
        f"{what}{folder}: holds synthetic data of other settings "
        f"({_first_difference(read_mark(folder), params)}); it is never regenerated in "
        f"place: name another folder"
    )


def write_marked_folder(folder: Path, params: dict, what: str) -> bool:
    """Make `folder` the synthetic data of `params`: written if missing or empty, left alone if
    it already is (False), refused (DataError naming `what`) if it holds anything else.

    The data is generated in a hidden sibling and renamed onto `folder`, so readers see a
    complete folder or none, and concurrent writers (several ranks on first use) cannot mix
    their files: the first rename wins, the others find a complete folder and drop theirs.
    """
    state = folder_state(folder, params)
    if state == "same":
        return False
    if state in ("other", "foreign"):
        raise DataError(_refusal(folder, state, params, what))
    tmp = temp_name(Path(os.path.abspath(folder)))  # a sibling even for --out .
    try:
        generate(tmp, **params)
        write_text_atomic(
            tmp / MANIFEST, json.dumps({"format": MARK_FORMAT, "params": params}, indent=1)
        )
        os.rename(tmp, folder)  # onto a missing or empty folder only: never replaces files
        return True
    except OSError:
        if folder_state(folder, params) == "same":  # another process renamed its copy first
            return False
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def settings_key(params: dict) -> str:
    """A cache subfolder name: the main settings readable, all of them hashed."""
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]
    return (
        f"len{params['max_seq_length']}_pred{params['max_predictions']}_"
        f"vocab{params['vocab_size']}_{digest}"
    )


def claim_cache_root(root: Path) -> None:
    """The cache root must be ours: created here (and marked), or empty, or marked before."""
    if (root / CACHE_MARK).is_file():
        return
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise DataError(
            f"data.synthetic.cache_dir={root}: holds files this program did not "
            f"write (no {CACHE_MARK}); name a new or empty folder"
        )
    root.mkdir(parents=True, exist_ok=True)
    # Written in place, not atomically: the mark must be the root's first entry, or a process
    # starting beside this one would see a temporary file and take the root for a user's.
    (root / CACHE_MARK).write_text(
        "open-bert synthetic data cache: one folder per settings "
        "(data/synthetic.py); safe to delete\n"
    )


# --------------------------------------------------------------------------------------------
# Data on first use (the default run)
# --------------------------------------------------------------------------------------------


def synthetic_params(data, vocab_size: int) -> dict:
    syn = data.synthetic
    return dict(
        num_shards=syn.num_shards,
        samples_per_shard=syn.samples_per_shard,
        eval_samples=syn.eval_samples,
        max_seq_length=data.max_seq_length,
        max_predictions=data.max_predictions_per_seq,
        vocab_size=vocab_size,
        seed=syn.seed,
    )


def ensure_synthetic_data(data, vocab_size: int):
    """With `data.synthetic.enabled`: `data` with data.train_dir (and an unset data.eval_file)
    pointing at the synthetic data of these settings, generated on first use; else `data`.

    `data`: a DataConfig (data/config.py); vocab_size: the model's. With data.train_dir empty the
    data lives in the cache, one subfolder per settings, so one set never replaces another.
    A data.train_dir that is set must already hold this data (`python -m data.synthetic
    --out`): a missing folder, a user's folder or other settings are errors, never written to.
    Runs before the MLPerf init phase: data preparation is not part of the timed run.
    """
    if not data.synthetic.enabled:
        return data
    _check_config(data, vocab_size)
    params = synthetic_params(data, vocab_size)
    if data.train_dir:
        folder = Path(data.train_dir)
        _check_named_folder(folder, params)
    else:
        folder = _cached_folder(Path(data.synthetic.cache_dir), params)
    return dataclasses.replace(
        data, train_dir=str(folder), eval_file=data.eval_file or str(folder / EVAL_NAME)
    )


def _check_config(data, vocab_size: int) -> None:
    """What the generator refuses, as a ConfigError naming the config key (before any write)."""
    low, high = FIRST_WORD_ID + 2, np.iinfo(np.int16).max + 1
    if not low <= vocab_size <= high:
        raise ConfigError(
            f"model.vocab_size={vocab_size}: synthetic data "
            f"(data.synthetic.enabled=true) needs a vocabulary in [{low}, {high}]"
        )
    if data.max_seq_length < 4 * MIN_LENGTH:
        raise ConfigError(
            f"data.max_seq_length={data.max_seq_length}: synthetic data "
            f"(data.synthetic.enabled=true) needs at least {4 * MIN_LENGTH} "
            f"tokens (each quarter of its length histogram above "
            f"{MIN_LENGTH})"
        )


def _check_named_folder(folder: Path, params: dict) -> None:
    state = folder_state(folder, params)
    if state in ("missing", "empty"):
        what = "does not exist" if state == "missing" else "is empty"
        raise DataError(
            f"data.train_dir={folder}: {what}; synthetic data is made only in "
            f"data.synthetic.cache_dir (leave data.train_dir empty) or by "
            f"python -m data.synthetic --out DIR"
        )
    if state != "same":
        raise DataError(
            _refusal(folder, state, params, "data.train_dir=")
            + " (to train on it as it is: --set data.synthetic.enabled=false)"
        )


def _cached_folder(root: Path, params: dict) -> Path:
    claim_cache_root(root)
    folder = root / settings_key(params)
    start = time.perf_counter()
    if write_marked_folder(folder, params, what="synthetic data cache folder "):
        print(
            f"synthetic data: {params['num_shards']} shards x {params['samples_per_shard']} "
            f"samples + {params['eval_samples']} eval samples in {folder} "
            f"({time.perf_counter() - start:.1f} s)",
            flush=True,
        )
    return folder


if __name__ == "__main__":
    sys.exit(main())
