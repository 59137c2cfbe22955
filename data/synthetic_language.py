"""The hidden language of the synthetic data (data/synthetic.py writes it to shards).

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

import numpy as np

from data.order.lengths import sample_lengths
from data.sample import Sample


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
LANGUAGE_STREAM, TRAIN_STREAM, EVAL_STREAM = 0, 1, 2


def successor_table(seed: int, vocab_size: int) -> np.ndarray:
    """(vocab_size,) int64: succ[w] for word ids w; special ids map to themselves (unused)."""
    _check_vocab(vocab_size)
    rng = np.random.default_rng([seed, LANGUAGE_STREAM])
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
        raise ValueError(
            f"max_seq_length={max_seq_length} must be >= {4 * MIN_LENGTH} (each "
            f"quarter of the length histogram needs room above the minimum length "
            f"{MIN_LENGTH})"
        )
    return sample_lengths(n, max_seq_length, rng, min_length=MIN_LENGTH)


def generate_words(
    rng: np.random.Generator,
    succ: np.ndarray,
    num_words: np.ndarray,
    b_starts: np.ndarray,
    b_is_random: np.ndarray,
) -> np.ndarray:
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


def layout_tokens(
    words: np.ndarray, lengths: np.ndarray, a_lengths: np.ndarray, max_seq_length: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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


def choose_masked(
    rng: np.random.Generator, is_word: np.ndarray, max_predictions: int
) -> tuple[np.ndarray, np.ndarray]:
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


def apply_masking(
    rng: np.random.Generator,
    tokens: np.ndarray,
    positions: np.ndarray,
    valid: np.ndarray,
    vocab_size: int,
) -> np.ndarray:
    """(n, max_predictions) int64 original ids at the chosen positions; masks `tokens` in place.

    Each chosen token becomes [MASK] (80%), a random word (10%) or stays (10%).
    """
    rows = np.broadcast_to(np.arange(tokens.shape[0])[:, None], positions.shape)[valid]
    cols = positions[valid]
    original = np.zeros(positions.shape, dtype=np.int64)
    original[valid] = tokens[rows, cols]
    choice = rng.random(len(rows))
    replacement = np.where(
        choice < MASK_TOKEN_PROB,
        MASK_ID,
        np.where(
            choice < MASK_TOKEN_PROB + RANDOM_TOKEN_PROB,
            rng.integers(FIRST_WORD_ID, vocab_size, size=len(rows)),
            tokens[rows, cols],
        ),
    )
    tokens[rows, cols] = replacement
    return original


def generate_samples(
    rng: np.random.Generator,
    succ: np.ndarray,
    num_samples: int,
    max_seq_length: int,
    max_predictions: int,
) -> list[Sample]:
    """`num_samples` synthetic Samples (file dtypes: int16 ids, int8 segments)."""
    lengths = _sample_lengths(rng, num_samples, max_seq_length)
    num_words = lengths - 3
    a_lengths = rng.integers(1, num_words)  # A and B each hold at least one word
    b_is_random = rng.random(num_samples) < NSP_RANDOM_PROB
    words = generate_words(rng, succ, num_words, a_lengths, b_is_random)
    tokens, segments, is_word = layout_tokens(words, lengths, a_lengths, max_seq_length)
    positions, valid = choose_masked(rng, is_word, max_predictions)
    original = apply_masking(rng, tokens, positions, valid, len(succ))
    return _to_samples(
        tokens, segments, lengths, positions, original, valid.sum(axis=1), b_is_random
    )


def _to_samples(
    tokens: np.ndarray,
    segments: np.ndarray,
    lengths: np.ndarray,
    positions: np.ndarray,
    original: np.ndarray,
    counts: np.ndarray,
    b_is_random: np.ndarray,
) -> list[Sample]:
    """Cut the dense rows to their lengths (views into the int16/int8 copies)."""
    tokens16, segments8 = tokens.astype(np.int16), segments.astype(np.int8)
    positions16, original16 = positions.astype(np.int16), original.astype(np.int16)
    labels = b_is_random.astype(np.int64)
    return [
        Sample(
            tokens16[i, :l], segments8[i, :l], positions16[i, :m], original16[i, :m], int(labels[i])
        )
        for i, (l, m) in enumerate(zip(lengths.tolist(), counts.tolist()))
    ]
