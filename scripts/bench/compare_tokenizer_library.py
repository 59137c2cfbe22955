#!/usr/bin/env python3
"""How often a tokenizer differs from the reference's algorithm, on the inputs of the tests.

    python scripts/bench/compare_tokenizer_library.py [--out JSON]

Compares token ids with tests/tokenization_oracle.py (docs/tokenization.md) on the inputs of
tests/unit/test_tokenization.py: every code point as a one-character word, every code point inside
a word, and seeded random lines of every Unicode category and of mixed scripts. Two tokenizers:

    library   `tokenizers`' BertWordPieceTokenizer(lowercase=True), what data/prepare used
              before the tokenizer was rewritten (`encode_batch`, no special tokens)
    project   data.prepare.wordpiece (now), which must differ on none

Both use one vocabulary written by this script: the special tokens and the first 16,000
characters (by code point) that the oracle produces for a code point alone, each with its `##`
continuation, so that most differences show as different ids rather than vanishing into
[UNK] (the vocabulary must stay within int16 ids).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from data.prepare.wordpiece import load_tokenizer  # noqa: E402
from bert.submission.system_desc import cpu_model  # noqa: E402
from bert.tools.common import provenance  # noqa: E402
import tokenization_oracle as oracle  # noqa: E402

RANDOM_LINES = 20_000
VOCAB_CHARS = 16_000


def code_points() -> list[int]:
    return [c for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]


def inputs(rng: random.Random) -> dict[str, list[str]]:
    points = code_points()
    any_line = [
        "".join(chr(rng.choice(points)) for _ in range(rng.randint(1, 40)))
        for _ in range(RANDOM_LINES)
    ]
    mixed = []
    for _ in range(RANDOM_LINES):
        words = []
        for _ in range(rng.randint(1, 10)):
            lo, hi = rng.choice(oracle.MIXED_SCRIPTS)
            words.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 10))))
        mixed.append("".join(w + rng.choice(oracle.SEPARATORS) for w in words))
    return {
        "code_point_alone": [chr(c) for c in points],
        "code_point_inside_word": [f"a{chr(c)}b" for c in points],
        "random_any_category": any_line,
        "random_mixed_scripts": mixed,
    }


def write_vocab(folder: Path) -> Path:
    chars = sorted({w for c in code_points() for w in oracle.basic_tokens(chr(c))})
    chars = chars[:VOCAB_CHARS]
    lines = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *(f"##{c}" for c in chars)]
    path = folder / "vocab.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def library_ids(vocab: Path, lines: list[str]) -> list[list[int]]:
    from tokenizers import BertWordPieceTokenizer

    tokenizer = BertWordPieceTokenizer(str(vocab), lowercase=True)
    return [e.ids for e in tokenizer.encode_batch(lines, add_special_tokens=False)]


def project_ids(vocab: Path, lines: list[str]) -> list[list[int]]:
    tokenizer, _ = load_tokenizer(vocab)
    return [tokenizer.encode(line) for line in lines]


def compare(vocab: Path, sets: dict[str, list[str]]) -> dict:
    reference = oracle.Tokenizer(oracle.load_vocab(vocab.read_bytes()))
    result = {}
    for name, lines in sets.items():
        expected = [reference.encode(line) for line in lines]
        row = {"inputs": len(lines)}
        for side, encode in (("library", library_ids), ("project", project_ids)):
            got = encode(vocab, lines)
            bad = [i for i, (a, b) in enumerate(zip(got, expected)) if list(a) != b]
            row[f"{side}_differing"] = len(bad)
            row[f"{side}_examples"] = [ascii(lines[i])[:60] for i in bad[:8]]
        result[name] = row
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--out",
        type=Path,
        default=ROOT / "results" / "bench" / "tokenizer_library_vs_reference.json",
    )
    args = p.parse_args(argv)
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    with tempfile.TemporaryDirectory() as tmp:
        sets = compare(write_vocab(Path(tmp)), inputs(random.Random(args.seed)))
    import tokenizers

    record = {
        **provenance("compare_tokenizer_library", f"cpu ({cpu_model() or 'unknown model'})"),
        "python": platform.python_version(),
        "unicodedata": unicodedata.unidata_version,
        "tokenizers": tokenizers.__version__,
        "sets": sets,
        "library_differing_total": sum(s["library_differing"] for s in sets.values()),
        "project_differing_total": sum(s["project_differing"] for s in sets.values()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2, ensure_ascii=True) + "\n")
    for name, row in sets.items():
        print(
            f"{name:24s} {row['inputs']:8d} inputs: library differs on "
            f"{row['library_differing']}, project on {row['project_differing']}"
        )
    print(f"wrote {args.out}")
    return 0 if record["project_differing_total"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
