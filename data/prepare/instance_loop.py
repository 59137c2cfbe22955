"""The compiled part of instances.py (numba): Python's random generator, draw for draw, and
the reference's instance rules over flat token arrays, drawing from it in the reference's order.

The reference draws every decision from one `random.Random`, one call at a time, and the
output depends on the exact stream. Most of its time goes to `rng.shuffle` of each instance's
~140 mask candidates: ~150 `_randbelow` calls, each a Python-level loop around `getrandbits`.
The same stream in compiled code is two orders of magnitude cheaper, so the first half carries
CPython's generator and its derived draws (Lib/random.py, Modules/_randommodule.c, 3.x):
MT19937 words; `random()` from two words; `_randbelow(n)` by rejection of the top
`n.bit_length()` bits of a word; `randint(a, b) = a + _randbelow(b - a + 1)`; Fisher-Yates
`shuffle` from the last element down. Its state is a (625,) uint32 array: the 624 words, then
the read index, as in `random.Random.getstate()[1]`; `take_state` / `give_state` move it
between the two. tests/unit/test_pyrandom.py checks every draw and the final state against
`random.Random` itself.

The second half is create_pretraining_data.py's rules (names follow it). Documents are ranges
of sentences and sentences ranges of tokens in one array (instances.flatten), so segments A
and B are token ranges and truncation moves their ends. Instances are appended to flat
buffers that grow as needed.

Both halves stay in this one file on purpose: numba's cache of a compiled function is keyed to
its own source file only, so a generator in another file could change without the cached
instance loop noticing.
"""

from __future__ import annotations

import random
from typing import NamedTuple

import numpy as np
from numba import njit

# --------------------------------------------------------------------------------------------
# Python's generator
# --------------------------------------------------------------------------------------------

N, M = 624, 397
MATRIX_A, UPPER_MASK, LOWER_MASK = 0x9908B0DF, 0x80000000, 0x7FFFFFFF


def take_state(rng: random.Random) -> np.ndarray:
    """(625,) uint32: `rng`'s generator state."""
    version, internal, _ = rng.getstate()
    if version != 3 or len(internal) != N + 1:
        raise ValueError(f"unexpected random.Random state (version {version})")
    return np.array(internal, dtype=np.uint32)


def give_state(rng: random.Random, state: np.ndarray) -> None:
    """Continue `rng` from `state`, as if it had made the draws itself."""
    _, _, gauss_next = rng.getstate()
    rng.setstate((3, tuple(int(word) for word in state), gauss_next))


@njit(cache=True)
def _refill(state):
    """The next 624 words of the generator (MT19937's twist), in three runs so that no
    index wraps."""
    for kk in range(N - M):
        state[kk] = _twist(state[kk], state[kk + 1], state[kk + M])
    for kk in range(N - M, N - 1):
        state[kk] = _twist(state[kk], state[kk + 1], state[kk + M - N])
    state[N - 1] = _twist(state[N - 1], state[0], state[M - 1])
    state[N] = 0


@njit(cache=True, inline="always")
def _twist(word, following, distant):
    y = (np.int64(word) & UPPER_MASK) | (np.int64(following) & LOWER_MASK)
    out = np.int64(distant) ^ (y >> 1)
    return out ^ MATRIX_A if y & 1 else out


@njit(cache=True)
def next_word(state) -> int:
    """genrand_uint32: one tempered 32-bit word (as an int64)."""
    if state[N] >= N:
        _refill(state)
    y = _temper(state[state[N]])
    state[N] += 1
    return y


@njit(cache=True, inline="always")
def _temper(word):
    y = np.int64(word)
    y ^= y >> 11
    y ^= (y << 7) & 0x9D2C5680
    y ^= (y << 15) & 0xEFC60000
    return y ^ (y >> 18)


@njit(cache=True)
def uniform(state) -> float:
    """random.random(): 53 bits from two words."""
    high = next_word(state) >> 5
    low = next_word(state) >> 6
    return (high * 67108864.0 + low) * (1.0 / 9007199254740992.0)


