"""Synthetic MLPerf-format shards with a realistic length mix and a learnable hidden language.

    python -m data.synthetic --out DIR [--num-shards 4] [--samples-per-shard 4096]
        [--eval-samples 2000] [--max-seq-length 128] [--max-predictions 20]
        [--vocab-size 1024] [--seed 12345]

writes DIR/part_00000_of_00004.hdf5 ... and DIR/eval.hdf5 in the variable-length format, and
DIR/synthetic.json, the settings: the mark of a folder this module wrote. DIR must be new or
empty (or already hold these settings' data); a folder holding anything else is refused with
one `error:` line and exit status 2, so a user's data is never overwritten. The training default
(`ensure_synthetic_data`) keeps its data in a cache folder, one subfolder per settings.

What the data looks like and why:
- Lengths follow the REFERENCE 2 histogram of the real training set, scaled to max_seq_length L:
  quarters (0, L/4], (L/4, L/2], (L/2, 3L/4], (3L/4, L] with probabilities 0.373, 0.197, 0.117,
  0.314, and about 23% of all samples exactly at L. Load balancing and packing are then
  exercised with the bimodal mix they face on the real data. Minimum length 5.
- Token ids use the uncased BERT vocabulary's special ids ([PAD]=0, [CLS]=101, [SEP]=102,
  [MASK]=103); words are ids in [104, vocab_size). Layout [CLS] A [SEP] B [SEP].
- Words come from a hidden "language" with two layers. Each sentence has a topic word, and each
  word is that topic word with probability 0.8 (KEY_PROB); otherwise it continues a chain: the
  successor succ[previous word] (a fixed random permutation) with probability 0.9, else a
  uniformly random word. The topic words are what a tiny BERT learns within a few hundred steps
  (attention starts out as an average over the sentence, which already carries them), so the
  default CPU run reaches the MLPerf target accuracy (0.72) in minutes. The chain is the harder
  part (it needs attention to the neighbouring position); it lowers the loss of a model that
  learns it, while argmax accuracy stays near the topic share (about 0.8).
- NSP: with probability 0.5 sentence B continues A (same topic word, chain continues from A's
  last word; label 0, IsNext), otherwise B has its own random topic word and its chain restarts
  at a random word (label 1).
- Masking as in BERT: max(1, round(0.15 * word tokens)) positions (at most max_predictions)
  among the words, sorted; 80% become [MASK], 10% a random word, 10% stay.
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

from bert.core.errors import ConfigError
from bert.core.files import temp_name, write_text_atomic
from data.order.lengths import sample_lengths
from data.packing import Sample
from data.sources.shards import SHARD_GLOB, DataError, write_samples

PAD_ID, CLS_ID, SEP_ID, MASK_ID = 0, 101, 102, 103
FIRST_WORD_ID = 104
MIN_LENGTH = 5  # [CLS] w [SEP] w [SEP]: both sentences hold at least one word

KEY_PROB = 0.8  # chance that a word is its sentence's topic word
FOLLOW_PROB = 0.9  # otherwise: chance that a word is the successor of the previous one
NSP_RANDOM_PROB = 0.5
MASKED_LM_PROB = 0.15
MASK_TOKEN_PROB = 0.8  # of the chosen positions; then 10% random word, 10% unchanged
RANDOM_TOKEN_PROB = 0.1

# Sub-seeds: the language is shared by train and eval, the samples are not.
_LANGUAGE_STREAM, _TRAIN_STREAM, _EVAL_STREAM = 0, 1, 2


class GeneratedData(NamedTuple):
    train_files: list[Path]
    eval_file: Path


def shard_name(index: int, count: int) -> str:
    """MLPerf shard file name, e.g. part_00003_of_00004.hdf5."""
    return f"part_{index:05d}_of_{count:05d}.hdf5"


def successor_table(seed: int, vocab_size: int) -> np.ndarray:
    """(vocab_size,) int64: succ[w] for word ids w; special ids map to themselves (unused)."""
    _check_vocab(vocab_size)
    rng = np.random.default_rng([seed, _LANGUAGE_STREAM])
    succ = np.arange(vocab_size, dtype=np.int64)
    succ[FIRST_WORD_ID:] = FIRST_WORD_ID + rng.permutation(vocab_size - FIRST_WORD_ID)
    return succ


def _check_vocab(vocab_size: int) -> None:
    # int16 ids in the file cap the vocabulary; at least two words keep the language non-trivial.
    if not FIRST_WORD_ID + 2 <= vocab_size <= np.iinfo(np.int16).max + 1:
        raise ValueError(f"vocab_size={vocab_size} must be in [{FIRST_WORD_ID + 2}, 32768]")


# --------------------------------------------------------------------------------------------
# Vectorized generation: every step works on all n samples at once
# --------------------------------------------------------------------------------------------

def _sample_lengths(rng: np.random.Generator, n: int, max_seq_length: int) -> np.ndarray:
    """(n,) int64 sequence lengths from REFERENCE 2's histogram (data/order/lengths.py) scaled
    to max_seq_length L: bins [5, L/4], (L/4, L/2], (L/2, 3L/4], (3L/4, L-1] and exactly L."""
    if max_seq_length < 4 * MIN_LENGTH:
        raise ValueError(f"max_seq_length={max_seq_length} must be >= {4 * MIN_LENGTH} (each "
                         f"quarter of the length histogram needs room above the minimum length "
                         f"{MIN_LENGTH})")
    return sample_lengths(n, max_seq_length, rng, min_length=MIN_LENGTH)


def generate_words(rng: np.random.Generator, succ: np.ndarray, num_words: np.ndarray,
                   b_starts: np.ndarray, b_is_random: np.ndarray) -> np.ndarray:
    """(n, max(num_words)) int64 words; entries past num_words[i] are unused.

    Column j is its sentence's topic word with probability KEY_PROB; otherwise it follows the
    previous column through succ with probability FOLLOW_PROB, else is a random word. Where B is
    random (NSP label 1), B has its own topic word and B's first word (column b_starts[i]) never
    follows A. The loop runs over columns only (max_seq_length steps), vectorized over samples.
    """
    n, width = len(num_words), int(num_words.max())
    vocab_size = len(succ)
    columns = np.arange(width)
    topic_a = rng.integers(FIRST_WORD_ID, vocab_size, size=n)
    topic_b = np.where(b_is_random, rng.integers(FIRST_WORD_ID, vocab_size, size=n), topic_a)
    topics = np.where(columns[None, :] < b_starts[:, None], topic_a[:, None], topic_b[:, None])
    is_topic = rng.random((n, width)) < KEY_PROB
    random_words = rng.integers(FIRST_WORD_ID, vocab_size, size=(n, width))
    follows = rng.random((n, width)) < FOLLOW_PROB
    follows &= ~((columns[None, :] == b_starts[:, None]) & b_is_random[:, None])
    follows[:, 0] = False  # sentence A's chain starts at a random word
    words = np.where(is_topic, topics, random_words)
    for j in range(1, width):
        chained = np.where(follows[:, j], succ[words[:, j - 1]], random_words[:, j])
        words[:, j] = np.where(is_topic[:, j], topics[:, j], chained)
    return words


def layout_tokens(words: np.ndarray, lengths: np.ndarray, a_lengths: np.ndarray,
                  max_seq_length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dense [CLS] A [SEP] B [SEP] layout of n samples, padded to max_seq_length.

    Returns input_ids (n, L) int64 (PAD past each length), segment_ids (n, L) int64 and
    is_word (n, L) bool (the positions that may be masked).
    """
    pos = np.arange(max_seq_length)[None, :]
    length, a_len = lengths[:, None], a_lengths[:, None]
    sep_a = a_len + 1  # position of the first [SEP]
    is_word = (pos >= 1) & (pos < length - 1) & (pos != sep_a)
    word_col = np.where(pos <= a_len, pos - 1, pos - 2).clip(0, words.shape[1] - 1)
    tokens = np.take_along_axis(words, word_col, axis=1)
    tokens = np.where(is_word, tokens, PAD_ID)
    tokens[:, 0] = CLS_ID
    tokens[(pos == sep_a) | (pos == length - 1)] = SEP_ID
    segments = ((pos > sep_a) & (pos < length)).astype(np.int64)
    return tokens, segments, is_word


