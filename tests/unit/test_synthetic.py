"""data.synthetic: realistic length mix, BERT layout and masking, a learnable hidden language."""

from __future__ import annotations

import dataclasses
import multiprocessing
from pathlib import Path

import numpy as np
import pytest

from data.config import DataConfig, SyntheticConfig
from data.packing import pack_samples
from data.sources.shards import DataError, list_shards, read_samples
from data.synthetic import ensure_synthetic_data, generate, main
from data.synthetic_language import (
    CLS_ID,
    FIRST_WORD_ID,
    MASK_ID,
    PAD_ID,
    SEP_ID,
    generate_samples,
    successor_table,
)

from commands import one_error_line, run_python

L = 128
MAX_PRED = 20
VOCAB = 1024
SEED = 12345


@pytest.fixture(scope="module")
def samples():
    """16k samples, as many as the default run's training set (no files involved)."""
    rng = np.random.default_rng(0)
    return generate_samples(rng, successor_table(SEED, VOCAB), 16384, L, MAX_PRED)


@pytest.fixture(scope="module")
def small_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("synthetic")
    generate(out, num_shards=3, samples_per_shard=500, eval_samples=2000, seed=SEED)
    return out


def lengths_of(samples) -> np.ndarray:
    return np.array([len(s.input_ids) for s in samples])