@njit(cache=True)
def below(state, n: int) -> int:
    """_randbelow(n) for 0 < n < 2**32 (one word per try; the callers' bounds are vocabulary
    and document counts): the top n.bit_length() bits of a word, redrawn while >= n."""
    shift = 32 - _bit_length(n)
    value = next_word(state) >> shift
    while value >= n:
        value = next_word(state) >> shift
    return value


@njit(cache=True)
def _bit_length(n):
    bits = 0
    while n:
        bits += 1
        n >>= 1
    return bits


@njit(cache=True)
def randint(state, low: int, high: int) -> int:
    return low + below(state, high - low + 1)


@njit(cache=True)
def shuffle(state, values) -> None:
    """random.shuffle on a 1-D array: the swaps the reference makes on its list. (The hot
    loop of instance making: the read index stays in a local here.)"""
    i = len(values) - 1
    shift = 32 - _bit_length(i + 1)
    at = np.int64(state[N])
    while i > 0:
        if (i + 1) >> (31 - shift) == 0:  # i + 1 has one bit fewer from here on
            shift += 1
        while True:
            if at >= N:
                _refill(state)
                at = 0
            j = _temper(state[at]) >> shift
            at += 1
            if j <= i:
                break
        values[i], values[j] = values[j], values[i]
        i -= 1
    state[N] = at


# --------------------------------------------------------------------------------------------
# The instance rules
# --------------------------------------------------------------------------------------------

NSP_RANDOM_PROB = 0.5
MASK_PROB = 0.8  # of the chosen tokens; of the rest, half keep their token, half get a random id
KEEP_PROB = 0.5
RANDOM_DOC_TRIES = 10


class Corpus(NamedTuple):
    """instances.flatten's arrays: the text and where its sentences and documents start."""

    text: np.ndarray  # (T,) int32 token ids
    sentence_starts: np.ndarray  # (S+1,) int64 token offsets
    doc_starts: np.ndarray  # (D+1,) int64 sentence indices


class Rules(NamedTuple):
    """The example parameters and vocabulary ids every instance is made by. (numba takes
    named tuples, not dataclasses.)"""

    max_seq_length: int
    max_predictions: int
    masked_lm_prob: float
    short_seq_prob: float
    vocab_size: int
    cls_id: int
    sep_id: int
    mask_id: int


class Flat(NamedTuple):
    """Instances appended flat, as InstanceSet stores them (nsp as int8), the buffers that
    grow first. The first n / used / masked entries are made."""

    tokens: np.ndarray  # (used,) int32
    positions: np.ndarray  # (masked,) int32
    ids: np.ndarray  # (masked,) int32
    offset: np.ndarray  # (n,) int64
    length: np.ndarray  # (n,) int64
    len_a: np.ndarray  # (n,) int64
    nsp: np.ndarray  # (n,) int8
    mask_offset: np.ndarray  # (n,) int64
    mask_count: np.ndarray  # (n,) int64


@njit(cache=True)
def create(corpus, rules, dupe_factor, state):
    """create_training_instances after tokenizing, on instances.flatten's arrays; returns
    the instances (Flat, in creation order), their counts (n, used, masked) and the final
    order (n,)."""
    n_docs = len(corpus.doc_starts) - 1
    order = np.arange(n_docs)
    shuffle(state, order)  # rng.shuffle(all_documents): document k is order[k]
    # Each instance takes at least one sentence of its document: at most one per sentence.
    most = dupe_factor * (len(corpus.sentence_starts) - 1)
    # A first guess at the int32 buffers (pages never written are never backed by memory);
    # _room grows them.
    tokens = np.empty(2 * dupe_factor * len(corpus.text) + 16, np.int32)
    masks = len(tokens) // 4 + 16
    flat = Flat(
        tokens,
        np.empty(masks, np.int32),
        np.empty(masks, np.int32),
        np.empty(most, np.int64),
        np.empty(most, np.int64),
        np.empty(most, np.int64),
        np.empty(most, np.int8),
        np.empty(most, np.int64),
        np.empty(most, np.int64),
    )
    n = used = masked = np.int64(0)  # not literals: numba would compile a variant for 0
    for _ in range(dupe_factor):
        for index in range(n_docs):
            doc = order[index]
            sentences = corpus.doc_starts[doc + 1] - corpus.doc_starts[doc]
            flat = _room_for(flat, used, masked, sentences, rules)
            n, used, masked = _document(corpus, order, index, rules, state, flat, n, used, masked)
    final = np.arange(n)
    shuffle(state, final)  # rng.shuffle(instances)
    return flat, (n, used, masked), final


