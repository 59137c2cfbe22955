"""A small WordPiece vocabulary made from your own text, for a model smaller than BERT's.

MLPerf's runs use the uncased vocab.txt of 30,522 tokens that `open-bert-download` fetches;
a small model (the tiny default: model.vocab_size 1024) needs a vocabulary no larger than its
embedding table. This one keeps every character of the text, alone and as a `##` continuation,
so WordPiece never gives [UNK] on that text, and fills the rest with the most frequent whole
words of Google's basic tokenizer (bert_text.py), in order of frequency (ties: first seen).
It is not a trained WordPiece vocabulary: enough for a small model to learn from, not a rival
to BERT's.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Sequence

from bert.core.files import atomic_path
from data.prepare.bert_text import basic_tokens
from data.prepare.wordpiece import _read, split_lines
from data.sources.shards import DataError

# [PAD] first so that id 0 is padding, as in BERT's vocab.txt; the others are looked up by name
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def word_counts(texts: Sequence[str | os.PathLike]) -> Counter:
    """The basic tokenizer's words of every line of `texts`, counted."""
    counts: Counter = Counter()
    for text in texts:
        path = Path(text)
        for line in split_lines(_read(path, "text shard"), path, "text shard"):
            counts.update(basic_tokens(line))
    return counts


def build_vocab(counts: Counter, size: int, size_key: str = "--size") -> list[str]:
    """At most `size` tokens: the special ones, every character twice, then frequent words."""
    chars: Counter = Counter()
    for word, count in counts.items():
        for char in word:
            chars[char] += count
    alphabet = [char for char, _ in chars.most_common()]
    needed = len(SPECIAL_TOKENS) + 2 * len(alphabet)
    if size < needed:
        raise DataError(
            f"vocabulary size {size} ({size_key}) is below the {needed} tokens that keep "
            f"every character of the text ({len(alphabet)} characters, each alone and as "
            f"##c, and {len(SPECIAL_TOKENS)} special tokens); raise it"
        )
    words = [word for word, _ in counts.most_common() if len(word) > 1]
    return [
        *SPECIAL_TOKENS,
        *alphabet,
        *(f"##{char}" for char in alphabet),
        *words[: size - needed],
    ]


def write_vocab(
    texts: Sequence[str | os.PathLike], out: str | os.PathLike, size: int, size_key: str = "--size"
) -> tuple[Path, int]:
    """The vocabulary of `texts` at `out` (one token per line, id = line number, written
    atomically); returns the path and the number of tokens."""
    counts = word_counts(texts)
    if not counts:
        raise DataError(f"{', '.join(map(str, texts))}: no words to make a vocabulary from")
    tokens = build_vocab(counts, size, size_key)
    with atomic_path(out) as tmp:
        tmp.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return Path(out), len(tokens)
