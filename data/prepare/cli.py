"""Prepare BERT data: text -> training shards and the eval set (MLPerf's, or your own text).

    open-bert-prepare all --train-text DIR --eval-text eval.txt --vocab vocab.txt \\
        --out /data/bert --num-shards 4320 --workers 16

or step by step (each step resumes where it stopped; see data/prepare/__init__.py):

    vocab TEXT... --out vocab.txt [--size N]      a small vocabulary for a small model
    examples TEXT... --vocab V --out DIR          text shards -> fixed-length HDF5
    to-varlen FIXED... --out DIR                  fixed-length -> variable-length HDF5
    reshard INPUT... --out DIR --num-shards N     global shuffle into N part_*.hdf5 shards
    pick-eval SRC --out FILE [--count N]          eval samples picked evenly
    checksums DIR --write-checksums | --verify    sha256 manifest (DIR/SHA256SUMS; an existing
                                                  one is rewritten only with --force)
    check-distinct DIR_OR_FILES...                fail if two shards start alike

`all` writes OUT/intermediate/{train,eval}/ (fixed-length, gzip), OUT/train/part_*.hdf5,
OUT/eval/eval_N.hdf5 (N: --eval-samples) and OUT/SHA256SUMS, then checks that the shards
are distinct.
No step writes into its own input: an --out that is, holds or lies in an input is refused;
pick-eval replaces an existing --out file only with --force. The folder steps resume into
their --out, skipping the outputs already there, so they take only a folder of their own
(data/prepare/out_mark.py): empty, marked by the same step with the same settings when it
finished, or holding nothing but the step's own output names; anything else only with --force.
Exit status: 0 done, 1 a check failed (checksums, distinct shards), 2 bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import os
import sys
from pathlib import Path

from bert.core.inputs import check_regular, command_parser, int_arg
from bert.core.errors import ConfigError
from bert.core.files import check_output
from data.prepare.arguments import (
    INPUT_FORMAT,
    TINY_VOCAB,
    ShapeReader,
    example_args,
    force_folder_args,
    option_args,
    quiet_args,
    reshard_args,
    resolve_shape,
    seed_args,
    shape_args,
    workers_args,
)
from data.prepare.out_mark import check_out, mark_out
from data.prepare.checksums import MANIFEST_NAME, verify_manifest, write_manifest
from data.prepare.content_hash import CHECK_FILE as CONTENT_HASH_FILE
from data.prepare.content_hash import record_content_hashes
from data.prepare.create_examples import create_examples, output_name
from data.prepare.disk import check_disk, text_estimate, total_size
from data.prepare.distinct import duplicate_groups
from data.prepare.eval_pick import EVAL_SAMPLES, pick_eval
from data.prepare.instances import ExampleParams
from data.prepare.parallel import StepRun
from data.prepare.reshard import PLAN_NAME as RESHARD_PLAN, reshard
from data.prepare.to_varlen import to_varlen
from data.prepare.vocab import write_vocab
from data.prepare.wordpiece import load_tokenizer
from data.sources.shards import SHARD_GLOB, DataError


TEXT_GLOB = "part-*"  # text shards in a folder: part-00000-of-00500 ...


class CheckFailed(Exception):
    """A verification step found a problem (exit status 1)."""


def expand(paths: list[str], pattern: str = "*") -> list[Path]:
    """Files as given; folders replaced by their non-hidden files matching `pattern`, sorted."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files += sorted(
                p for p in path.glob(pattern) if p.is_file() and not p.name.startswith(".")
            )
        else:  # missing, a FIFO, a device, a symlink loop: named as such, never opened
            check_regular(path, "input", DataError)
            files.append(path)
    if not files:
        raise DataError(f"no input files in {', '.join(paths)}")
    return files


def example_params(args: argparse.Namespace) -> ExampleParams:
    return ExampleParams(
        args.max_seq_length,
        args.max_predictions,
        args.masked_lm_prob,
        args.short_seq_prob,
        args.dupe_factor,
        args.seed,
    )


# -- subcommands ------------------------------------------------------------------------------

# what `all` writes into its --out (anything else there is someone else's)
ALL_OUTPUTS = {"intermediate", "train", "eval", MANIFEST_NAME, CONTENT_HASH_FILE}


def _absolute(paths) -> list[str]:
    return [os.path.abspath(p) for p in paths]