def choose_masked(rng: np.random.Generator, is_word: np.ndarray,
                  max_predictions: int) -> tuple[np.ndarray, np.ndarray]:
    """BERT's choice of masked positions among the words of each sample.

    Returns positions (n, max_predictions) int64, sorted within the valid prefix of each row,
    and valid (n, max_predictions) bool marking the first counts[i] entries.
    """
    num_words = is_word.sum(axis=1)
    # np.rint rounds half to even, like Python 3's round() in Google's create_pretraining_data.
    counts = np.minimum(max_predictions, np.maximum(1, np.rint(MASKED_LM_PROB * num_words)))
    keys = np.where(is_word, rng.random(is_word.shape), np.inf)  # non-words never chosen
    width = min(max_predictions, is_word.shape[1])
    chosen = np.argsort(keys, axis=1)[:, :width]
    valid = np.arange(width)[None, :] < counts[:, None]
    # Sort the valid prefix: push invalid entries past every real position first.
    positions = np.sort(np.where(valid, chosen, is_word.shape[1]), axis=1)
    return positions, valid


def apply_masking(rng: np.random.Generator, tokens: np.ndarray, positions: np.ndarray,
                  valid: np.ndarray, vocab_size: int) -> np.ndarray:
    """(n, max_predictions) int64 original ids at the chosen positions; masks `tokens` in place.

    Each chosen token becomes [MASK] (80%), a random word (10%) or stays (10%).
    """
    rows = np.broadcast_to(np.arange(tokens.shape[0])[:, None], positions.shape)[valid]
    cols = positions[valid]
    original = np.zeros(positions.shape, dtype=np.int64)
    original[valid] = tokens[rows, cols]
    choice = rng.random(len(rows))
    replacement = np.where(choice < MASK_TOKEN_PROB, MASK_ID,
                           np.where(choice < MASK_TOKEN_PROB + RANDOM_TOKEN_PROB,
                                    rng.integers(FIRST_WORD_ID, vocab_size, size=len(rows)),
                                    tokens[rows, cols]))
    tokens[rows, cols] = replacement
    return original


