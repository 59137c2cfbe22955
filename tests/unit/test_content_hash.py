"""The content hash of prepared data (data/prepare/content_hash.py), NVIDIA's hdf5_md5 method.

The method's bytes are spelled out here by hand for a small file (the oracle); the prepared set
comes from `prepare_data.py all` on the data-prep tests' small corpus (tests/prepare_corpus.py),
with 1 worker process; the slow-marked test adds a preparation with 2 and compares.
NVIDIA's published eval value (REFERENCE 8) needs the real data: only the comparison logic is
tested here.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from data.prepare import content_hash as ch
from data.sources.shards import DataError

from commands import run_python
from prepare_corpus import SCRIPT, all_args, write_corpus


def write_vlen(path: Path, rows: list[list[int]], dtype=np.int16) -> Path:
    column = np.empty(len(rows), dtype=object)
    column[:] = [np.asarray(row, dtype=dtype) for row in rows]
    with h5py.File(path, "w") as f:
        f.create_dataset("input_ids", data=column, dtype=h5py.vlen_dtype(dtype))
    return path


def md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def test_the_method_byte_for_byte(tmp_path):
    rows = [[101, 7, 102], [], [101, 30521, 102]]
    a, b, c = md5("[101, 7, 102]"), md5("[]"), md5("[101, 30521, 102]")
    expected = md5(f"['{a}', '{b}', '{c}']")
    assert ch.content_hash(write_vlen(tmp_path / "x.hdf5", rows)) == expected
    # Only the ids and their order count: not the file's name or integer dtype.
    assert ch.content_hash(write_vlen(tmp_path / "y.hdf5", rows, np.int32)) == expected
    assert ch.content_hash(write_vlen(tmp_path / "z.hdf5", rows[::-1])) != expected


def test_files_it_cannot_hash_are_one_clear_error(tmp_path, capsys):
    with h5py.File(tmp_path / "fixed.hdf5", "w") as f:
        f["input_ids"] = np.zeros((2, 8), np.int16)
    with pytest.raises(DataError, match="variable-length format"):
        ch.content_hash(tmp_path / "fixed.hdf5")
    (tmp_path / "text.hdf5").write_text("not hdf5")
    for name in ("missing.hdf5", "text.hdf5"):
        assert ch.main([str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {tmp_path / name}") and err.count("\n") == 1


@pytest.fixture(scope="module")
def prepare(tmp_path_factory):
    """prepare(workers) -> OUT of `prepare_data.py all` on one small corpus (made once each)."""
    corpus = tmp_path_factory.mktemp("corpus")
    texts = write_corpus(corpus)
    made: dict[int, Path] = {}

    def run(workers: int) -> Path:
        if workers not in made:
            out = corpus / f"out_{workers}"
            proc = run_python(SCRIPT, *all_args(texts, out, "--workers", str(workers)), timeout=300)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            made[workers] = out
        return made[workers]

    return run


def recorded(out: Path) -> tuple[list[str], list[str]]:
    """(names, hashes) from OUT/content_md5.chk, written by record_content_hashes."""
    report = ch.record_content_hashes(out, out / "eval" / "eval_50.hdf5", workers=2)
    assert "5 files" in report and "not compared" in report  # 50 samples, not 10,000
    rows = [line.split("\t") for line in (out / ch.CHECK_FILE).read_text().splitlines()]
    return [name for name, _ in rows], [digest for _, digest in rows]


def test_stable_across_hash_workers_and_runs(prepare):
    out = prepare(1)
    names, digests = recorded(out)
    assert names == ["eval/eval_50.hdf5"] + [f"train/part_{i:05d}_of_00004.hdf5" for i in range(4)]
    assert len(set(digests)) == 5  # distinct files, distinct hashes
    files = [out / n for n in names]
    assert ch.content_hashes(files, workers=1) == digests
    assert recorded(out) == (names, digests)  # a second run


@pytest.mark.slow
def test_stable_across_preparation_workers(prepare):
    assert recorded(prepare(2)) == recorded(prepare(1))


def test_a_single_changed_token_changes_the_hash(prepare, tmp_path):
    changed = tmp_path / "eval.hdf5"
    shutil.copy(prepare(1) / "eval" / "eval_50.hdf5", changed)
    before = ch.content_hash(changed)
    with h5py.File(changed, "r+") as f:
        row = f["input_ids"][17].copy()
        row[5] = row[5] + 1 if row[5] < 700 else row[5] - 1
        f["input_ids"][17] = row
    after = ch.content_hash(changed)
    assert after != before
    with h5py.File(changed, "r+") as f:  # the labels of masking are outside the method
        f["masked_lm_ids"][17] = f["masked_lm_ids"][17] + 1
        f["next_sentence_labels"][17] = 1 - f["next_sentence_labels"][17]
    assert ch.content_hash(changed) == after


def test_the_eval_verdict_against_the_published_value(tmp_path, monkeypatch, capsys):
    eval_file = write_vlen(tmp_path / "eval.hdf5", [[101, i % 700, 102] for i in range(10_000)])
    digest = ch.content_hash(eval_file)
    assert ch.eval_verdict(eval_file, digest).startswith("DIFFERS from " + ch.NVIDIA_EVAL_MD5)
    assert ch.main([str(eval_file), "--expect", "nvidia-eval"]) == 1
    assert capsys.readouterr().err.count("\n") == 1
    monkeypatch.setattr(ch, "NVIDIA_EVAL_MD5", digest)
    assert ch.eval_verdict(eval_file, digest).startswith("matches")
    assert ch.main([str(eval_file), "--expect", "nvidia-eval"]) == 0
    assert ch.main([str(eval_file), "--expect", digest.upper()]) == 0
    assert ch.main([str(eval_file), "--expect", "12ab"]) == 2
    assert ch.main([str(eval_file), str(eval_file), "--expect", digest]) == 2
