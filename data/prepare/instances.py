"""Training instances from documents, with the semantics of Google's create_pretraining_data.py.

The random draws are the reference's, made in the same order from one `random.Random(seed)`:
shuffle the documents; for each of `dupe_factor` passes over them, cut each document into
chunks of about `target` tokens (short with probability `short_seq_prob`), split a chunk into
A and B at a random segment boundary, replace B by text from a random document half of the time
(always for a one-segment chunk), truncate the pair at random ends, and mask; finally shuffle
all instances. Whole-word masking is off (as in MLPerf), so every non-special token is its own
candidate. Given the same token ids, the output equals the reference's (tests/
reference_instances.py states it with the reference's lists and strings; tests/
test_prepare_exact.py compares).

The draws depend on each other (a rejected draw shifts every later one), so the algorithm runs
as one compiled loop over the documents with Python's generator carried along (instance_loop.py,
numba), which also lays out the padded rows.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from data.prepare.wordpiece import Document, Vocab


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


@dataclass(frozen=True)
class InstanceSet:
    """n instances in their final order, stored flat. Instance i is tokens[offset[i]:
    offset[i] + length[i]] ([CLS] A [SEP] B [SEP], masked tokens replaced; A has len_a[i]
    tokens) and masked_positions / masked_ids[mask_offset[i]: mask_offset[i] +
    mask_count[i]] (positions ascending, the original ids there)."""

    tokens: np.ndarray  # (T,) int32, in creation order
    offset: np.ndarray  # (n,) int64
    length: np.ndarray  # (n,) int64
    len_a: np.ndarray  # (n,) int64
    is_random_next: np.ndarray  # (n,) bool: NSP label 1
    masked_positions: np.ndarray  # (M,) int32
    masked_ids: np.ndarray  # (M,) int32
    mask_offset: np.ndarray  # (n,) int64
    mask_count: np.ndarray  # (n,) int64

    def __len__(self) -> int:
        return len(self.offset)

    def padded(
        self, start: int, stop: int, max_seq_length: int, max_predictions: int, id_dtype=np.int16
    ) -> dict[str, np.ndarray]:
        """Rows start..stop as zero-padded arrays: input_ids (n, L) `id_dtype`, input_mask,
        segment_ids (n, L) int8, masked_lm_positions, masked_lm_ids (n, P) `id_dtype`,
        next_sentence_labels (n,) int8. Ids and positions must fit `id_dtype`."""
        from data.prepare.instance_loop import pad_rows

        rows = slice(start, stop)
        n = len(self.offset[rows])
        out = {
            "input_ids": np.zeros((n, max_seq_length), id_dtype),
            "input_mask": np.zeros((n, max_seq_length), np.int8),
            "segment_ids": np.zeros((n, max_seq_length), np.int8),
            "masked_lm_positions": np.zeros((n, max_predictions), id_dtype),
            "masked_lm_ids": np.zeros((n, max_predictions), id_dtype),
            "next_sentence_labels": self.is_random_next[rows].astype(np.int8),
        }
        # One pass per row in compiled code: a third of the time of numpy's masked writes.
        pad_rows(
            self.tokens,
            self.offset[rows],
            self.length[rows],
            self.len_a[rows],
            self.masked_positions,
            self.masked_ids,
            self.mask_offset[rows],
            self.mask_count[rows],
            out["input_ids"],
            out["input_mask"],
            out["segment_ids"],
            out["masked_lm_positions"],
            out["masked_lm_ids"],
        )
        return out


def create_instances(
    documents: list[Document], params: ExampleParams, vocab: Vocab, rng: random.Random
) -> InstanceSet:
    """All instances of one shard's documents (empty ones dropped first, as the reference
    does). `rng` ends where the reference's generator would; `documents` is not changed."""
    # numba and the compiled code load on first use, not for the command line's parsing.
    from data.prepare.instance_loop import Corpus, Rules, create, give_state, take_state

    corpus = Corpus(*flatten([doc for doc in documents if len(doc)]))
    if len(corpus.doc_starts) > 1 << 31 or (np.diff(corpus.sentence_starts) == 0).any():
        raise ValueError("a shard needs fewer than 2**31 documents and no empty sentence")
    rules = Rules(
        params.max_seq_length,
        params.max_predictions,
        params.masked_lm_prob,
        params.short_seq_prob,
        vocab.size,
        vocab.cls_id,
        vocab.sep_id,
        vocab.mask_id,
    )
    state = take_state(rng)
    flat, (_, used, masked), final = create(corpus, rules, params.dupe_factor, state)
    give_state(rng, state)
    return InstanceSet(
        flat.tokens[:used],
        flat.offset[final],
        flat.length[final],
        flat.len_a[final],
        flat.nsp[final] != 0,
        flat.positions[:masked],
        flat.ids[:masked],
        flat.mask_offset[final],
        flat.mask_count[final],
    )


def load_compiled_code() -> None:
    """Load the compiled instance code into this process, compiling it on the first run on
    a machine (about 5 s of CPU; numba caches it beside the source). A parent calls this
    before starting workers, so that they load the cache instead of each compiling."""
    vocab = Vocab(size=8, cls_id=1, sep_id=2, mask_id=3)
    made = create_instances(
        [[np.array([5, 6, 7], np.int32)]], ExampleParams(), vocab, random.Random(0)
    )
    made.padded(0, 1, 8, 1)


def compiled_code_cached() -> bool:
    """Whether numba's cache seems to hold the instance loop: index files newer than its
    source in $NUMBA_CACHE_DIR when set, else beside it. A wrong guess costs one line."""
    source = Path(__file__).with_name("instance_loop.py")
    place = Path(os.environ.get("NUMBA_CACHE_DIR") or source.parent / "__pycache__")
    built = source.stat().st_mtime
    return place.is_dir() and any(
        index.stat().st_mtime >= built for index in place.rglob("instance_loop.*.nbi")
    )


def flatten(documents: list[Document]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(all token ids (T,) int32, sentence start offsets (S+1,), document start sentence
    indices (D+1,)), both int64."""
    sentences = [sentence for document in documents for sentence in document]
    text = np.concatenate(sentences).astype(np.int32) if sentences else np.zeros(0, np.int32)
    sentence_starts = np.zeros(len(sentences) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in sentences], out=sentence_starts[1:])
    doc_starts = np.zeros(len(documents) + 1, dtype=np.int64)
    np.cumsum([len(d) for d in documents], out=doc_starts[1:])
    return text, sentence_starts, doc_starts