def check_vocab_fits(args: argparse.Namespace) -> None:
    """With --config, a vocabulary larger than the model's embedding table is refused here,
    not at the first training step."""
    _, vocab = load_tokenizer(args.vocab)
    if args.vocab_limit is not None and vocab.size > args.vocab_limit:
        raise DataError(
            f"{args.vocab}: {vocab.size} tokens, more than model.vocab_size={args.vocab_limit} "
            f"of config {args.config}; make a smaller one (open-bert-prepare vocab TEXT "
            f"--config {args.config} --out vocab.txt) or raise model.vocab_size"
        )


def cmd_vocab(args: argparse.Namespace) -> None:
    check_output(args.out, args.text, args.force)
    texts = expand(args.text, TEXT_GLOB)
    path, size = write_vocab(texts, args.out, args.size, args.sources["size"])
    print(f"vocab: wrote {path} ({size} tokens)")


def picked_eval(args: argparse.Namespace, src, dst, count_flag: str) -> Path:
    """pick_eval, its too-few-samples error naming the setting to change."""
    count = getattr(args, count_flag)
    try:
        return pick_eval(src, dst, count, args.max_seq_length, args.max_predictions, not args.quiet)
    except DataError as err:
        if "cannot pick" not in str(err):
            raise
        raise DataError(
            f"{err}: lower {args.sources[count_flag]} (and train with the same "
            f"eval.samples), or give more eval text"
        ) from None


def _step_run(args: argparse.Namespace) -> StepRun:
    return StepRun(args.workers, show_progress=not args.quiet)


def cmd_examples(args: argparse.Namespace) -> None:
    check_output(args.out, [*args.text, args.vocab])  # a folder it resumes into
    check_vocab_fits(args)
    texts = expand(args.text, TEXT_GLOB)
    settings = {
        "text": _absolute(args.text),
        "vocab": os.path.abspath(args.vocab),
        **dataclasses.asdict(example_params(args)),
    }
    outputs = {output_name(t) for t in texts}
    check_out(args.out, "examples", settings, outputs.__contains__, args.force)
    create_examples(
        texts,
        args.out,
        args.vocab,
        example_params(args),
        _step_run(args),
    )
    mark_out(args.out, "examples", settings)


def cmd_to_varlen(args: argparse.Namespace) -> None:
    check_output(args.out, args.inputs)
    inputs = expand(args.inputs, "*.hdf5")
    settings = {
        "inputs": _absolute(args.inputs),
        "max_seq_length": args.max_seq_length,
        "max_predictions": args.max_predictions,
    }
    check_out(
        args.out, "to-varlen", settings, {Path(p).name for p in inputs}.__contains__, args.force
    )
    to_varlen(
        inputs,
        args.out,
        args.max_seq_length,
        args.max_predictions,
        _step_run(args),
    )
    mark_out(args.out, "to-varlen", settings)


def _reshard_output(name: str) -> bool:
    return fnmatch.fnmatch(name, SHARD_GLOB) or name == RESHARD_PLAN


def cmd_reshard(args: argparse.Namespace) -> None:
    check_output(args.out, args.inputs)
    settings = {
        "inputs": _absolute(args.inputs),
        "num_shards": args.num_shards,
        "seed": args.seed,
        "max_seq_length": args.max_seq_length,
        "max_predictions": args.max_predictions,
    }
    check_out(args.out, "reshard", settings, _reshard_output, args.force)
    reshard(
        expand(args.inputs, "*.hdf5"),
        args.out,
        args.num_shards,
        args.seed,
        args.shards_per_bucket,
        args.max_seq_length,
        args.max_predictions,
        _step_run(args),
    )
    mark_out(args.out, "reshard", settings)


def cmd_pick_eval(args: argparse.Namespace) -> None:
    check_output(args.out, [args.src], args.force)  # one file: replaced only with --force
    path = picked_eval(args, args.src, args.out, "count")
    print(f"pick-eval: wrote {path} ({args.count} samples)")


