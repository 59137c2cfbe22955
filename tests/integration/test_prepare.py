"""Data preparation end to end on a small local corpus (no download): text -> examples ->
reshard -> eval pick -> checksums -> distinct check, plus the properties each step promises.

The corpus is random English-like words written by the test; the WordPiece vocabulary is
trained from it in-process with `tokenizers`. Rules checked come from REFERENCE 2 (masking
0.15 with 80/10/10, NSP pairs, eval pick idx = int(i * N / count), the identical-shard trap).
"""

from __future__ import annotations

import collections
import shutil
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest

from data.prepare.checksums import verify_manifest, write_manifest
from data.prepare.create_examples import create_examples
from data.prepare.distinct import samples_digest
from data.prepare.eval_pick import pick_indices
from data.prepare.fixed import read_fixed
from data.prepare.instances import ExampleParams
from data.prepare.parallel import StepRun
from data.prepare.to_varlen import to_varlen
from data.prepare.wordpiece import load_tokenizer
from data.sources.shards import DataError, read_samples

from commands import run_python
from prepare_corpus import (
    EVAL_COUNT,
    MAX_LEN,
    MAX_PRED,
    NUM_SHARDS,
    SCRIPT,
    all_args,
    reshard_quietly,
    write_corpus,
)

PARAMS = ExampleParams(max_seq_length=MAX_LEN, max_predictions=MAX_PRED, dupe_factor=3)


