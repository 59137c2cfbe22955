"""Google BERT's uncased basic tokenizer, exact on every input and fast (docs/tokenization.md).

The reference walks a line one character at a time and asks `unicodedata` about each one.
Here the character classes are computed once per process from the same `unicodedata`, and the
work is done by whole-string operations that run in C, in the reference's order:

    clean_line     str.translate: drop NUL, U+FFFD, Cc and Cf (but tab, LF, CR); whitespace
                   -> ' '; then re.sub: a space each side of every CJK ideograph. A printable
                   ASCII line is left as it is (nothing in it to drop, map or space).
    (split)        str.split(), the reference's whitespace split
    token_pieces   per whitespace-separated token, as the reference: str.lower(); NFD and the
                   removal of every Mn character (no-ops on ASCII, so skipped there); then
                   re.findall: single punctuation characters and the runs between them

A token's pieces depend on nothing but the token, so callers may cache them (wordpiece.py
does). Equality with the plain statement of the algorithm (tests/tokenization_oracle.py) is
tested on every code point and on random text (tests/unit/test_tokenization.py).
"""

from __future__ import annotations

import re
import sys
import unicodedata
from functools import lru_cache

# The CJK blocks of the reference (section 4 of docs/tokenization.md), inclusive.
CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)
# Every printable ASCII character that is not a letter or digit counts as punctuation.
ASCII_PUNCT = [c for c in range(33, 127) if not chr(c).isalnum()]


class Tables:
    """The per-character facts the tokenizer needs, from this Python's `unicodedata`."""

    def __init__(self) -> None:
        clean: dict[int, str | None] = {0: None, 0xFFFD: None}
        drop_marks: dict[int, None] = {}
        punct = set(ASCII_PUNCT)
        for code in range(sys.maxunicode + 1):
            category = unicodedata.category(chr(code))
            if category in ("Cc", "Cf") and code not in (9, 10, 13):
                clean[code] = None
            elif category == "Zs" or code in (9, 10, 13):
                clean[code] = " "
            elif category == "Mn":
                drop_marks[code] = None
            elif category[0] == "P":
                punct.add(code)
        self.clean = clean
        self.drop_marks = drop_marks
        self.cjk = re.compile(f"[{_char_class(_ranges_codes(CJK_RANGES))}]")
        punct_class = _char_class(sorted(punct))
        # A piece is one punctuation character, or a run of anything but whitespace and
        # punctuation. `\s` is str.isspace(), the set that str.split() splits on.
        self.pieces = re.compile(f"[^\\s{punct_class}]+|[{punct_class}]")
        # The same split for ASCII tokens: a small class that the regex engine tests fast.
        ascii_class = _char_class(ASCII_PUNCT)
        self.ascii_pieces = re.compile(f"[^\\s{ascii_class}]+|[{ascii_class}]")


@lru_cache(maxsize=1)
def tables() -> Tables:
    """Built once per process (about a second), on first use."""
    return Tables()


def clean_line(line: str) -> str:
    """Sections 3-4 of docs/tokenization.md: the text that the whitespace split cuts."""
    if line.isascii() and line.isprintable():
        return line
    t = tables()
    return t.cjk.sub(r" \g<0> ", line.translate(t.clean))


def token_pieces(token: str) -> list[str]:
    """Sections 5-6: one whitespace-separated token -> its words (lower-cased, accents
    stripped, punctuation split off)."""
    token = token.lower()
    t = tables()
    if token.isascii():
        return t.ascii_pieces.findall(token)
    token = unicodedata.normalize("NFD", token).translate(t.drop_marks)
    return t.pieces.findall(token)


def basic_tokens(line: str) -> list[str]:
    """The basic tokenizer's words for one line (sections 2-6)."""
    return [piece for token in clean_line(line).split() for piece in token_pieces(token)]


def _ranges_codes(ranges) -> list[int]:
    return [c for lo, hi in ranges for c in range(lo, hi + 1)]


def _char_class(codes: list[int]) -> str:
    """A regex character class body for sorted code points, as escaped ranges."""
    parts = []
    start = prev = codes[0]
    for code in codes[1:] + [-1]:
        if code == prev + 1:
            prev = code
            continue
        parts.append(
            re.escape(chr(start))
            if start == prev
            else f"{re.escape(chr(start))}-{re.escape(chr(prev))}"
        )
        start = prev = code
    return "".join(parts)
