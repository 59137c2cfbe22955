"""The production tokenizer and reader (data/prepare) equal the reference's algorithm on every
input: every code point, random text of every Unicode category, the word-length limit, the
reader's bytes. The oracle is tests/tokenization_oracle.py, a plain statement of
docs/tokenization.md.
"""

from __future__ import annotations

import sys
import unicodedata
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tokenization_oracle as oracle
from data.prepare.bert_text import basic_tokens
from data.prepare.wordpiece import load_tokenizer, read_documents, split_lines
from data.sources.shards import DataError

BLOCK = 8192  # code points per compared line
# Letters whose processed length differs from their own: NFD expands (Hangul, é), lower()
# expands (U+0130), marks vanish (U+0301), ligatures stay (U+FB01), sigma depends on context.
TRICKY = "aeiouzAÉé한İßﬁΣσςΑΩω\u0301\u0345\u0344ǅǄКк"
WORDS = ("the", "un", "##aff", "##able", "##ing", "hello", "world", "caf", "σας")
SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def vocab_lines() -> list[str]:
    """Specials, single characters and their continuations (so most words are not [UNK] and
    the 200-character limit decides), a few whole words."""
    chars = sorted(
        set(
            "abcdefghijklmnopqrstuvwxyz0123456789.,!?'-#$"
            + "".join(oracle.basic_tokens(" ".join(TRICKY)))
        )
    )
    return [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        *chars,
        *(f"##{c}" for c in chars),
        *WORDS,
    ]


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(vocab_lines()) + "\n", encoding="utf-8")
    production, _ = load_tokenizer(path)
    return production, oracle.Tokenizer(oracle.load_vocab(path.read_bytes()))


def code_points() -> list[int]:
    """Every code point a UTF-8 text can hold (all but the surrogates)."""
    return [c for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]


def first_difference(words: list[str]) -> str | None:
    """The first word whose basic tokens differ, to name it in a failure."""
    for word in words:
        if basic_tokens(word) != oracle.basic_tokens(word):
            return (
                f"{word!r} (U+{ord(word[len(word) // 2]):04X}): {basic_tokens(word)} vs "
                f"{oracle.basic_tokens(word)}"
            )
    return None


# -- every code point ------------------------------------------------------------------------------


def in_word_points(points: list[int]) -> list[int]:
    """The code points tested inside words: all but the unassigned and private-use ones (a
    million code points of two classes that behave alike), and every 97th of those."""
    return [
        c
        for i, c in enumerate(points)
        if unicodedata.category(chr(c)) not in ("Cn", "Co") or i % 97 == 0
    ]


def test_every_code_point_as_a_word(tokenizers):
    production, reference = tokenizers
    points = code_points()
    for start in range(0, len(points), BLOCK):
        chars = [chr(c) for c in points[start : start + BLOCK]]
        line = " ".join(chars)
        expected = oracle.basic_tokens(line)
        assert basic_tokens(line) == expected, first_difference(chars)
        assert production.encode(line) == reference.ids(expected), chars[0]


def test_code_points_inside_words_and_at_word_ends():
    """After a letter, inside a word, after a capital sigma (whose lower case depends on what
    follows it) and at the word's end."""
    points = in_word_points(code_points())
    for start in range(0, len(points), BLOCK):
        words = [f"a{chr(c)}Σ{chr(c)}" for c in points[start : start + BLOCK]]
        line = " ".join(words)
        assert basic_tokens(line) == oracle.basic_tokens(line), first_difference(words)


def test_every_whitespace_and_control_character_between_words():
    """The characters the cleaning drops or turns into spaces, and Python's own whitespace
    (which the split also cuts on), between words and between sigmas."""
    special = [
        chr(c)
        for c in code_points()
        if chr(c).isspace() or unicodedata.category(chr(c)) in ("Cc", "Cf", "Zs", "Zl", "Zp")
    ]
    for char in special:
        for text in (f"ab{char}cd", f"AΣ{char}Σb", f"{char}x{char}", f"é{char}\u0301e"):
            assert basic_tokens(text) == oracle.basic_tokens(text), repr(text)


# -- random text ----------------------------------------------------------------------------------

any_char = st.characters(blacklist_categories=("Cs",))
# the bench's scripts, and one beyond the Basic Multilingual Plane
scripts = st.sampled_from([*oracle.MIXED_SCRIPTS, (0x20000, 0x20100)])


@st.composite
def mixed_script_text(draw) -> str:
    words = []
    for _ in range(draw(st.integers(0, 12))):
        lo, hi = draw(scripts)
        words.append(
            draw(
                st.text(st.characters(min_codepoint=lo, max_codepoint=hi), min_size=1, max_size=12)
            )
        )
    seps = st.sampled_from(oracle.SEPARATORS)
    return "".join(w + draw(seps) for w in words)


@st.composite
def long_words(draw) -> str:
    """Words of 190-215 characters before processing, of letters whose length changes."""
    unit = draw(st.text(st.sampled_from(TRICKY + "abc"), min_size=1, max_size=3))
    size = draw(st.integers(190, 215))
    return (unit * size)[:size] + draw(st.sampled_from(["", ".", "!x", "\u0301"]))


