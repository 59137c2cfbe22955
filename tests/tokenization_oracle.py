"""The reference tokenizer and text reader, written plainly from docs/tokenization.md.

This is the test oracle for data/prepare: one character at a time, every class a predicate
calling `unicodedata`, no tables, no caches, no fast paths. It is slow on purpose; the
production code (data/prepare/bert_text.py, wordpiece.py) must equal it on every input.
The section numbers refer to docs/tokenization.md.
"""

from __future__ import annotations

import unicodedata

UNK = "[UNK]"
MAX_WORD_CHARS = 200  # section 7: longer words become one [UNK]


# -- section 1: reading a text shard ------------------------------------------------------------


def read_lines(data: bytes) -> list[str]:
    """The lines the reference's reader returns, each with its '\\n' (the last may lack it).

    A line ends at a '\\n' byte; every '\\r' byte is dropped wherever it stands; the bytes
    of a line are decoded as strict UTF-8 (UnicodeDecodeError on invalid input); an empty
    read means the end of the file.
    """
    lines = []
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        stop = len(data) if end < 0 else end + 1
        raw = bytes(b for b in data[start:stop] if b != 0x0D)
        start = stop
        line = raw.decode("utf-8")
        if not line:  # a last line of only '\r' bytes reads as the end of the file
            break
        lines.append(line)
    return lines


def documents(data: bytes, tokenizer: "Tokenizer") -> list[list[list[int]]]:
    """Section 1: documents of sentences of token ids, as the reference builds them."""
    return _documents(data, tokenizer.encode)


def token_documents(data: bytes, tokenizer: "Tokenizer") -> list[list[list[str]]]:
    """The same documents as WordPiece token strings, the form the reference keeps them in."""
    return _documents(data, tokenizer.tokenize)


def _documents(data: bytes, tokenize) -> list[list[list]]:
    docs: list[list[list]] = [[]]
    for line in read_lines(data):
        line = line.strip()
        if not line:
            docs.append([])
        tokens = tokenize(line)
        if tokens:
            docs[-1].append(tokens)
    return [doc for doc in docs if doc]


# -- sections 2-6: character classes and the basic tokenizer -------------------------------------


def is_whitespace(char: str) -> bool:
    return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def is_control(char: str) -> bool:
    if char in "\t\n\r":
        return False
    return unicodedata.category(char) in ("Cc", "Cf")


def is_punctuation(char: str) -> bool:
    code = ord(char)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def is_cjk(char: str) -> bool:
    code = ord(char)
    return (
        0x4E00 <= code <= 0x9FFF
        or 0x3400 <= code <= 0x4DBF
        or 0x20000 <= code <= 0x2A6DF
        or 0x2A700 <= code <= 0x2B73F
        or 0x2B740 <= code <= 0x2B81F
        or 0x2B820 <= code <= 0x2CEAF
        or 0xF900 <= code <= 0xFAFF
        or 0x2F800 <= code <= 0x2FA1F
    )


def clean(text: str) -> str:
    """Section 3: drop NUL, U+FFFD and control characters; whitespace becomes a space."""
    out = []
    for char in text:
        if ord(char) == 0 or ord(char) == 0xFFFD or is_control(char):
            continue
        out.append(" " if is_whitespace(char) else char)
    return "".join(out)


def space_cjk(text: str) -> str:
    """Section 4: a space on each side of every CJK character."""
    return "".join(f" {c} " if is_cjk(c) else c for c in text)


def strip_accents(word: str) -> str:
    """Section 5: canonical decomposition, then every nonspacing mark (Mn) removed."""
    return "".join(c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn")


def split_punctuation(word: str) -> list[str]:
    """Section 6: each punctuation character alone; the runs between them kept whole."""
    pieces: list[str] = []
    current = ""
    for char in word:
        if is_punctuation(char):
            if current:
                pieces.append(current)
                current = ""
            pieces.append(char)
        else:
            current += char
    if current:
        pieces.append(current)
    return pieces


def basic_tokens(text: str) -> list[str]:
    """Sections 2-6: the basic tokenizer's words for one line (already a str)."""
    text = space_cjk(clean(text))
    words = []
    for word in text.split():  # section 4: Python's whitespace split
        word = strip_accents(word.lower())  # section 5: the whole word at once
        words += split_punctuation(word)
    return " ".join(words).split()


# -- section 7: WordPiece ------------------------------------------------------------------------


def wordpiece(word: str, vocab: dict[str, int]) -> list[str]:
    if len(word) > MAX_WORD_CHARS:
        return [UNK]
    pieces = []
    start = 0
    while start < len(word):
        end = len(word)
        while end > start:
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                break
            end -= 1
        if end == start:  # no prefix of the rest is in the vocabulary
            return [UNK]
        pieces.append(piece)
        start = end
    return pieces


def load_vocab(data: bytes) -> dict[str, int]:
    """Section 8: token = stripped line, id = line number; a repeated token keeps its last id."""
    vocab = {}
    for index, line in enumerate(read_lines(data)):
        vocab[line.strip()] = index
    return vocab


class Tokenizer:
    """FullTokenizer(do_lower_case=True): basic tokens, then WordPiece, then ids."""

    def __init__(self, vocab: dict[str, int]):
        self.vocab = vocab

    def encode(self, text: str) -> list[int]:
        return self.ids(basic_tokens(text))

    def tokenize(self, text: str) -> list[str]:
        """FullTokenizer.tokenize: the WordPiece token strings of one line."""
        return [piece for word in basic_tokens(text) for piece in wordpiece(word, self.vocab)]

    def ids(self, words: list[str]) -> list[int]:
        """The ids of the basic tokenizer's words."""
        return [self.vocab[piece] for word in words for piece in wordpiece(word, self.vocab)]


# -- inputs: what the tests and scripts/bench/compare_tokenizer_library.py draw lines from ------

# code point ranges of the scripts a mixed-script line takes its words from
MIXED_SCRIPTS = [
    (0x41, 0x24F),
    (0x370, 0x3FF),
    (0x400, 0x4FF),
    (0x590, 0x6FF),
    (0x900, 0x9FF),
    (0xE00, 0xEFF),
    (0x1100, 0x11FF),
    (0x3040, 0x30FF),
    (0x4E00, 0x4E80),
    (0xAC00, 0xAD00),
    (0x1F300, 0x1F64F),
    (0x300, 0x36F),
    (0x2000, 0x206F),
    (0xFF00, 0xFFEF),
]
# what such a line puts after each word
SEPARATORS = [" ", "\t", "\u00a0", "\u2028", "\u3000", "\u200b", "\x00", "  "]