def generate_samples(rng: np.random.Generator, succ: np.ndarray, num_samples: int,
                     max_seq_length: int, max_predictions: int) -> list[Sample]:
    """`num_samples` synthetic Samples (file dtypes: int16 ids, int8 segments)."""
    lengths = _sample_lengths(rng, num_samples, max_seq_length)
    num_words = lengths - 3
    a_lengths = rng.integers(1, num_words)  # A and B each hold at least one word
    b_is_random = rng.random(num_samples) < NSP_RANDOM_PROB
    words = generate_words(rng, succ, num_words, a_lengths, b_is_random)
    tokens, segments, is_word = layout_tokens(words, lengths, a_lengths, max_seq_length)
    positions, valid = choose_masked(rng, is_word, max_predictions)
    original = apply_masking(rng, tokens, positions, valid, len(succ))
    return _to_samples(tokens, segments, lengths, positions, original, valid.sum(axis=1),
                       b_is_random)


def _to_samples(tokens: np.ndarray, segments: np.ndarray, lengths: np.ndarray,
                positions: np.ndarray, original: np.ndarray, counts: np.ndarray,
                b_is_random: np.ndarray) -> list[Sample]:
    """Cut the dense rows to their lengths (views into the int16/int8 copies)."""
    tokens16, segments8 = tokens.astype(np.int16), segments.astype(np.int8)
    positions16, original16 = positions.astype(np.int16), original.astype(np.int16)
    labels = b_is_random.astype(np.int64)
    return [
        Sample(tokens16[i, :l], segments8[i, :l], positions16[i, :m], original16[i, :m],
               int(labels[i]))
        for i, (l, m) in enumerate(zip(lengths.tolist(), counts.tolist()))
    ]


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------

