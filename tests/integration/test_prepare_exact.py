"""`prepare_data.py examples` end to end against the reference's algorithm: text -> shards ->
the samples read back equal what the oracle tokenizer (tests/tokenization_oracle.py) and the
reference's instance rules make; the output depends on nothing but the text, the vocabulary
and the parameters; bad input ends in one error line with exit status 2.
"""

from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

import reference_instances as reference
import reference_writer
import tokenization_oracle as oracle
from data.prepare.create_examples import create_examples
from data.prepare.fixed import read_fixed
from data.prepare.instances import ExampleParams, create_instances
from data.prepare.parallel import StepRun
from data.prepare.wordpiece import Vocab
from data.sources.shards import DataError
from reference_writer import padded_features

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "prepare_data.py"
MAX_LEN, MAX_PRED = 64, 10
PARAMS = ExampleParams(max_seq_length=MAX_LEN, max_predictions=MAX_PRED, dupe_factor=2)
# Words of several scripts, with accents, CJK, punctuation, controls and odd spaces.
LEXICON = [
    "The",
    "café",
    "ÉCOLE",
    "naïve",
    "Straße",
    "İstanbul",
    "ΟΔΟΣ",
    "λόγος",
    "Москва",
    "東京",
    "北京大学",
    "한국어",
    "ひらがな",
    "カタカナ",
    "العربية",
    "हिन्दी",
    "ﬁne",
    "don't",
    "e.g.",
    "(1984)",
    "x\u200by",
    "a\u0301b",
    "50%",
    "—",
    "“quoted”",
    "🙂",
    "tab\there",
    "nbsp\u00a0in",
    "line\u2028sep",
    "\u3000wide",
    "ǅemal",
    "x" * 205,
]


def write_corpus(path: Path, seed: int, docs: int) -> Path:
    rng = random.Random(seed)
    lines = []
    for _ in range(docs):
        for _ in range(rng.randint(1, 8)):
            lines.append(" ".join(rng.choice(LEXICON) for _ in range(rng.randint(2, 14))))
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_vocab(path: Path, text: Path) -> Path:
    """Whole words of the text, its characters and their continuations, minus a few words so
    that WordPiece has to split and sometimes gives [UNK]."""
    words = sorted(
        {
            w
            for line in text.read_text(encoding="utf-8").splitlines()
            for w in oracle.basic_tokens(line)
        }
    )
    chars = sorted({c for w in words for c in w} - {"ş", "ק"})
    kept = [w for w in words if len(w) > 1 and hash(w) % 3 and len(w) < 50]
    lines = [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        *chars,
        *(f"##{c}" for c in chars),
        *(w for w in kept if w not in chars),
    ]
    path.write_text("\n".join(dict.fromkeys(lines)) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("exact")
    texts = [write_corpus(folder / f"part-{i:05d}-of-00002", i, 40) for i in range(2)]
    return texts, write_vocab(folder / "vocab.txt", texts[0])


def reference_rows(
    text: Path, vocab_file: Path, params: ExampleParams, rng: random.Random | None = None
) -> dict[str, np.ndarray]:
    """The reference's padded feature lists for `text`, stacked: its tokenizer (the oracle),
    its instance rules on token strings (tests/reference_instances.py), its writer's lists."""
    ids = oracle.load_vocab(vocab_file.read_bytes())
    docs = oracle.token_documents(text.read_bytes(), oracle.Tokenizer(ids))
    rng = rng or random.Random(params.random_seed)
    instances = reference.create_instances(docs, params, list(ids), rng)
    rows = [
        padded_features(inst, ids, params.max_seq_length, params.max_predictions)
        for inst in instances
    ]
    return {name: np.array([row[name] for row in rows]) for name in rows[0]}


def assert_same_as_oracle(output: Path, text: Path, vocab_file: Path, params: ExampleParams):
    expected = reference_rows(text, vocab_file, params)
    with h5py.File(output, "r") as f:
        assert sorted(f) == sorted(set(expected) - {"masked_lm_weights"})
        for name in f:
            np.testing.assert_array_equal(
                f[name][:], expected[name].reshape(f[name].shape), err_msg=name
            )
    samples = read_fixed(output, params.max_seq_length, params.max_predictions)
    assert len(samples) == len(expected["input_ids"])


def run_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "examples", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


# stderr also carries a step's disk estimate and its progress lines (data/prepare/progress.py)
PROGRESS_LINE = re.compile(r"^[a-z-]+( [a-z]+)?: (will write about |\d+/\d+ files, )")


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.strip().splitlines() if not PROGRESS_LINE.match(line)]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def no_temporaries(folder: Path) -> bool:
    return not list(folder.rglob(".*.tmp"))