def test_length_histogram_matches_reference(samples):
    """REFERENCE 2: by length 1-128: 37.3%, 129-256: 19.7%, 257-384: 11.7%, 385-512: 31.4%
    (of max 512), and about 23% of samples exactly at the maximum; scaled here to L = 128."""
    lengths = lengths_of(samples)
    quarter = np.digitize(lengths, [L // 4 + 1, L // 2 + 1, 3 * L // 4 + 1])
    fractions = np.bincount(quarter, minlength=4) / len(lengths)
    np.testing.assert_allclose(fractions, [0.373, 0.197, 0.117, 0.314], atol=0.015)
    assert abs(np.mean(lengths == L) - 0.23) < 0.015
    assert lengths.min() >= 5 and lengths.max() == L
    # REFERENCE 2: mean about 254 of 512 slots, i.e. about half of max_seq_length.
    assert 0.45 < lengths.mean() / L < 0.55


def test_special_token_layout(samples):
    for s in samples[:2000]:
        ids, seg = s.input_ids.astype(np.int64), s.segment_ids
        assert s.input_ids.dtype == np.int16 and seg.dtype == np.int8
        seps = np.flatnonzero(ids == SEP_ID)
        assert ids[0] == CLS_ID and len(seps) == 2 and seps[1] == len(ids) - 1
        assert 1 < seps[0] < len(ids) - 2  # A and B hold at least one word each
        assert not np.any(ids == PAD_ID) and not np.any(ids[1:] == CLS_ID)
        expected_seg = (np.arange(len(ids)) > seps[0]).astype(np.int8)
        np.testing.assert_array_equal(seg, expected_seg)
        words = np.delete(ids, [0, seps[0], seps[1]])
        assert np.all((words == MASK_ID) | ((words >= FIRST_WORD_ID) & (words < VOCAB)))
        assert s.nsp_label in (0, 1)


def test_masking_follows_bert(samples):
    word_counts = lengths_of(samples) - 3
    mask_counts = np.array([len(s.masked_positions) for s in samples])
    expected = np.minimum(MAX_PRED, np.maximum(1, np.rint(0.15 * word_counts)))
    np.testing.assert_array_equal(mask_counts, expected)
    assert abs(mask_counts.sum() / word_counts.sum() - 0.15) < 0.01

    # Packed, a sample's masked positions become indices into one token axis (vectorized).
    packed = pack_samples(samples)
    assert np.all(np.diff(packed.masked_positions) > 0)  # sorted and distinct within samples
    now = packed.input_ids[packed.masked_positions]
    original = packed.masked_labels
    assert np.all(original >= FIRST_WORD_ID)  # only words are masked, never [CLS]/[SEP]
    assert not np.any(np.isin(now, [CLS_ID, SEP_ID, PAD_ID]))
    np.testing.assert_allclose(np.mean(now == MASK_ID), 0.8, atol=0.01)
    np.testing.assert_allclose(np.mean(now == original), 0.1, atol=0.01)  # kept (+ rare hits)
    np.testing.assert_allclose(np.mean((now != MASK_ID) & (now != original)), 0.1, atol=0.01)


def _sentence_topics(s) -> tuple[int, int]:
    """Most frequent unmasked word of sentence A and of sentence B (the topic words' estimate)."""
    ids = s.input_ids.astype(np.int64)
    visible = ids >= FIRST_WORD_ID
    visible[s.masked_positions.astype(np.int64)] = False
    segments = s.segment_ids.astype(np.int64)
    topics = []
    for seg in (0, 1):
        words = ids[visible & (segments == seg)]
        topics.append(int(np.bincount(words).argmax()) if words.size else -1)
    return topics[0], topics[1]


def test_nsp_labels_balanced_and_meaningful(samples):
    """IsNext (label 0): B shares A's topic word; random B (label 1) almost never does."""
    labels = np.array([s.nsp_label for s in samples])
    assert abs(labels.mean() - 0.5) < 0.02
    same = {0: [], 1: []}
    for s in samples:
        if s.input_ids.shape[0] >= 32:  # long enough for the topic estimate to be reliable
            a, b = _sentence_topics(s)
            same[s.nsp_label].append(a == b)
    assert np.mean(same[0]) > 0.9 and np.mean(same[1]) < 0.05


def test_successor_table_is_a_permutation_of_words():
    succ = successor_table(SEED, VOCAB)
    assert sorted(succ[FIRST_WORD_ID:].tolist()) == list(range(FIRST_WORD_ID, VOCAB))
    np.testing.assert_array_equal(succ, successor_table(SEED, VOCAB))
    assert not np.array_equal(succ, successor_table(SEED + 1, VOCAB))


def test_oracle_on_eval_proves_the_language_is_learnable(small_dir):
    """Simple oracles on the masked eval tokens (token-weighted, as MLPerf accuracy is):

    - the most frequent visible word of the token's own sentence (what a bag-of-words model,
      hence a tiny BERT early in training, can use) beats 0.75: the 0.72 target is reachable;
    - on the masked tokens that are not their sentence's topic word, succ[left neighbour] (a
      visible word) beats 0.85: the chain is real structure, which lowers the loss of a model
      that learns it (argmax accuracy stays near the topic share).
    """
    succ = successor_table(SEED, VOCAB)
    topic_hits = topic_total = chain_hits = chain_total = 0
    for s in read_samples(small_dir / "eval.hdf5", L, MAX_PRED):
        ids = s.input_ids.astype(np.int64)
        pos = s.masked_positions.astype(np.int64)
        segments = s.segment_ids.astype(np.int64)
        topics = _sentence_topics(s)
        guess = np.array([topics[seg] for seg in segments[pos]])
        topic_hits += int(np.sum(guess == s.masked_ids))
        topic_total += pos.size
        left = pos - 1
        usable = (ids[left] >= FIRST_WORD_ID) & ~np.isin(left, pos) & (s.masked_ids != guess)
        chain_hits += int(np.sum(succ[ids[left[usable]]] == s.masked_ids[usable]))
        chain_total += int(usable.sum())
    assert topic_total > 5000 and chain_total > 500
    assert topic_hits / topic_total > 0.75
    assert chain_hits / chain_total > 0.85


def test_files_are_valid_and_deterministic(small_dir, tmp_path):
    shards = list_shards(small_dir)
    assert [p.name for p in shards] == [f"part_{k:05d}_of_00003.hdf5" for k in range(3)]
    generate(tmp_path, num_shards=3, samples_per_shard=500, eval_samples=2000, seed=SEED)
    for name in [p.name for p in shards] + ["eval.hdf5"]:
        first = read_samples(small_dir / name, L, MAX_PRED)
        again = read_samples(tmp_path / name, L, MAX_PRED)
        assert len(first) == len(again)
        for a, b in zip(first, again):
            assert all(np.array_equal(x, y) for x, y in zip(a[:4], b[:4]))
            assert a.nsp_label == b.nsp_label


def test_shards_eval_and_seeds_differ(small_dir, tmp_path):
    """REFERENCE 2 known trap: identical shards capped accuracy; every file must differ."""
    firsts = [read_samples(p, L, MAX_PRED, limit=20) for p in list_shards(small_dir)]
    firsts.append(read_samples(small_dir / "eval.hdf5", L, MAX_PRED, limit=20))
    keys = [tuple(tuple(s.input_ids.tolist()) for s in part) for part in firsts]
    assert len(set(keys)) == len(keys)
    generate(tmp_path, num_shards=1, samples_per_shard=20, eval_samples=20, seed=SEED + 1)
    other = read_samples(tmp_path / "part_00000_of_00001.hdf5", L, MAX_PRED)
    assert tuple(tuple(s.input_ids.tolist()) for s in other) != keys[0]


def test_rerun_into_complete_dir_and_foreign_shards(small_dir, tmp_path):
    generate(tmp_path, num_shards=2, samples_per_shard=10, eval_samples=10)
    generate(tmp_path, num_shards=2, samples_per_shard=10, eval_samples=10)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "eval.hdf5",
        "part_00000_of_00002.hdf5",
        "part_00001_of_00002.hdf5",
    ]
    with pytest.raises(DataError, match="part_00000_of_00002.hdf5"):
        generate(tmp_path, num_shards=3, samples_per_shard=10, eval_samples=10)


def test_pack_samples_on_synthetic_data(samples):
    batch_samples = samples[:37]
    batch = pack_samples(batch_samples)
    lengths = lengths_of(batch_samples)
    cu = batch.cu_seqlens.astype(np.int64)
    np.testing.assert_array_equal(np.diff(cu), lengths)
    assert batch.num_tokens == cu[-1] == lengths.sum() and batch.max_seqlen == lengths.max()
    assert np.all(batch.position_ids[cu[:-1]] == 0)
    for i, s in enumerate(batch_samples):
        tokens = slice(cu[i], cu[i + 1])
        np.testing.assert_array_equal(batch.input_ids[tokens], s.input_ids)
        np.testing.assert_array_equal(batch.position_ids[tokens], np.arange(lengths[i]))
        np.testing.assert_array_equal(
            batch.token_index[tokens], i * batch.max_seqlen + np.arange(lengths[i])
        )
    masked_tokens = batch.input_ids[batch.masked_positions]
    expected = np.concatenate([s.input_ids[s.masked_positions] for s in batch_samples])
    np.testing.assert_array_equal(masked_tokens, expected)
    np.testing.assert_array_equal(
        batch.masked_labels, np.concatenate([s.masked_ids for s in batch_samples])
    )


TINY_PARAMS = [
    "--num-shards",
    "2",
    "--samples-per-shard",
    "8",
    "--eval-samples",
    "4",
    "--max-seq-length",
    "64",
    "--max-predictions",
    "10",
    "--vocab-size",
    "300",
]


def test_cli_writes_and_reports(tmp_path, capsys):
    main(["--out", str(tmp_path), *TINY_PARAMS, "--seed", "3"])
    printed = capsys.readouterr().out
    assert "part_00001_of_00002.hdf5" in printed and "eval.hdf5" in printed
    assert len(read_samples(tmp_path / "part_00001_of_00002.hdf5", 64, 10)) == 8


def test_bad_arguments():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="vocab_size"):
        successor_table(SEED, 40000)
    with pytest.raises(ValueError, match="max_seq_length"):
        generate_samples(rng, successor_table(SEED, VOCAB), 4, 16, 4)


