"""The small corpus the data-prep tests prepare, and the prepare commands they run on it.

- `write_corpus(folder)`: 3 training text shards of random English-like words, an eval text and
  a WordPiece vocabulary trained on them in-process with `tokenizers`;
- `all_args(corpus, out, *extra)`: `prepare_data.py all`'s arguments for it (NUM_SHARDS shards
  of MAX_LEN tokens, EVAL_COUNT eval samples, dupe factor 3), `extra` appended;
- `reshard_quietly(inputs, out, **changed)`: data.prepare.reshard of its examples into
  NUM_SHARDS shards of one bucket each, without log lines.

Used by tests/integration/test_prepare.py, test_prepare_resume.py and
tests/unit/test_content_hash.py.
"""

from __future__ import annotations

import random
from pathlib import Path

from data.prepare.parallel import StepRun
from data.prepare.reshard import reshard

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "prepare_data.py"
MAX_LEN, MAX_PRED = 128, 20
NUM_SHARDS, EVAL_COUNT = 4, 50
SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "ta",
    "sho",
    "ven",
    "dal",
    "pri",
    "ost",
    "el",
    "an",
    "gr",
    "th",
    "qu",
    "ex",
    "bo",
    "fin",
    "ul",
]


def write_corpus(folder: Path) -> tuple[list[Path], Path, Path]:
    """3 training text shards, an eval text and a vocab trained on them."""
    from tokenizers import BertWordPieceTokenizer

    rng = random.Random(0)
    words = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(500)]

    def sentence() -> str:
        body = " ".join(rng.choice(words) for _ in range(rng.randint(3, 16)))
        return body.capitalize() + rng.choice([".", "!", "?", ", indeed."])

    def shard(path: Path, docs: int) -> Path:
        lines = []
        for _ in range(docs):
            lines += [sentence() for _ in range(rng.randint(1, 14))] + [""]
        path.write_text("\n".join(lines) + "\n")
        return path

    (folder / "text").mkdir()
    texts = [shard(folder / "text" / f"part-{i:05d}-of-00003", 40) for i in range(3)]
    eval_text = shard(folder / "eval.txt", 30)
    tokenizer = BertWordPieceTokenizer(lowercase=True)
    corpus = [line for t in texts for line in t.read_text().splitlines() if line]
    tokenizer.train_from_iterator(corpus, vocab_size=800, min_frequency=1, show_progress=False)
    tokenizer.save_model(str(folder))
    return texts, eval_text, folder / "vocab.txt"


def all_args(corpus, out: Path, *extra: str) -> list[str]:
    """`prepare_data.py all` on `corpus` (write_corpus's texts and vocab) into `out`."""
    texts, eval_text, vocab = corpus
    return [
        "all",
        "--train-text",
        str(texts[0].parent),
        "--eval-text",
        str(eval_text),
        "--vocab",
        str(vocab),
        "--out",
        str(out),
        "--num-shards",
        str(NUM_SHARDS),
        "--eval-samples",
        str(EVAL_COUNT),
        "--max-seq-length",
        str(MAX_LEN),
        "--max-predictions",
        str(MAX_PRED),
        "--dupe-factor",
        "3",
        *extra,
    ]


def reshard_quietly(inputs, out: Path, show_progress: bool = True, **changed) -> list[Path]:
    """`inputs` resharded into NUM_SHARDS shards at the corpus's shape, one shard per bucket
    unless `changed` says otherwise, without log lines."""
    settings = dict(shards_per_bucket=1, max_seq_length=MAX_LEN, max_predictions=MAX_PRED)
    run = StepRun(log=lambda *_: None, show_progress=show_progress)
    return reshard(inputs, out, NUM_SHARDS, **{**settings, **changed}, run=run)