# -- the instances, draw for draw ------------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        PARAMS,
        # Short targets, heavy truncation and few predictions: every branch of the rules.
        ExampleParams(
            max_seq_length=12,
            max_predictions=3,
            short_seq_prob=0.6,
            dupe_factor=3,
            masked_lm_prob=0.3,
            random_seed=5,
        ),
    ],
    ids=["mlperf-like", "short"],
)
def test_instances_equal_the_reference_draw_for_draw(corpus, params):
    """data.prepare.instances (compiled, on ids) against the reference's rules (Python lists
    of token strings): every padded row, and the generator left in the same state."""
    texts, vocab_file = corpus
    ids = oracle.load_vocab(vocab_file.read_bytes())
    docs = oracle.documents(texts[0].read_bytes(), oracle.Tokenizer(ids))
    documents = [[np.asarray(s, dtype=np.int32) for s in doc] for doc in docs]
    vocab = Vocab(len(ids), ids["[CLS]"], ids["[SEP]"], ids["[MASK]"])
    rng = random.Random(params.random_seed)
    instances = create_instances(documents, params, vocab, rng)
    reference_rng = random.Random(params.random_seed)
    expected = reference_rows(texts[0], vocab_file, params, reference_rng)
    got = instances.padded(0, len(instances), params.max_seq_length, params.max_predictions)
    assert len(instances) == len(expected["input_ids"]) > 100
    for name, values in got.items():
        np.testing.assert_array_equal(
            values.astype(np.int64).reshape(-1), expected[name].reshape(-1), err_msg=name
        )
    assert rng.getstate() == reference_rng.getstate()


def test_reference_records_read_back_as_written(corpus, tmp_path):
    """The benchmark's reference writer (one Example record per instance) loses nothing, and
    its reader catches a damaged record."""
    texts, vocab_file = corpus
    ids = oracle.load_vocab(vocab_file.read_bytes())
    docs = oracle.token_documents(texts[1].read_bytes(), oracle.Tokenizer(ids))
    instances = reference.create_instances(docs, PARAMS, list(ids), random.Random(1))
    path = tmp_path / "reference.tfrecord"
    assert reference_writer.write_instances(path, instances, ids, MAX_LEN, MAX_PRED) == len(
        instances
    )
    codec = reference_writer.ExampleCodec()
    parsed = [codec.parse(data) for data in reference_writer.read_records(path)]
    assert parsed == [padded_features(inst, ids, MAX_LEN, MAX_PRED) for inst in instances]
    damaged = bytearray(path.read_bytes())
    damaged[40] ^= 1
    path.write_bytes(bytes(damaged))
    with pytest.raises(ValueError, match="checksum"):
        list(reference_writer.read_records(path))


# -- the round trip ----------------------------------------------------------------------------


def test_samples_read_back_equal_the_oracle(corpus, tmp_path):
    texts, vocab = corpus
    outputs = create_examples(texts, tmp_path, vocab, PARAMS, run=StepRun(log=lambda *_: None))
    for output, text in zip(outputs, texts):
        assert_same_as_oracle(output, text, vocab, PARAMS)


