"""Text shards -> documents of WordPiece ids, exactly as the MLPerf reference makes them.

The reference is Google's create_pretraining_data.py with FullTokenizer(do_lower_case=True);
docs/tokenization.md states what it does to every input, and tests/unit/test_tokenization.py checks
this module against a plain statement of it on every code point and on random text.

Input format (REFERENCE 2, the MLCommons cleaned Wikipedia shards): one sentence per line,
documents separated by blank lines.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np

from data.prepare.bert_text import clean_line, token_pieces
from data.sources.shards import DataError

SPECIAL_TOKENS = ("[UNK]", "[CLS]", "[SEP]", "[MASK]")  # the ones the reference looks up
# Ids are stored as int16 in the HDF5 files (REFERENCE 2).
MAX_VOCAB = int(np.iinfo(np.int16).max) + 1
MAX_WORD_CHARS = 200  # the reference's max_input_chars_per_word: a longer word is one [UNK]
CACHE_TOKENS = 1 << 20  # whitespace tokens remembered: ~200 MB, most of a text shard's

Document = list[np.ndarray]  # one (n,) int32 array of ids per sentence


@dataclass(frozen=True)
class Vocab:
    """What instance creation needs to know about the vocabulary."""

    size: int
    cls_id: int
    sep_id: int
    mask_id: int


class WordPiece:
    """Basic tokenizer + greedy longest-match WordPiece with `##` continuations -> ids."""

    def __init__(self, ids: dict[str, int]):
        self.ids = ids
        self.unk = ids["[UNK]"]
        # No piece longer than the longest token can match: the search starts there.
        self.longest = max(map(len, ids), default=0)
        self.longest_cont = max((len(t) - 2 for t in ids if t.startswith("##")), default=0)
        self.cache = _Memo(self.token_ids, CACHE_TOKENS)  # whitespace token -> ids
        self.word_cache = _Memo(self.word_ids, CACHE_TOKENS)  # basic tokenizer word -> ids

    def encode(self, line: str) -> list[int]:
        """The ids of one line (the reference's FullTokenizer.tokenize, then its ids)."""
        # All in C but for tokens not seen before (_Memo.__missing__).
        return list(chain.from_iterable(map(self.cache.__getitem__, clean_line(line).split())))

    def token_ids(self, token: str) -> tuple[int, ...]:
        """The ids of one whitespace-separated token: a pure function of the token."""
        return tuple(chain.from_iterable(map(self.word_cache.__getitem__, token_pieces(token))))

    def word_ids(self, word: str) -> tuple[int, ...]:
        """Greedy longest match; a word over the limit, or with an unmatched rest, is [UNK]."""
        if len(word) > MAX_WORD_CHARS:
            return (self.unk,)
        out, start, n = [], 0, len(word)
        while start < n:
            if start == 0:
                end = min(n, self.longest)
                while end > 0 and word[:end] not in self.ids:
                    end -= 1
                piece = word[:end]
            else:
                end = min(n, start + self.longest_cont)
                while end > start and "##" + word[start:end] not in self.ids:
                    end -= 1
                piece = "##" + word[start:end]
            if end == start:
                return (self.unk,)
            out.append(self.ids[piece])
            start = end
        return tuple(out)


class _Memo(dict):
    """key -> fn(key), computed on first use; forgets everything when `limit` is reached."""

    def __init__(self, fn, limit: int):
        super().__init__()
        self.fn, self.limit = fn, limit

    def __missing__(self, key):
        if len(self) >= self.limit:
            self.clear()
        value = self[key] = self.fn(key)
        return value


def split_lines(data: bytes, path: Path, what: str) -> list[str]:
    """Lines as the reference's reader (TensorFlow's GFile) returns them, without their '\\n'.

    It ends a line at '\\n' only, drops every '\\r' byte wherever it stands, and decodes
    strictly as UTF-8 (the reference stops with UnicodeDecodeError; here, one DataError).
    """
    data = data.replace(b"\r", b"")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise DataError(
            f"{path}: {what} is not UTF-8 text (line {line}: "
            f"{data[err.start : err.start + 4]!r}); the reference stops on it too"
        ) from None
    lines = text.split("\n")
    if lines[-1] == "":  # a final '\n' ends the last line; it does not start another
        lines.pop()
    return lines


def load_tokenizer(vocab_file: str | os.PathLike) -> tuple[WordPiece, Vocab]:
    """The tokenizer for `vocab_file` (one token per line, id = line number) and its Vocab."""
    path = Path(vocab_file)
    if not path.is_file():
        raise DataError(f"{path}: vocabulary file does not exist")
    lines = split_lines(_read(path, "vocabulary"), path, "vocabulary")
    ids: dict[str, int] = {}
    for number, line in enumerate(lines):
        token = line.strip()  # as the reference's load_vocab
        if token in ids:
            # The reference would map the token to its last line but draw random words from
            # the distinct ones, so ids and random replacements would shift: refuse instead.
            raise DataError(
                f"{path}: line {number + 1} repeats token {token!r} of line "
                f"{ids[token] + 1}; expected one token per line, each once"
            )
        ids[token] = number
    for token in SPECIAL_TOKENS:
        if token not in ids:
            raise DataError(
                f"{path}: vocabulary has no {token} token (needs "
                f"{', '.join(SPECIAL_TOKENS)}); expected BERT's vocab.txt"
            )
    if len(ids) > MAX_VOCAB:
        raise DataError(f"{path}: vocabulary size {len(ids)} exceeds {MAX_VOCAB} (ids are int16)")
    vocab = Vocab(len(ids), ids["[CLS]"], ids["[SEP]"], ids["[MASK]"])
    return WordPiece(ids), vocab


def read_documents(path: str | os.PathLike, tokenizer: WordPiece) -> list[Document]:
    """All non-empty documents of one text shard, in file order.

    As the reference: a line is stripped of whitespace (str.strip); an empty line ends a
    document; a line that tokenizes to nothing is dropped without ending one; empty
    documents are removed.
    """
    path = Path(path)
    documents: list[Document] = [[]]
    for line in split_lines(_read(path, "text shard"), path, "text shard"):
        line = line.strip()
        if not line:
            documents.append([])
            continue
        ids = tokenizer.encode(line)
        if ids:
            documents[-1].append(np.asarray(ids, dtype=np.int32))
    return [doc for doc in documents if doc]


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise DataError(f"{path}: cannot read {what} ({err.strerror})") from None