def generate(out_dir: str | os.PathLike, num_shards: int = 4, samples_per_shard: int = 4096,
             eval_samples: int = 2000, max_seq_length: int = 128, max_predictions: int = 20,
             vocab_size: int = 1024, seed: int = 12345) -> GeneratedData:
    """Write `num_shards` training shards and eval.hdf5 into `out_dir`; deterministic per seed.

    The low-level writer, for a folder the caller owns (tests, scripts); users' folders go
    through `write_marked_folder`, which refuses any folder holding files it did not write.

    Every file is written atomically, so rerunning into a complete folder (same arguments)
    rewrites identical files. Shards of another shard count already in the folder are an
    error: they would silently join the training set.
    """
    for name, value in (("num_shards", num_shards), ("samples_per_shard", samples_per_shard),
                        ("eval_samples", eval_samples), ("max_predictions", max_predictions)):
        if value < 1:
            raise ValueError(f"{name}={value} must be >= 1")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    train_files = [out / shard_name(k, num_shards) for k in range(num_shards)]
    _refuse_foreign_shards(out, train_files)
    succ = successor_table(seed, vocab_size)
    for k, path in enumerate(train_files):
        rng = np.random.default_rng([seed, _TRAIN_STREAM, k])
        write_samples(path, generate_samples(rng, succ, samples_per_shard, max_seq_length,
                                             max_predictions))
    eval_rng = np.random.default_rng([seed, _EVAL_STREAM])
    eval_file = write_samples(out / "eval.hdf5", generate_samples(
        eval_rng, succ, eval_samples, max_seq_length, max_predictions))
    return GeneratedData(train_files, eval_file)