# -- where synthetic data may be written: never into a folder holding files it did not write --


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (relative name -> bytes): 'left as it was' is equality."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_cli_refuses_a_folder_it_did_not_write(tmp_path):
    """`python -m data.synthetic --out DIR` into a user's folder: exit 2, the files untouched,
    even when they carry the very names it would write."""
    user = tmp_path / "prepared"
    user.mkdir()
    (user / "part_00000_of_00002.hdf5").write_bytes(b"a real prepared shard")
    (user / "notes.txt").write_text("mine")
    before = snapshot(user)
    proc = run_python("-m", "data.synthetic", "--out", user, *TINY_PARAMS, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "did not write" in one_error_line(proc.stderr)
    assert snapshot(user) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prepared"]  # no temporary left


def test_cli_rerun_into_its_own_folder(tmp_path, capsys):
    out = tmp_path / "syn"
    assert main(["--out", str(out), *TINY_PARAMS]) == 0
    first = snapshot(out)
    assert "synthetic.json" in first
    assert main(["--out", str(out), *TINY_PARAMS]) == 0  # same settings: nothing to do
    assert "nothing written" in capsys.readouterr().out
    assert main(["--out", str(out), *TINY_PARAMS, "--seed", "4"]) == 2  # never regenerated
    error = one_error_line(capsys.readouterr().err)
    assert "made with seed=12345, these settings have seed=4" in error
    assert snapshot(out) == first


def data_config(cache: Path, train_dir: str = "", **syn) -> DataConfig:
    synthetic = SyntheticConfig(
        enabled=True, num_shards=2, samples_per_shard=8, eval_samples=4, cache_dir=str(cache), **syn
    )
    return DataConfig(
        train_dir=train_dir, max_seq_length=64, max_predictions_per_seq=10, synthetic=synthetic
    )


def test_cache_keeps_one_folder_per_settings(tmp_path):
    cache = tmp_path / "cache"
    first = ensure_synthetic_data(data_config(cache), 300)
    folder = Path(first.train_dir)
    assert folder.parent == cache and first.eval_file == str(folder / "eval.hdf5")
    kept = snapshot(folder)
    other = dataclasses.replace(data_config(cache), max_predictions_per_seq=5)  # another folder
    other = ensure_synthetic_data(other, 300)
    assert Path(other.train_dir) != folder and Path(other.train_dir).parent == cache
    assert snapshot(folder) == kept
    again = ensure_synthetic_data(data_config(cache), 300)  # the first settings: reused as is
    assert again.train_dir == str(folder) and snapshot(folder) == kept


def _ensure_in_child(cache: str, queue) -> None:
    cfg = ensure_synthetic_data(data_config(Path(cache)), 300)
    queue.put(cfg.train_dir)


def test_concurrent_first_use_is_safe(tmp_path):
    """Several processes (the ranks of a job) on one empty cache: one complete folder."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_ensure_in_child, args=(str(tmp_path / "cache"), queue))
        for _ in range(3)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    folders = {queue.get(timeout=5) for _ in procs}
    assert len(folders) == 1
    folder = Path(folders.pop())
    assert sorted(p.name for p in folder.iterdir()) == [
        "eval.hdf5",
        "part_00000_of_00002.hdf5",
        "part_00001_of_00002.hdf5",
        "synthetic.json",
    ]
    assert sorted(p.name for p in folder.parent.iterdir()) == [".open-bert-cache", folder.name]


def test_named_train_dir_is_never_written(tmp_path):
    """With synthetic data on, a data.train_dir that is set must already hold it."""
    user = tmp_path / "prepared"
    user.mkdir()
    (user / "part_00000_of_00004.hdf5").write_bytes(b"real shard")
    before = snapshot(user)
    with pytest.raises(DataError, match="did not write.*data.synthetic.enabled=false"):
        ensure_synthetic_data(data_config(tmp_path / "cache", str(user)), 300)
    assert snapshot(user) == before
    with pytest.raises(DataError, match="typo.*does not exist"):
        ensure_synthetic_data(data_config(tmp_path / "cache", str(tmp_path / "typo")), 300)
    assert not (tmp_path / "typo").exists()
    made = tmp_path / "made"
    assert main(["--out", str(made), *TINY_PARAMS, "--seed", "12345"]) == 0
    cfg = ensure_synthetic_data(data_config(tmp_path / "cache", str(made)), 300)  # its own: used
    assert cfg.train_dir == str(made) and not (tmp_path / "cache").exists()


def test_cache_root_holding_user_files_is_refused(tmp_path):
    (tmp_path / "thesis.tex").write_text("mine")
    with pytest.raises(DataError, match="cache_dir=.*did not write"):
        ensure_synthetic_data(data_config(tmp_path), 300)
    assert [p.name for p in tmp_path.iterdir()] == ["thesis.tex"]