def test_output_is_byte_identical_across_runs_and_worker_counts(corpus, tmp_path):
    texts, vocab = corpus
    one = create_examples(texts, tmp_path / "one", vocab, PARAMS, run=StepRun(log=lambda *_: None))
    proc = run_script(
        *map(str, texts),
        "--vocab",
        str(vocab),
        "--out",
        str(tmp_path / "two"),
        "--workers",
        "2",
        "--max-seq-length",
        str(MAX_LEN),
        "--max-predictions",
        str(MAX_PRED),
        "--dupe-factor",
        "2",
    )
    assert proc.returncode == 0, proc.stderr
    for path in one:
        assert path.read_bytes() == (tmp_path / "two" / path.name).read_bytes(), path.name


def test_one_enormous_line_is_handled_as_the_reference(corpus, tmp_path):
    """A shard of one line of 100,000 words: one document of one sentence, whose instances
    pair it with itself (the reference's random-next fallback after ten tries)."""
    _, vocab = corpus
    rng = random.Random(7)
    text = tmp_path / "part-00000-of-00001"
    text.write_text(" ".join(rng.choice(LEXICON) for _ in range(100_000)), encoding="utf-8")
    params = ExampleParams(max_seq_length=MAX_LEN, max_predictions=MAX_PRED, dupe_factor=1)
    (output,) = create_examples(
        [text], tmp_path / "out", vocab, params, run=StepRun(log=lambda *_: None)
    )
    assert_same_as_oracle(output, text, vocab, params)


# -- bad input ------------------------------------------------------------------------------------


def test_non_utf8_shard_is_one_error_and_the_other_shards_complete(corpus, tmp_path):
    texts, vocab = corpus
    bad = tmp_path / "part-00001-of-00002"
    bad.write_bytes(b"fine line\nbroken \xff\xfe line\n")
    out = tmp_path / "out"
    proc = run_script(
        str(texts[0]),
        str(bad),
        "--vocab",
        str(vocab),
        "--out",
        str(out),
        "--workers",
        "2",
        "--max-seq-length",
        str(MAX_LEN),
    )
    line = one_error_line(proc)
    assert "part-00001-of-00002: text shard is not UTF-8 text (line 2" in line
    assert sorted(p.name for p in out.iterdir()) == ["part-00000-of-00002.hdf5"]
    assert_same_as_oracle(
        out / "part-00000-of-00002.hdf5", texts[0], vocab, ExampleParams(max_seq_length=MAX_LEN)
    )
    assert no_temporaries(tmp_path)


def test_empty_shard_is_one_error(corpus, tmp_path):
    text = tmp_path / "part-00000-of-00001"
    text.write_bytes(b"")
    out = tmp_path / "out"
    line = one_error_line(run_script(str(text), "--vocab", str(corpus[1]), "--out", str(out)))
    assert "part-00000-of-00001: no sentences" in line
    assert not list(out.iterdir()) and no_temporaries(tmp_path)


@pytest.mark.parametrize("content", [b"\n\n  \n", b"\xe2\x80\x8b\n\x00\n\xef\xbf\xbd\n"])
def test_shard_of_nothing_to_tokenize_is_refused(corpus, tmp_path, content):
    """Blank lines only, or lines that clean to nothing (U+200B, NUL, U+FFFD)."""
    text = tmp_path / "part-00000-of-00001"
    text.write_bytes(content)
    with pytest.raises(DataError, match="no sentences"):
        create_examples(
            [text], tmp_path / "out", corpus[1], PARAMS, run=StepRun(log=lambda *_: None)
        )
    assert not list((tmp_path / "out").iterdir()) and no_temporaries(tmp_path)


def test_vocabulary_without_special_tokens_is_one_error(corpus, tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[CLS]\n[SEP]\n[MASK]\nthe\n", encoding="utf-8")
    out = tmp_path / "out"
    line = one_error_line(run_script(str(corpus[0][0]), "--vocab", str(vocab), "--out", str(out)))
    assert "vocab.txt: vocabulary has no [UNK] token" in line
    assert not out.exists()
