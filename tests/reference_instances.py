"""The reference's training instances, stated plainly: the test oracle for
data/prepare/instances.py and the reference side of scripts/bench/bench_prepare.py.

Written from the algorithm of MLCommons' create_pretraining_data.py (retired BERT benchmark),
in the reference's own terms: documents are lists of sentences, a sentence is a list of
WordPiece token strings, every instance is built from Python lists, and the random draws come
one at a time from one `random.Random` in the reference's order. Whole-word masking is off, as
in MLPerf. The writer (tests/reference_writer.py) turns tokens into ids.

Plain Python idioms (extend, slices) stand where the reference appends token by token, so this
is, if anything, faster than the reference.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

CLS, SEP, MASK = "[CLS]", "[SEP]", "[MASK]"


@dataclass
class RefInstance:
    tokens: list[str]  # [CLS] A [SEP] B [SEP], the chosen tokens replaced
    segment_ids: list[int]
    is_random_next: bool
    masked_lm_positions: list[int]  # ascending
    masked_lm_labels: list[str]  # the original tokens there


def create_instances(
    documents: list[list[list[str]]], params, vocab_words: list[str], rng: random.Random
) -> list[RefInstance]:
    """`params` has the fields of data.prepare.instances.ExampleParams."""
    documents = [doc for doc in documents if doc]
    rng.shuffle(documents)
    instances: list[RefInstance] = []
    for _ in range(params.dupe_factor):
        for index in range(len(documents)):
            instances.extend(document_instances(documents, index, params, vocab_words, rng))
    rng.shuffle(instances)
    return instances


def document_instances(documents, index: int, params, vocab_words, rng) -> list[RefInstance]:
    document = documents[index]
    max_tokens = params.max_seq_length - 3
    # Mostly fill the whole sequence; sometimes aim shorter (short_seq_prob).
    target = max_tokens
    if rng.random() < params.short_seq_prob:
        target = rng.randint(2, max_tokens)
    instances: list[RefInstance] = []
    chunk: list[list[str]] = []
    chunk_tokens = 0
    i = 0
    while i < len(document):
        chunk.append(document[i])
        chunk_tokens += len(document[i])
        if i == len(document) - 1 or chunk_tokens >= target:
            split = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            tokens_a = [token for sentence in chunk[:split] for token in sentence]
            if len(chunk) == 1 or rng.random() < 0.5:
                is_random_next = True
                tokens_b = other_document_text(documents, index, target - len(tokens_a), rng)
                i -= len(chunk) - split  # the sentences not used go into the next chunk
            else:
                is_random_next = False
                tokens_b = [token for sentence in chunk[split:] for token in sentence]
            truncate_pair(tokens_a, tokens_b, max_tokens, rng)
            instances.append(
                make_instance(tokens_a, tokens_b, is_random_next, params, vocab_words, rng)
            )
            chunk, chunk_tokens = [], 0
        i += 1
    return instances


def other_document_text(documents, index: int, wanted: int, rng) -> list[str]:
    """Tokens of sentences from a random start in another document (10 tries to avoid this
    one), up to `wanted` tokens or the document's end."""
    other = index
    for _ in range(10):
        other = rng.randint(0, len(documents) - 1)
        if other != index:
            break
    document = documents[other]
    tokens: list[str] = []
    for sentence in document[rng.randint(0, len(document) - 1) :]:
        tokens.extend(sentence)
        if len(tokens) >= wanted:
            break
    return tokens


def truncate_pair(tokens_a: list[str], tokens_b: list[str], max_tokens: int, rng) -> None:
    """In place: one token at a time off the longer list (B on a tie), front or back. (The
    reference deletes each token from its list; keeping the ends and cutting once is the
    same result in linear time.)"""
    ends = [[0, len(tokens_a)], [0, len(tokens_b)]]
    while (ends[0][1] - ends[0][0]) + (ends[1][1] - ends[1][0]) > max_tokens:
        longer = ends[0] if ends[0][1] - ends[0][0] > ends[1][1] - ends[1][0] else ends[1]
        if rng.random() < 0.5:
            longer[0] += 1
        else:
            longer[1] -= 1
    tokens_a[:] = tokens_a[ends[0][0] : ends[0][1]]
    tokens_b[:] = tokens_b[ends[1][0] : ends[1][1]]


def make_instance(tokens_a, tokens_b, is_random_next, params, vocab_words, rng) -> RefInstance:
    tokens = [CLS, *tokens_a, SEP, *tokens_b, SEP]
    segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
    masked, positions, labels = mask_tokens(tokens, params, vocab_words, rng)
    return RefInstance(masked, segment_ids, is_random_next, positions, labels)


def mask_tokens(tokens: list[str], params, vocab_words: list[str], rng):
    """(tokens with the chosen ones replaced, their positions ascending, their originals)."""
    candidates = [i for i, token in enumerate(tokens) if token != CLS and token != SEP]
    rng.shuffle(candidates)
    count = min(params.max_predictions, max(1, int(round(len(tokens) * params.masked_lm_prob))))
    output = list(tokens)
    for position in candidates[:count]:
        if rng.random() < 0.8:
            output[position] = MASK
        elif rng.random() < 0.5:
            pass  # keeps its own token
        else:
            output[position] = vocab_words[rng.randint(0, len(vocab_words) - 1)]
    positions = sorted(candidates[:count])
    return output, positions, [tokens[p] for p in positions]