@njit(cache=True)
def _room_for(flat, used, masked, sentences, rules):
    """`flat`, its int32 buffers grown where a document of `sentences` sentences (at most
    one instance each) might not fit."""
    tokens = _room(flat.tokens, used, sentences * rules.max_seq_length)
    positions = _room(flat.positions, masked, sentences * rules.max_predictions)
    ids = _room(flat.ids, masked, sentences * rules.max_predictions)
    return Flat(tokens, positions, ids, *flat[3:])


@njit(cache=True)
def _room(buffer, used, extra):
    """The int32 `buffer`, or a larger copy when `extra` more values would not fit."""
    if used + extra <= len(buffer):
        return buffer
    larger = np.empty(max(2 * len(buffer), used + extra), np.int32)
    _copy(buffer, 0, used, larger, 0)
    return larger


@njit(cache=True)
def _copy(source, lo, hi, target, at):
    """target[at:at + hi - lo] = source[lo:hi], as a loop: numba compiles slice assignment's
    general broadcasting in seconds, a loop in a fraction of one."""
    for k in range(hi - lo):
        target[at + k] = source[lo + k]


@njit(cache=True)
def _document(corpus, order, index, rules, state, flat, n, used, masked):
    """The instances of document `index` (of the shuffled list), appended to `flat` at
    n / used / masked; returns the new counts."""
    text, sentence_starts, _ = corpus
    tokens, positions, ids, offset, length, len_a, nsp, mask_offset, mask_count = flat
    first = corpus.doc_starts[order[index]]
    stop = corpus.doc_starts[order[index] + 1]
    max_tokens = rules.max_seq_length - 3
    target = max_tokens
    if uniform(state) < rules.short_seq_prob:
        target = randint(state, 2, max_tokens)
    chunk_first, chunk_tokens, i = first, 0, first
    while i < stop:
        chunk_tokens += sentence_starts[i + 1] - sentence_starts[i]
        if i == stop - 1 or chunk_tokens >= target:
            segments = i - chunk_first + 1
            split = randint(state, 1, segments - 1) if segments >= 2 else 1
            a_lo = sentence_starts[chunk_first]
            a_hi = sentence_starts[chunk_first + split]
            # `or` short-circuits: a one-segment chunk draws nothing here, as in the reference.
            is_random = segments == 1 or uniform(state) < NSP_RANDOM_PROB
            if is_random:
                wanted = target - (a_hi - a_lo)
                b_lo, b_hi = _random_next(corpus, order, index, wanted, state)
                i -= segments - split  # the unused segments start the next chunk
            else:
                b_lo, b_hi = a_hi, sentence_starts[i + 1]
            a_lo, a_hi, b_lo, b_hi = _truncate(a_lo, a_hi, b_lo, b_hi, max_tokens, state)
            size = _write_pair(text, a_lo, a_hi, b_lo, b_hi, rules, tokens, used)
            pair = tokens[used : used + size]
            count = _mask(pair, rules, state, positions[masked:], ids[masked:])
            offset[n], length[n], len_a[n], nsp[n] = used, size, a_hi - a_lo, is_random
            mask_offset[n], mask_count[n] = masked, count
            n, used, masked = n + 1, used + size, masked + count
            chunk_first, chunk_tokens = i + 1, 0
        i += 1
    return n, used, masked


@njit(cache=True)
def _random_next(corpus, order, index, wanted, state):
    """(lo, hi) token range: sentences from a random start in a random other document (10
    tries), until `wanted` tokens or the document's end."""
    sentence_starts, doc_starts = corpus.sentence_starts, corpus.doc_starts
    other = index
    for _ in range(RANDOM_DOC_TRIES):
        other = randint(state, 0, len(order) - 1)
        if other != index:
            break
    first, stop = doc_starts[order[other]], doc_starts[order[other] + 1]
    j = first + randint(state, 0, stop - first - 1)
    lo, taken = sentence_starts[j], 0
    while j < stop:
        taken += sentence_starts[j + 1] - sentence_starts[j]
        j += 1
        if taken >= wanted:
            break
    return lo, sentence_starts[j]