def _refuse_foreign_shards(out: Path, train_files: list[Path]) -> None:
    foreign = sorted(set(out.glob(SHARD_GLOB)) - set(train_files))
    if foreign:
        raise DataError(f"{out}: holds shards this run would not write ({foreign[0].name}"
                        f"{' and others' if len(foreign) > 1 else ''}); use an empty folder")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m data.synthetic", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True,
                        help="output folder: new, empty, or one this command wrote with the "
                             "same settings (anything else is refused)")
    parser.add_argument("--num-shards", type=int, default=4)
    parser.add_argument("--samples-per-shard", type=int, default=4096)
    parser.add_argument("--eval-samples", type=int, default=2000)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--max-predictions", type=int, default=20)
    parser.add_argument("--vocab-size", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=12345)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Exit status 0, or 2 with one `error:` line (a folder it may not write, bad arguments)."""
    args = _parse_args(argv)
    params = dict(num_shards=args.num_shards, samples_per_shard=args.samples_per_shard,
                  eval_samples=args.eval_samples, max_seq_length=args.max_seq_length,
                  max_predictions=args.max_predictions, vocab_size=args.vocab_size,
                  seed=args.seed)
    out = Path(args.out)
    start = time.perf_counter()
    try:
        wrote = write_marked_folder(out, params, what="--out=")
    except (DataError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not wrote:
        print(f"{out}: already holds the synthetic data of these settings ({MANIFEST}); "
              f"nothing written")
        return 0
    for k in range(args.num_shards):
        print(f"wrote {out / shard_name(k, args.num_shards)} ({args.samples_per_shard} samples)")
    print(f"wrote {out / EVAL_NAME} ({args.eval_samples} samples)")
    print(f"{args.num_shards * args.samples_per_shard + args.eval_samples} samples, "
          f"max_seq_length {args.max_seq_length}, vocab {args.vocab_size}, seed {args.seed}, "
          f"in {time.perf_counter() - start:.2f} s")
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
    try:
        mark = json.loads((folder / MANIFEST).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(mark, dict):
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
        return (f"{what}{folder}: holds files this program did not write (no {MANIFEST}); "
                f"synthetic data is never written into such a folder: name a new or empty one")
    return (f"{what}{folder}: holds synthetic data of other settings "
            f"({_first_difference(read_mark(folder), params)}); it is never regenerated in "
            f"place: name another folder")


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
        write_text_atomic(tmp / MANIFEST, json.dumps(
            {"format": MARK_FORMAT, "params": params}, indent=1))
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
    return (f"len{params['max_seq_length']}_pred{params['max_predictions']}_"
            f"vocab{params['vocab_size']}_{digest}")


def claim_cache_root(root: Path) -> None:
    """The cache root must be ours: created here (and marked), or empty, or marked before."""
    if (root / CACHE_MARK).is_file():
        return
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise DataError(f"data.synthetic.cache_dir={root}: holds files this program did not "
                        f"write (no {CACHE_MARK}); name a new or empty folder")
    root.mkdir(parents=True, exist_ok=True)
    # Written in place, not atomically: the mark must be the root's first entry, or a process
    # starting beside this one would see a temporary file and take the root for a user's.
    (root / CACHE_MARK).write_text("open-bert synthetic data cache: one folder per settings "
                                   "(data/synthetic.py); safe to delete\n")


# --------------------------------------------------------------------------------------------
# Data on first use (the default run)
# --------------------------------------------------------------------------------------------

def synthetic_params(data, vocab_size: int) -> dict:
    syn = data.synthetic
    return dict(num_shards=syn.num_shards, samples_per_shard=syn.samples_per_shard,
                eval_samples=syn.eval_samples, max_seq_length=data.max_seq_length,
                max_predictions=data.max_predictions_per_seq, vocab_size=vocab_size,
                seed=syn.seed)


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
    return dataclasses.replace(data, train_dir=str(folder),
                               eval_file=data.eval_file or str(folder / EVAL_NAME))


def _check_config(data, vocab_size: int) -> None:
    """What the generator refuses, as a ConfigError naming the config key (before any write)."""
    low, high = FIRST_WORD_ID + 2, np.iinfo(np.int16).max + 1
    if not low <= vocab_size <= high:
        raise ConfigError(f"model.vocab_size={vocab_size}: synthetic data "
                          f"(data.synthetic.enabled=true) needs a vocabulary in [{low}, {high}]")
    if data.max_seq_length < 4 * MIN_LENGTH:
        raise ConfigError(f"data.max_seq_length={data.max_seq_length}: synthetic data "
                          f"(data.synthetic.enabled=true) needs at least {4 * MIN_LENGTH} "
                          f"tokens (each quarter of its length histogram above "
                          f"{MIN_LENGTH})")


def _check_named_folder(folder: Path, params: dict) -> None:
    state = folder_state(folder, params)
    if state in ("missing", "empty"):
        what = "does not exist" if state == "missing" else "is empty"
        raise DataError(f"data.train_dir={folder}: {what}; synthetic data is made only in "
                        f"data.synthetic.cache_dir (leave data.train_dir empty) or by "
                        f"python -m data.synthetic --out DIR")
    if state != "same":
        raise DataError(_refusal(folder, state, params, "data.train_dir=") +
                        " (to train on it as it is: --set data.synthetic.enabled=false)")


def _cached_folder(root: Path, params: dict) -> Path:
    claim_cache_root(root)
    folder = root / settings_key(params)
    start = time.perf_counter()
    if write_marked_folder(folder, params, what="synthetic data cache folder "):
        print(f"synthetic data: {params['num_shards']} shards x {params['samples_per_shard']} "
              f"samples + {params['eval_samples']} eval samples in {folder} "
              f"({time.perf_counter() - start:.1f} s)", flush=True)
    return folder


if __name__ == "__main__":
    sys.exit(main())
