"""Text shards -> documents of WordPiece ids, with the uncased BERT tokenizer of `tokenizers`.

Input format (REFERENCE 2, the MLCommons cleaned Wikipedia shards): one sentence per line,
documents separated by blank lines. BertWordPieceTokenizer is BERT's basic tokenizer (clean
text, lower-case, strip accents, split punctuation and CJK characters) followed by greedy
longest-match WordPiece with `##` continuations, as in Google's tokenization.py.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import BertWordPieceTokenizer

from data.sources.shards import DataError

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# Ids are stored as int16 in the HDF5 files (REFERENCE 2).
MAX_VOCAB = int(np.iinfo(np.int16).max) + 1
ENCODE_BATCH = 4096  # lines per encode_batch call: large enough to amortize, small in memory

Document = list[np.ndarray]  # one (n,) int32 array of ids per sentence


@dataclass(frozen=True)
class Vocab:
    """What instance creation needs to know about the vocabulary."""

    size: int
    cls_id: int
    sep_id: int
    mask_id: int


def load_tokenizer(vocab_file: str | os.PathLike,
                   lowercase: bool = True) -> tuple[BertWordPieceTokenizer, Vocab]:
    """The tokenizer for `vocab_file` (one token per line, id = line number) and its Vocab."""
    path = Path(vocab_file)
    if not path.is_file():
        raise DataError(f"{path}: vocabulary file does not exist")
    _check_text(path)
    try:
        tokenizer = BertWordPieceTokenizer(str(path), lowercase=lowercase)
    except Exception as err:  # noqa: BLE001 - the Rust library raises plain Exception
        raise DataError(f"{path}: not a WordPiece vocabulary ({err})") from None
    ids = {}
    for token in ("[CLS]", "[SEP]", "[MASK]"):
        ids[token] = tokenizer.token_to_id(token)
        if ids[token] is None:
            raise DataError(f"{path}: vocabulary has no {token} token")
    size = tokenizer.get_vocab_size()
    if size > MAX_VOCAB:
        raise DataError(f"{path}: vocabulary size {size} exceeds {MAX_VOCAB} (ids are int16)")
    return tokenizer, Vocab(size, ids["[CLS]"], ids["[SEP]"], ids["[MASK]"])


def _check_text(path: Path) -> None:
    """A vocabulary is UTF-8 text, one token per line; name the line where it is not."""
    data = path.read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise DataError(f"{path}: vocabulary is not UTF-8 text (byte {err.start}, line {line}: "
                        f"{data[err.start:err.start + 4]!r}); expected vocab.txt, one token per "
                        f"line") from None


def read_documents(path: str | os.PathLike, tokenizer: BertWordPieceTokenizer) -> list[Document]:
    """All non-empty documents of one text shard, in file order.

    As in Google's create_pretraining_data.py: a blank line ends a document, lines are stripped,
    a line that tokenizes to nothing is dropped, and empty documents are removed.
    """
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [line.strip() for line in f]
    except OSError as err:
        raise DataError(f"{path}: cannot read text shard ({err.strerror})") from None
    sentences = [line for line in lines if line]
    encoded = _encode(tokenizer, sentences)
    documents: list[Document] = [[]]
    k = 0
    for line in lines:
        if not line:
            documents.append([])
            continue
        ids = encoded[k]
        k += 1
        if ids.size:
            documents[-1].append(ids)
    return [doc for doc in documents if doc]


def _encode(tokenizer: BertWordPieceTokenizer, sentences: list[str]) -> list[np.ndarray]:
    out = []
    for start in range(0, len(sentences), ENCODE_BATCH):
        batch = tokenizer.encode_batch(sentences[start:start + ENCODE_BATCH],
                                       add_special_tokens=False)
        out += [np.asarray(e.ids, dtype=np.int32) for e in batch]
    return out