@SETTINGS
@given(st.text(any_char, max_size=80))
def test_random_text_of_every_category(tokenizers, text):
    production, reference = tokenizers
    assert basic_tokens(text) == oracle.basic_tokens(text)
    assert production.encode(text) == reference.encode(text)


@SETTINGS
@given(mixed_script_text())
def test_mixed_scripts_and_separators(tokenizers, text):
    production, reference = tokenizers
    assert production.encode(text) == reference.encode(text)


@SETTINGS
@given(st.lists(long_words(), min_size=1, max_size=3))
def test_words_around_the_length_limit(tokenizers, words):
    """The limit counts characters after lower-casing and accent stripping (NFD can make a
    Hangul syllable three characters)."""
    production, reference = tokenizers
    text = " ".join(words)
    assert production.encode(text) == reference.encode(text)


@SETTINGS
@given(
    st.text(
        st.sampled_from(TRICKY + "\u0300\u0308\u20dd\u0488\u200d\u00ad\ufeff\u0007 .-"), max_size=60
    )
)
def test_combining_marks_control_and_format_characters(tokenizers, text):
    production, reference = tokenizers
    assert production.encode(text) == reference.encode(text)


def test_limit_is_exactly_200_processed_characters(tokenizers):
    production, reference = tokenizers
    unk = reference.vocab["[UNK]"]
    assert production.encode("a" * 200) != [unk]
    assert production.encode("a" * 201) == [unk]
    # 67 Hangul syllables are 201 jamo after NFD: over the limit, as the reference counts.
    assert reference.encode("한" * 67) == production.encode("한" * 67) == [unk]
    # 200 accented letters are 200 letters once the marks are gone: within it.
    assert production.encode("é" * 200) == reference.encode("é" * 200) != [unk]


# -- the reader and the vocabulary -----------------------------------------------------------------


def documents_both(tmp_path: Path, data: bytes, tokenizers):
    production, reference = tokenizers
    path = tmp_path / "part-00000"
    path.write_bytes(data)
    mine = [[s.tolist() for s in doc] for doc in read_documents(path, production)]
    return mine, oracle.documents(data, reference)


@pytest.mark.parametrize(
    "data",
    [
        b"first line\nsecond\n\nnext doc\n",
        b"carriage\rreturns\r\ninside\rlines\r\n\r\nare dropped\r",
        b"a\n\xe3\x80\x80\nwide space ends a doc\n\xe2\x80\x8b\nzero width does not\nend",
        b"\xef\xbb\xbfbom first\n\x00\x01\n\n\n\nnul line\n",
        b"split utf-8 by \r: caf\xc3\r\xa9\n",  # the reader drops the \r before decoding
        b"",
        b"\n\n\n",
    ],
)
def test_reader_matches_the_reference(tmp_path, tokenizers, data):
    mine, theirs = documents_both(tmp_path, data, tokenizers)
    assert mine == theirs


@SETTINGS
@given(st.binary(max_size=120))
def test_reader_on_random_bytes(tmp_path_factory, tokenizers, data):
    """Valid UTF-8 gives the reference's documents; invalid UTF-8 stops both."""
    tmp_path = tmp_path_factory.mktemp("bytes")
    try:
        expected = oracle.documents(data, tokenizers[1])
    except UnicodeDecodeError:
        with pytest.raises(DataError, match="not UTF-8"):
            documents_both(tmp_path, data, tokenizers)
        return
    assert documents_both(tmp_path, data, tokenizers)[0] == expected


def test_vocabulary_is_read_as_the_reference_reads_it(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes(b"[PAD]\r\n  [UNK] \n[CLS]\n[SEP]\n[MASK]\nab\r\n\t##c\ncaf\xc3\xa9\n")
    production, vocab = load_tokenizer(path)
    assert production.ids == oracle.load_vocab(path.read_bytes())
    assert (vocab.size, vocab.cls_id, vocab.sep_id, vocab.mask_id) == (8, 2, 3, 4)
    # Text loses its accents before the lookup, so an accented vocabulary entry never matches.
    assert production.encode("ABc café") == [5, 6, 1]


@pytest.mark.parametrize(
    "content, message",
    [
        (b"[PAD]\n[CLS]\n[SEP]\n[MASK]\n", "no [UNK] token"),
        (b"[UNK]\n[CLS]\n[SEP]\n", "no [MASK] token"),
        (b"[UNK]\n[CLS]\n[SEP]\n[MASK]\nab\nab\n", "line 6 repeats token 'ab' of line 5"),
        (b"[UNK]\n[CLS]\n[SEP]\n[MASK]\n\xff\n", "not UTF-8 text (line 5"),
        (b"", "no [UNK] token"),
    ],
)
def test_bad_vocabulary_is_one_clear_error(tmp_path, content, message):
    path = tmp_path / "vocab.txt"
    path.write_bytes(content)
    with pytest.raises(DataError, match=message.replace("[", r"\[").replace("(", r"\(")):
        load_tokenizer(path)


def test_split_lines_names_the_bad_line(tmp_path):
    with pytest.raises(DataError, match=r"line 3: b'\\xc3\(a"):
        split_lines(b"one\ntwo\n\xc3(a\n", tmp_path / "t", "text shard")