def cmd_checksums(args: argparse.Namespace) -> None:
    if args.write_checksums:
        # the manifest is the record of the data as prepared: rewriting it would bless any
        # file changed since, so an existing one is replaced only with --force
        manifest = Path(args.dir) / MANIFEST_NAME
        if manifest.exists() and not args.force:
            raise ConfigError(
                f"{manifest}: already exists; check the data against it with "
                f"--verify, or pass --force to rewrite it from the files as they "
                f"are now"
            )
        print(f"checksums: wrote {write_manifest(args.dir, args.pattern, args.workers)}")
        return
    problems = verify_manifest(args.dir, args.workers)
    for line in problems:
        print(f"FAIL {line}")
    if problems:
        raise CheckFailed(f"{len(problems)} checksum problem(s) in {args.dir}")
    print(f"checksums: every file listed in {Path(args.dir) / 'SHA256SUMS'} matches")


def cmd_check_distinct(args: argparse.Namespace) -> None:
    files = expand(args.paths, SHARD_GLOB)
    groups = duplicate_groups(files, args.first_k, args.max_seq_length, args.max_predictions)
    for group in groups:
        print(f"FAIL identical first {args.first_k} samples: {', '.join(map(str, group))}")
    if groups:
        raise CheckFailed(
            f"{sum(map(len, groups))} shards are copies of another (REFERENCE 2: "
            f"identical shards cap MLM accuracy near 0.62)"
        )
    print(
        f"check-distinct: {len(files)} shards, all distinct in their first {args.first_k} samples"
    )


def cmd_all(args: argparse.Namespace) -> None:
    out, params, run = Path(args.out), example_params(args), _step_run(args)
    check_output(out, [*args.train_text, args.eval_text, args.vocab])
    check_vocab_fits(args)
    work = out / "intermediate"
    train_text = expand(args.train_text, TEXT_GLOB)
    settings = {
        "train_text": _absolute(args.train_text),
        "eval_text": os.path.abspath(args.eval_text),
        "vocab": os.path.abspath(args.vocab),
        "num_shards": args.num_shards,
        "eval_samples": args.eval_samples,
        "seed": args.seed,
        **dataclasses.asdict(params),
    }
    check_out(out, "all", settings, ALL_OUTPUTS.__contains__, args.force)
    check_all_space(args, train_text, out)
    fixed_train = create_examples(train_text, work / "train", args.vocab, params, run)
    (fixed_eval,) = create_examples([args.eval_text], work / "eval", args.vocab, params, run)
    shards = reshard(
        fixed_train,
        out / "train",
        args.num_shards,
        args.seed,
        args.shards_per_bucket,
        args.max_seq_length,
        args.max_predictions,
        run,
    )
    eval_file = picked_eval(
        args, fixed_eval, out / "eval" / f"eval_{args.eval_samples}.hdf5", "eval_samples"
    )
    print(f"all: eval set {eval_file}")
    cmd_check_distinct(
        argparse.Namespace(
            paths=[str(p) for p in shards],
            first_k=args.first_k,
            max_seq_length=args.max_seq_length,
            max_predictions=args.max_predictions,
        )
    )
    manifest = write_manifest(out, ["train/*.hdf5", "eval/*.hdf5"], args.workers)
    # content hashes by NVIDIA's method (docs/data_download.md): the eval set's is compared
    # with the published one
    print(record_content_hashes(out, eval_file, args.workers))
    mark_out(out, "all", settings)
    print(
        f"all: done; data.train_dir={out / 'train'} data.eval_file={eval_file}; "
        f"checksums in {manifest}"
    )


def check_all_space(args: argparse.Namespace, train_text: list[Path], out: Path) -> None:
    """The whole run's disk before its first step: examples not yet made, then (unless the
    reshard finished) its pieces and shards; each step checks again with its real inputs."""
    work = out / "intermediate"
    todo = [t for t in train_text if not (work / "train" / output_name(t)).exists()]
    eval_text = Path(args.eval_text)
    todo += [] if (work / "eval" / output_name(eval_text)).exists() else [eval_text]
    fixed, _ = text_estimate(total_size(todo), args.dupe_factor)
    _, varlen = text_estimate(total_size(train_text), args.dupe_factor)
    resharded = (out / "train" / RESHARD_PLAN).exists()
    check_disk(
        "all",
        fixed + (0 if resharded else 2 * varlen),
        out,
        f"{len(todo)} text files to examples"
        + ("" if resharded else ", the reshard's pieces and shards")
        + ", per text byte as measured on the stand-in text",
        not args.quiet,
    )


