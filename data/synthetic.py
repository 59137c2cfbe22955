"""Synthetic MLPerf-format shards with a realistic length mix and a learnable hidden language.

    python -m data.synthetic --out DIR [--num-shards 4] [--samples-per-shard 4096]
        [--eval-samples 2000] [--max-seq-length 128] [--max-predictions 20]
        [--vocab-size 1024] [--seed 12345]

writes DIR/part_00000_of_00004.hdf5 ... and DIR/eval.hdf5 in the variable-length format.

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

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

from data.files import write_text_atomic
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
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--num-shards", type=int, default=4)
    parser.add_argument("--samples-per-shard", type=int, default=4096)
    parser.add_argument("--eval-samples", type=int, default=2000)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--max-predictions", type=int, default=20)
    parser.add_argument("--vocab-size", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=12345)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Exit status 0, or 2 with one `error:` line for bad arguments or an unusable folder."""
    args = _parse_args(argv)
    try:
        _generate_and_report(args)
    except (DataError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def _generate_and_report(args: argparse.Namespace) -> None:
    start = time.perf_counter()
    written = generate(args.out, args.num_shards, args.samples_per_shard, args.eval_samples,
                       args.max_seq_length, args.max_predictions, args.vocab_size, args.seed)
    seconds = time.perf_counter() - start
    for path in written.train_files:
        print(f"wrote {path} ({args.samples_per_shard} samples)")
    print(f"wrote {written.eval_file} ({args.eval_samples} samples)")
    print(f"{args.num_shards * args.samples_per_shard + args.eval_samples} samples, "
          f"max_seq_length {args.max_seq_length}, vocab {args.vocab_size}, seed {args.seed}, "
          f"in {seconds:.2f} s")


if __name__ == "__main__":
    sys.exit(main())


# --------------------------------------------------------------------------------------------
# Data on first use (the default run)
# --------------------------------------------------------------------------------------------

MANIFEST = "synthetic.json"


def ensure_synthetic_data(data, vocab_size: int) -> None:
    """Generate data.train_dir's synthetic data if `data.synthetic.enabled` and it is absent.

    `data`: a DataConfig (data/config.py), whose eval_file already defaults to the generated
    eval.hdf5; vocab_size: the model's (token ids are drawn below it). The manifest is written
    last (atomically), so a folder without one, or with one describing other parameters, is
    regenerated instead of trusted. Runs before the MLPerf init phase: data preparation is not
    part of the timed run.
    """
    syn = data.synthetic
    if not syn.enabled:
        return
    if not data.train_dir:
        raise DataError("data.synthetic.enabled needs data.train_dir (where to put the data)")
    out = Path(data.train_dir)
    params = dict(num_shards=syn.num_shards, samples_per_shard=syn.samples_per_shard,
                  eval_samples=syn.eval_samples, max_seq_length=data.max_seq_length,
                  max_predictions=data.max_predictions_per_seq,
                  vocab_size=vocab_size, seed=syn.seed)
    manifest = out / MANIFEST
    if manifest.is_file() and _read_manifest(manifest) == params:
        return
    if manifest.is_file():
        manifest.unlink()  # stale: other parameters; the shards below are rewritten
        for old in out.glob(SHARD_GLOB):
            old.unlink()
    start = time.perf_counter()
    generate(out, **params)
    write_text_atomic(manifest, json.dumps(params, indent=1))
    print(f"synthetic data: {params['num_shards']} shards x {params['samples_per_shard']} samples"
          f" + {params['eval_samples']} eval samples in {out} "
          f"({time.perf_counter() - start:.1f} s)", flush=True)


def _read_manifest(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