@njit(cache=True)
def _truncate(a_lo, a_hi, b_lo, b_hi, max_tokens, state):
    """Drop tokens from the longer side (B on ties), from the front or back at random."""
    while (a_hi - a_lo) + (b_hi - b_lo) > max_tokens:
        if a_hi - a_lo > b_hi - b_lo:
            if uniform(state) < 0.5:
                a_lo += 1
            else:
                a_hi -= 1
        elif uniform(state) < 0.5:
            b_lo += 1
        else:
            b_hi -= 1
    return a_lo, a_hi, b_lo, b_hi


@njit(cache=True)
def _write_pair(text, a_lo, a_hi, b_lo, b_hi, rules, tokens, at):
    """[CLS] A [SEP] B [SEP] into tokens[at:]; returns its length."""
    la, lb = a_hi - a_lo, b_hi - b_lo
    tokens[at] = rules.cls_id
    _copy(text, a_lo, a_hi, tokens, at + 1)
    tokens[at + 1 + la] = rules.sep_id
    _copy(text, b_lo, b_hi, tokens, at + 2 + la)
    tokens[at + 2 + la + lb] = rules.sep_id
    return la + lb + 3


@njit(cache=True)
def mask_count_for(length, max_predictions, masked_lm_prob):
    """min(max_predictions, max(1, round(masked_lm_prob * length))), Python's round (half to
    even, as np.rint) on the same double."""
    return min(max_predictions, max(1, int(np.rint(length * masked_lm_prob))))


@njit(cache=True)
def _mask(tokens, rules, state, positions, ids):
    """BERT masking of one instance in place; its positions (ascending) and original ids go
    to positions[:m] / ids[:m]; returns m. Each chosen token becomes [MASK] (80%), stays
    (10%) or becomes a random id of the whole vocabulary (10%)."""
    candidates = np.empty(len(tokens), np.int64)
    c = 0
    for p in range(len(tokens)):
        if tokens[p] != rules.cls_id and tokens[p] != rules.sep_id:
            candidates[c] = p
            c += 1
    candidates = candidates[:c]
    shuffle(state, candidates)
    m = min(c, mask_count_for(len(tokens), rules.max_predictions, rules.masked_lm_prob))
    for k in range(m):  # insertion sort: m is small
        p = candidates[k]
        j = k
        while j > 0 and positions[j - 1] > p:
            positions[j] = positions[j - 1]
            j -= 1
        positions[j] = p
    for k in range(m):
        ids[k] = tokens[positions[k]]
    for k in range(m):  # draws in shuffled order, as the reference makes them
        p = candidates[k]
        if uniform(state) < MASK_PROB:
            tokens[p] = rules.mask_id
        elif uniform(state) < KEEP_PROB:
            continue  # keeps its own token
        else:
            tokens[p] = randint(state, 0, rules.vocab_size - 1)
    return m


# --------------------------------------------------------------------------------------------
# The fixed-length rows
# --------------------------------------------------------------------------------------------


@njit(cache=True)
def pad_rows(
    tokens,
    offset,
    length,
    len_a,
    masked_positions,
    masked_ids,
    mask_offset,
    mask_count,
    input_ids,
    input_mask,
    segment_ids,
    positions,
    ids,
):
    """Row r of InstanceSet's arrays into row r of the zeroed (n, L) and (n, P) outputs:
    its tokens, 1 on each, segment 1 after [CLS] A [SEP], its mask positions and ids."""
    for r in range(len(offset)):
        start, size, first_b = offset[r], length[r], len_a[r] + 2
        for c in range(size):
            input_ids[r, c] = tokens[start + c]
            input_mask[r, c] = 1
            segment_ids[r, c] = c >= first_b
        start = mask_offset[r]
        for k in range(mask_count[r]):
            positions[r, k] = masked_positions[start + k]
            ids[r, k] = masked_ids[start + k]