# -- arguments --------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = command_parser("open-bert-prepare", __doc__ + "\n" + INPUT_FORMAT)
    sub = parser.add_subparsers(dest="command", required=True)
    shape, examples, resharding = shape_args(), example_args(), reshard_args()
    workers, quiet, force, seed = workers_args(), quiet_args(), force_folder_args(), seed_args()
    out_folder = "output folder (resumed into on a rerun)"

    p = sub.add_parser("vocab", parents=[shape], help="a small vocab.txt from your text")
    p.add_argument("text", nargs="+", help="text files, or folders of part-* files")
    p.add_argument("--out", required=True, help="the vocab.txt to write")
    p.add_argument(
        "--size",
        type=int_arg(),
        help=f"tokens at most (default: --config's model.vocab_size, else {TINY_VOCAB}, "
        "the default run's)",
    )
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    p.set_defaults(func=cmd_vocab)
    p = sub.add_parser(
        "examples",
        parents=[shape, workers, examples, seed, quiet, force],
        help="text -> fixed HDF5",
    )
    p.add_argument("text", nargs="+", help="text shards, or folders of part-* shards")
    p.add_argument("--out", required=True, help=out_folder)
    p.set_defaults(func=cmd_examples)
    p = sub.add_parser(
        "to-varlen", parents=[shape, workers, quiet, force], help="fixed -> variable length"
    )
    p.add_argument("inputs", nargs="+", help="fixed-length HDF5 files or folders")
    p.add_argument("--out", required=True, help=out_folder)
    p.set_defaults(func=cmd_to_varlen)
    p = sub.add_parser(
        "reshard", parents=[shape, workers, resharding, seed, quiet, force], help="global shuffle"
    )
    p.add_argument("inputs", nargs="+", help="HDF5 files (either format) or folders")
    p.add_argument("--out", required=True, help=out_folder)
    p.set_defaults(func=cmd_reshard)
    p = sub.add_parser("pick-eval", parents=[shape, quiet], help="the fixed eval set")
    p.add_argument("src", help="processed eval HDF5 (either format)")
    p.add_argument("--out", required=True, help="the eval HDF5 file to write")
    p.add_argument(
        "--count",
        type=int_arg(1),
        help=f"eval samples picked (default: --config's eval.samples, else {EVAL_SAMPLES})",
    )
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    p.set_defaults(func=cmd_pick_eval)
    p = sub.add_parser("checksums", parents=[workers], help="sha256 manifest")
    p.add_argument("dir", help="the prepared data folder")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write-checksums", action="store_true", help="write DIR/SHA256SUMS")
    mode.add_argument("--verify", action="store_true", help="check DIR against DIR/SHA256SUMS")
    p.add_argument(
        "--pattern",
        action="append",
        default=None,
        help="files to cover when writing (default **/*.hdf5); repeatable",
    )
    p.add_argument(
        "--force", action="store_true", help="--write-checksums: replace an existing SHA256SUMS"
    )
    p.set_defaults(func=cmd_checksums)
    first_k = option_args(
        "--first-k",
        type=int_arg(1),
        default=16,
        help="leading samples compared between shards (default %(default)s)",
    )
    p = sub.add_parser("check-distinct", parents=[shape, first_k], help="no two shards alike")
    p.add_argument("paths", nargs="+", help="shard files or folders of part_*.hdf5")
    p.set_defaults(func=cmd_check_distinct)
    p = sub.add_parser(
        "all",
        parents=[shape, workers, examples, resharding, seed, quiet, force, first_k],
        help="every step",
    )
    p.add_argument(
        "--train-text", nargs="+", required=True, help="text files, or folders of part-* files"
    )
    p.add_argument("--eval-text", required=True, help="the eval text, one file")
    p.add_argument("--out", required=True, help=out_folder)
    p.add_argument(
        "--eval-samples",
        type=int_arg(1),
        help=f"eval samples picked (default: --config's eval.samples, else {EVAL_SAMPLES})",
    )
    p.set_defaults(func=cmd_all)
    args = parser.parse_args(argv)
    if getattr(args, "pattern", False) is None:
        args.pattern = ["**/*.hdf5"]
    return args


def main(argv: list[str] | None = None, read_shape: ShapeReader | None = None) -> int:
    """`read_shape` reads --config (bert/prepare.py hands bert's config reader in)."""
    args = parse_args(argv)
    try:
        resolve_shape(args, read_shape)
        args.func(args)
    except CheckFailed as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except (DataError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0