def run_script(*args: str) -> subprocess.CompletedProcess:
    return run_python(SCRIPT, *args, timeout=300)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def prepared(corpus, tmp_path_factory) -> Path:
    """`prepare_data.py all` once, with 2 worker processes."""
    out = tmp_path_factory.mktemp("prepared")
    proc = run_script(*all_args(corpus, out, "--workers", "2"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def fixed_train(out: Path) -> list:
    return [
        s
        for p in sorted((out / "intermediate" / "train").glob("*.hdf5"))
        for s in read_fixed(p, MAX_LEN, MAX_PRED)
    ]


def shards(out: Path) -> list[Path]:
    return sorted((out / "train").glob("part_*.hdf5"))


def digests(samples) -> collections.Counter:
    return collections.Counter(samples_digest([s]) for s in samples)


# -- the end-to-end output ---------------------------------------------------------------------


def test_all_writes_valid_shards_and_eval(prepared):
    files = shards(prepared)
    assert [p.name for p in files] == [
        f"part_{j:05d}_of_{NUM_SHARDS:05d}.hdf5" for j in range(NUM_SHARDS)
    ]
    sizes = [len(read_samples(p, MAX_LEN, MAX_PRED)) for p in files]  # validates every field
    assert max(sizes) - min(sizes) <= 1  # the reshard balances exactly
    assert (
        len(read_samples(prepared / "eval" / f"eval_{EVAL_COUNT}.hdf5", MAX_LEN, MAX_PRED))
        == EVAL_COUNT
    )
    assert verify_manifest(prepared) == []
    assert not list(prepared.rglob(".*tmp"))  # nothing half-written left behind


def test_masking_follows_bert_rules(prepared, corpus):
    _, vocab = load_tokenizer(corpus[2])
    outcome = collections.Counter()
    for s in fixed_train(prepared):
        length = len(s.input_ids)
        expected = min(MAX_PRED, max(1, round(0.15 * length)))
        assert len(s.masked_positions) == expected
        assert np.all(np.diff(s.masked_positions) > 0)
        assert not np.isin(s.masked_ids, [vocab.cls_id, vocab.sep_id]).any()
        shown = s.input_ids[s.masked_positions]
        outcome["mask"] += int((shown == vocab.mask_id).sum())
        outcome["kept"] += int((shown == s.masked_ids).sum())
        outcome["total"] += len(shown)
    # 80% [MASK], 10% unchanged (+ random draws that hit the same id), 10% random.
    assert 0.77 < outcome["mask"] / outcome["total"] < 0.83
    assert 0.08 < outcome["kept"] / outcome["total"] < 0.12


def test_pairs_and_next_sentence_balance(prepared, corpus):
    _, vocab = load_tokenizer(corpus[2])
    samples = fixed_train(prepared)
    for s in samples:
        ids, seg = s.input_ids.copy(), s.segment_ids
        ids[s.masked_positions] = s.masked_ids  # undo masking
        len_a = int((seg == 0).sum()) - 2
        assert ids[0] == vocab.cls_id and ids[len_a + 1] == vocab.sep_id
        assert ids[-1] == vocab.sep_id and len_a >= 1 and seg[-1] == 1
        assert np.all(np.diff(seg) >= 0)  # 0...0 1...1
    random_next = np.mean([s.nsp_label for s in samples])
    # 50% random next, plus the one-segment chunks that are always random (reference rule).
    assert 0.45 < random_next < 0.7


def test_reshard_keeps_every_sample_and_mixes_inputs(prepared):
    inputs = sorted((prepared / "intermediate" / "train").glob("*.hdf5"))
    per_input = [digests(read_fixed(p, MAX_LEN, MAX_PRED)) for p in inputs]
    out = [digests(read_samples(p, MAX_LEN, MAX_PRED)) for p in shards(prepared)]
    assert sum(out, collections.Counter()) == sum(per_input, collections.Counter())
    for shard in out:  # every output draws from every input
        assert all(shard & source for source in per_input)


def test_reshard_is_independent_of_buckets_workers_and_resumes(prepared, tmp_path):
    inputs = sorted((prepared / "intermediate" / "train").glob("*.hdf5"))
    other = reshard_quietly(inputs, tmp_path / "b1")
    for mine, theirs in zip(other, shards(prepared)):
        assert samples_digest(read_samples(mine, MAX_LEN, MAX_PRED)) == samples_digest(
            read_samples(theirs, MAX_LEN, MAX_PRED)
        )
    # An interrupted run: one output and the completion record missing; a rerun restores it.
    before = samples_digest(read_samples(other[2], MAX_LEN, MAX_PRED))
    other[2].unlink()
    (tmp_path / "b1" / "reshard.json").unlink()
    reshard_quietly(inputs, tmp_path / "b1")
    assert samples_digest(read_samples(other[2], MAX_LEN, MAX_PRED)) == before
    with pytest.raises(DataError, match="other inputs or parameters"):
        reshard_quietly(inputs, tmp_path / "b1", seed=7, shards_per_bucket=32)


def test_eval_pick_is_even(prepared):
    source = read_fixed(prepared / "intermediate" / "eval" / "eval.hdf5", MAX_LEN, MAX_PRED)
    picked = read_samples(prepared / "eval" / f"eval_{EVAL_COUNT}.hdf5", MAX_LEN, MAX_PRED)
    n = len(source)
    for i, sample in enumerate(picked):
        assert samples_digest([sample]) == samples_digest([source[int(i * n / EVAL_COUNT)]])


def test_pick_indices_formula():
    n = 1_234_567  # REFERENCE 2: idx = int(i * N / 10000)
    idx = pick_indices(n)
    assert len(idx) == 10_000 and idx[0] == 0 and idx[1] == 123 and idx[-1] == 1_234_443
    assert all(b > a for a, b in zip(idx, idx[1:]))
    with pytest.raises(DataError):
        pick_indices(10, 11)


# -- checks that guard the data ------------------------------------------------------------------


def test_checksums_detect_corruption_missing_and_stray_files(prepared, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(prepared / "train", data / "train")
    write_manifest(data, ["train/*.hdf5"])
    assert run_script("checksums", str(data), "--verify").returncode == 0
    victim = data / "train" / "part_00001_of_00004.hdf5"
    raw = bytearray(victim.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    victim.write_bytes(bytes(raw))
    (data / "train" / "part_00002_of_00004.hdf5").unlink()
    shutil.copy(victim, data / "train" / "part_00009_of_00010.hdf5")
    proc = run_script("checksums", str(data), "--verify")
    assert proc.returncode == 1
    assert "part_00001_of_00004.hdf5: sha256" in proc.stdout
    assert "part_00002_of_00004.hdf5: missing" in proc.stdout
    assert "part_00009_of_00010.hdf5: not in the manifest" in proc.stdout


def test_write_checksums_keeps_an_existing_manifest_without_force(prepared, tmp_path):
    """The manifest records the data as prepared: rewriting it over a corrupted shard would
    bless the corruption, so --write-checksums refuses an existing one without --force."""
    data = tmp_path / "data"
    shutil.copytree(prepared / "train", data / "train")
    assert run_script("checksums", str(data), "--write-checksums").returncode == 0
    manifest = (data / "SHA256SUMS").read_text()
    victim = data / "train" / "part_00001_of_00004.hdf5"
    victim.write_bytes(victim.read_bytes()[:-1] + b"x")
    proc = run_script("checksums", str(data), "--write-checksums")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("error: ") and len(proc.stderr.strip().splitlines()) == 1
    assert "already exists" in proc.stderr and "--force" in proc.stderr
    assert (data / "SHA256SUMS").read_text() == manifest
    assert run_script("checksums", str(data), "--verify").returncode == 1  # still caught
    assert run_script("checksums", str(data), "--write-checksums", "--force").returncode == 0
    assert (data / "SHA256SUMS").read_text() != manifest


def test_duplicate_shards_are_detected(prepared, tmp_path):
    assert (
        run_script(
            "check-distinct",
            str(prepared / "train"),
            "--max-seq-length",
            str(MAX_LEN),
            "--max-predictions",
            str(MAX_PRED),
        ).returncode
        == 0
    )
    copy = tmp_path / "train"
    shutil.copytree(prepared / "train", copy)
    shutil.copy(copy / "part_00000_of_00004.hdf5", copy / "part_00003_of_00004.hdf5")
    proc = run_script(
        "check-distinct",
        str(copy),
        "--max-seq-length",
        str(MAX_LEN),
        "--max-predictions",
        str(MAX_PRED),
    )
    assert proc.returncode == 1
    assert "part_00000_of_00004.hdf5" in proc.stdout and "part_00003_of_00004.hdf5" in proc.stdout
    assert "0.62" in proc.stderr


# -- single steps ---------------------------------------------------------------------------------


def test_examples_are_deterministic_and_resumable(prepared, corpus, tmp_path):
    texts, _, vocab = corpus
    (made,) = create_examples([texts[1]], tmp_path, vocab, PARAMS, run=StepRun(log=lambda *_: None))
    theirs = prepared / "intermediate" / "train" / made.name
    with h5py.File(made) as a, h5py.File(theirs) as b:  # same seed, other process: same data
        for name in a:
            np.testing.assert_array_equal(a[name][:], b[name][:], err_msg=name)
    stamp = made.stat().st_mtime_ns
    create_examples([texts[1]], tmp_path, vocab, PARAMS, run=StepRun(log=lambda *_: None))
    assert made.stat().st_mtime_ns == stamp  # existing output skipped


def test_to_varlen_round_trip(prepared, tmp_path):
    src = sorted((prepared / "intermediate" / "train").glob("*.hdf5"))[0]
    (dst,) = to_varlen([src], tmp_path, MAX_LEN, MAX_PRED, run=StepRun(log=lambda *_: None))
    assert samples_digest(read_samples(dst, MAX_LEN, MAX_PRED)) == samples_digest(
        read_fixed(src, MAX_LEN, MAX_PRED)
    )


def test_bad_fixed_file_names_the_sample(prepared, tmp_path):
    bad = tmp_path / "bad.hdf5"
    shutil.copy(sorted((prepared / "intermediate" / "train").glob("*.hdf5"))[0], bad)
    with h5py.File(bad, "r+") as f:
        mask = f["input_mask"][:]
        mask[3, 1] = 0  # a hole in the real tokens
        f["input_mask"][...] = mask
    with pytest.raises(DataError, match="sample 3: input_mask"):
        read_fixed(bad, MAX_LEN, MAX_PRED)


def test_missing_vocab_is_one_clear_error(corpus, tmp_path):
    proc = run_script(
        "examples",
        str(corpus[0][0]),
        "--vocab",
        str(tmp_path / "nope.txt"),
        "--out",
        str(tmp_path / "o"),
    )
    assert proc.returncode == 2
    assert "nope.txt: vocabulary file does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr
