"""Training instances from documents, with the semantics of Google's create_pretraining_data.py.

The random draws are the reference's, made in the same order from one `random.Random(seed)`:
shuffle the documents; for each of `dupe_factor` passes over them, cut each document into
chunks of about `target` tokens (short with probability `short_seq_prob`), split a chunk into
A and B at a random segment boundary, replace B by text from a random document half of the time
(always for a one-segment chunk), truncate the pair at random ends, and mask; finally shuffle
all instances. Whole-word masking is off (as in MLPerf), so every non-special token is its own
candidate. Given the same token ids, the output equals the reference's.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from data.prepare.wordpiece import Document, Vocab

NSP_RANDOM_PROB = 0.5
MASK_PROB = 0.8  # of the chosen tokens; of the rest, half keep their token, half get a random id
KEEP_PROB = 0.5
RANDOM_DOC_TRIES = 10


@dataclass(frozen=True)
class ExampleParams:
    """MLPerf values (REFERENCE 2) as defaults."""

    max_seq_length: int = 512
    max_predictions: int = 76
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    dupe_factor: int = 10
    random_seed: int = 12345

    def __post_init__(self) -> None:
        if self.max_seq_length < 5:
            raise ValueError(f"max_seq_length={self.max_seq_length} must be >= 5")
        if self.max_predictions < 1 or self.dupe_factor < 1:
            raise ValueError("max_predictions and dupe_factor must be >= 1")
        if not 0.0 < self.masked_lm_prob < 1.0 or not 0.0 <= self.short_seq_prob <= 1.0:
            raise ValueError("masked_lm_prob must be in (0, 1), short_seq_prob in [0, 1]")


class Instance(NamedTuple):
    tokens: np.ndarray  # (l,) int32 [CLS] A [SEP] B [SEP], masked tokens replaced
    len_a: int  # tokens of A; segment 0 is positions 0 .. len_a + 1
    masked_positions: np.ndarray  # (m,) int32, ascending
    masked_ids: np.ndarray  # (m,) int32, the original tokens there
    is_random_next: bool  # NSP label 1

    @property
    def segment_ids(self) -> np.ndarray:
        """(l,) int8: 0 for [CLS] A [SEP], 1 for B [SEP]."""
        seg = np.ones(len(self.tokens), dtype=np.int8)
        seg[: self.len_a + 2] = 0
        return seg


def create_instances(documents: list[Document], params: ExampleParams, vocab: Vocab,
                     rng: random.Random) -> list[Instance]:
    """All instances of one shard's documents (the list is shuffled in place, as in the
    reference)."""
    rng.shuffle(documents)
    instances: list[Instance] = []
    for _ in range(params.dupe_factor):
        for index in range(len(documents)):
            instances += instances_from_document(documents, index, params, vocab, rng)
    rng.shuffle(instances)
    return instances


def instances_from_document(documents: list[Document], index: int, params: ExampleParams,
                            vocab: Vocab, rng: random.Random) -> list[Instance]:
    document = documents[index]
    max_tokens = params.max_seq_length - 3  # room for [CLS] and two [SEP]
    target = max_tokens
    if rng.random() < params.short_seq_prob:
        target = rng.randint(2, max_tokens)
    out: list[Instance] = []
    chunk: list[np.ndarray] = []
    chunk_len, i = 0, 0
    while i < len(document):
        chunk.append(document[i])
        chunk_len += len(document[i])
        if i == len(document) - 1 or chunk_len >= target:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            tokens_a = np.concatenate(chunk[:a_end])
            # `or` short-circuits: a one-segment chunk draws nothing here, as in the reference.
            is_random = len(chunk) == 1 or rng.random() < NSP_RANDOM_PROB
            if is_random:
                tokens_b = random_next(documents, index, target - len(tokens_a), rng)
                i -= len(chunk) - a_end  # the unused segments start the next chunk
            else:
                tokens_b = np.concatenate(chunk[a_end:])
            tokens_a, tokens_b = truncate_pair(tokens_a, tokens_b, max_tokens, rng)
            out.append(build_instance(tokens_a, tokens_b, is_random, params, vocab, rng))
            chunk, chunk_len = [], 0
        i += 1
    return out


def random_next(documents: list[Document], index: int, target_len: int,
                rng: random.Random) -> np.ndarray:
    """Sentences from a random other document (10 tries), from a random start, until
    `target_len` tokens."""
    other = index
    for _ in range(RANDOM_DOC_TRIES):
        other = rng.randint(0, len(documents) - 1)
        if other != index:
            break
    doc = documents[other]
    start = rng.randint(0, len(doc) - 1)
    taken, count = [], 0
    for sentence in doc[start:]:
        taken.append(sentence)
        count += len(sentence)
        if count >= target_len:
            break
    return np.concatenate(taken)


def truncate_pair(a: np.ndarray, b: np.ndarray, max_tokens: int,
                  rng: random.Random) -> tuple[np.ndarray, np.ndarray]:
    """Drop tokens from the longer side (B on ties), from the front or back at random."""
    bounds = [[0, len(a)], [0, len(b)]]
    while (bounds[0][1] - bounds[0][0]) + (bounds[1][1] - bounds[1][0]) > max_tokens:
        longer = bounds[0] if bounds[0][1] - bounds[0][0] > bounds[1][1] - bounds[1][0] \
            else bounds[1]
        if rng.random() < 0.5:
            longer[0] += 1
        else:
            longer[1] -= 1
    return a[bounds[0][0]:bounds[0][1]], b[bounds[1][0]:bounds[1][1]]


def build_instance(a: np.ndarray, b: np.ndarray, is_random: bool, params: ExampleParams,
                   vocab: Vocab, rng: random.Random) -> Instance:
    tokens = np.concatenate([[vocab.cls_id], a, [vocab.sep_id], b, [vocab.sep_id]]).astype(np.int32)
    masked, positions, labels = mask_tokens(tokens, params, vocab, rng)
    return Instance(masked, len(a), positions, labels, is_random)


def mask_tokens(tokens: np.ndarray, params: ExampleParams, vocab: Vocab,
                rng: random.Random) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BERT masking: (masked tokens (l,), positions (m,) ascending, original ids (m,)).

    m = min(max_predictions, max(1, round(masked_lm_prob * l))) with l counting [CLS]/[SEP], as
    in the reference (Python's round: half to even). Each chosen token becomes [MASK] (80%),
    stays (10%) or becomes a random id of the whole vocabulary (10%).
    """
    candidates = np.flatnonzero((tokens != vocab.cls_id) & (tokens != vocab.sep_id)).tolist()
    rng.shuffle(candidates)
    count = min(params.max_predictions,
                max(1, int(round(len(tokens) * params.masked_lm_prob))))
    chosen = candidates[:count]
    output = tokens.copy()
    for pos in chosen:  # draws in shuffled order, as the reference makes them
        if rng.random() < MASK_PROB:
            output[pos] = vocab.mask_id
        elif rng.random() < KEEP_PROB:
            continue  # keeps its own token
        else:
            output[pos] = rng.randint(0, vocab.size - 1)
    positions = np.sort(np.asarray(chosen, dtype=np.int32))
    return output, positions, tokens[positions]
