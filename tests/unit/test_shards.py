"""data.sources.shards: the MLPerf variable-length HDF5 format and its validation;
data.sources.shard_stream: the per-rank stream over it."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from data.packing import Sample
from data.sources.rank_shards import RankShards
from data.sources.shard_stream import ShardStream
from data.sources.shards import (
    DataError,
    list_shards,
    read_eval_samples,
    read_samples,
    write_samples,
)

MAX_SEQ = 16
MAX_PRED = 4


def make_sample(tag: int, length: int = 8, num_masked: int = 2, nsp: int = 0) -> Sample:
    """A valid sample whose ids carry `tag`, so tests can tell samples apart."""
    ids = np.full(length, 104 + tag, dtype=np.int16)
    ids[0], ids[-1] = 101, 102
    segments = np.zeros(length, dtype=np.int8)
    segments[length // 2 :] = 1
    positions = np.arange(1, 1 + num_masked, dtype=np.int16)
    return Sample(ids, segments, positions, ids[positions].copy(), nsp)


def assert_same_samples(got: list[Sample], expected: list[Sample]) -> None:
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        for field_a, field_b in zip(a[:4], b[:4]):
            np.testing.assert_array_equal(field_a, field_b)
            assert field_a.dtype == field_b.dtype
        assert a.nsp_label == b.nsp_label


def sample_key(sample: Sample) -> tuple:
    return tuple(sample.input_ids.tolist())


# --------------------------------------------------------------------------------------------
# Raw files built with h5py directly, so each can be broken in exactly one way
# --------------------------------------------------------------------------------------------


def valid_columns(n: int = 3) -> dict[str, list]:
    samples = [make_sample(i, length=6 + i, nsp=i % 2) for i in range(n)]
    return {
        "input_ids": [s.input_ids for s in samples],
        "segment_ids": [s.segment_ids for s in samples],
        "masked_lm_positions": [s.masked_positions for s in samples],
        "masked_lm_ids": [s.masked_ids for s in samples],
        "next_sentence_labels": [s.nsp_label for s in samples],
    }


BASE_DTYPES = {
    "input_ids": np.int16,
    "segment_ids": np.int8,
    "masked_lm_positions": np.int16,
    "masked_lm_ids": np.int16,
}


def write_raw(path: Path, columns: dict[str, list], dtypes: dict | None = None) -> Path:
    """Write `columns` as vlen datasets (labels as int8 scalars); `dtypes` overrides base dtypes."""
    dtypes = {**BASE_DTYPES, "next_sentence_labels": np.int8, **(dtypes or {})}
    with h5py.File(path, "w") as f:
        for name, values in columns.items():
            if name == "next_sentence_labels":
                f.create_dataset(name, data=np.asarray(values, dtype=dtypes[name]))
                continue
            column = np.empty(len(values), dtype=object)
            for i, v in enumerate(values):
                column[i] = np.asarray(v, dtype=dtypes[name])
            f.create_dataset(
                name,
                shape=(len(values),),
                data=column if len(values) else None,
                dtype=h5py.vlen_dtype(dtypes[name]),
            )
    return path


def expect_error(path: Path, *words: str, max_seq: int = MAX_SEQ) -> str:
    with pytest.raises(DataError) as info:
        read_samples(path, max_seq, MAX_PRED)
    message = str(info.value)
    assert path.name in message, message
    for word in words:
        assert word in message, message
    return message


# --------------------------------------------------------------------------------------------
# Round trip and atomic writing
# --------------------------------------------------------------------------------------------


def test_round_trip_keeps_values_and_dtypes(tmp_path):
    samples = [make_sample(i, length=5 + i, num_masked=i % 3, nsp=i % 2) for i in range(10)]
    samples.append(make_sample(99, length=MAX_SEQ))  # equal lengths must not become a 2-D array
    samples.append(make_sample(98, length=MAX_SEQ))
    path = write_samples(tmp_path / "part_00000_of_00001.hdf5", samples)
    assert_same_samples(read_samples(path, MAX_SEQ, MAX_PRED), samples)


def test_read_limit_takes_the_first_samples(tmp_path):
    samples = [make_sample(i) for i in range(6)]
    path = write_samples(tmp_path / "part_00000_of_00001.hdf5", samples)
    assert_same_samples(read_samples(path, MAX_SEQ, MAX_PRED, limit=4), samples[:4])
    assert len(read_samples(path, MAX_SEQ, MAX_PRED, limit=100)) == 6


def test_read_accepts_a_file_written_by_h5py_directly(tmp_path):
    path = write_raw(tmp_path / "ok.hdf5", valid_columns())
    assert len(read_samples(path, MAX_SEQ, MAX_PRED)) == 3


def test_failed_write_leaves_no_file_and_keeps_the_old_one(tmp_path):
    path = tmp_path / "part_00000_of_00001.hdf5"
    good = [make_sample(1)]
    write_samples(path, good)
    broken = Sample(np.array(["not", "ids"]), *make_sample(2)[1:])
    with pytest.raises(ValueError):
        write_samples(path, [make_sample(3), broken])
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no temp file left over
    assert_same_samples(read_samples(path, MAX_SEQ, MAX_PRED), good)
    with pytest.raises(ValueError):
        write_samples(tmp_path / "part_00001_of_00002.hdf5", [broken])
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_write_refuses_values_that_do_not_fit(tmp_path):
    path = tmp_path / "part_00000_of_00001.hdf5"
    too_big = make_sample(1)._replace(masked_ids=np.array([40000, 104]))
    with pytest.raises(DataError, match="sample 1: masked_lm_ids values \\[40000\\]"):
        write_samples(path, [make_sample(0), too_big])
    with pytest.raises(DataError, match="next_sentence_labels"):
        write_samples(path, [make_sample(0, nsp=300)])
    assert list(tmp_path.iterdir()) == []


def test_write_refuses_no_samples(tmp_path):
    with pytest.raises(DataError, match="no samples"):
        write_samples(tmp_path / "empty.hdf5", [])


# --------------------------------------------------------------------------------------------
# Bad input: one DataError naming file, field and value
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "missing",
    ["input_ids", "segment_ids", "masked_lm_positions", "masked_lm_ids", "next_sentence_labels"],
)
def test_missing_dataset(tmp_path, missing):
    columns = valid_columns()
    del columns[missing]
    expect_error(write_raw(tmp_path / "part_00003_of_00004.hdf5", columns), missing, "missing")


@pytest.mark.parametrize(
    "field, wrong",
    [
        ("input_ids", np.int32),
        ("segment_ids", np.int16),
        ("masked_lm_positions", np.int64),
        ("masked_lm_ids", np.uint16),
    ],
)
def test_wrong_vlen_dtype(tmp_path, field, wrong):
    path = write_raw(tmp_path / "bad.hdf5", valid_columns(), dtypes={field: wrong})
    expect_error(path, field, str(np.dtype(wrong)), str(np.dtype(BASE_DTYPES[field])))


def test_wrong_label_dtype(tmp_path):
    path = write_raw(
        tmp_path / "bad.hdf5", valid_columns(), dtypes={"next_sentence_labels": np.int64}
    )
    expect_error(path, "next_sentence_labels", "int64", "int8")


def test_fixed_length_file_gets_a_conversion_hint(tmp_path):
    """REFERENCE 2: the padded intermediate format has 2-D int16 datasets and an input_mask."""
    path = tmp_path / "fixed.hdf5"
    with h5py.File(path, "w") as f:
        f["input_ids"] = np.zeros((3, MAX_SEQ), dtype=np.int16)
        f["input_mask"] = np.zeros((3, MAX_SEQ), dtype=np.int8)
        f["segment_ids"] = np.zeros((3, MAX_SEQ), dtype=np.int8)
        f["masked_lm_positions"] = np.zeros((3, MAX_PRED), dtype=np.int16)
        f["masked_lm_ids"] = np.zeros((3, MAX_PRED), dtype=np.int16)
        f["next_sentence_labels"] = np.zeros(3, dtype=np.int8)
    expect_error(path, "input_ids", "int16", "converted")


def test_unequal_sample_counts(tmp_path):
    columns = valid_columns()
    columns["masked_lm_ids"] = columns["masked_lm_ids"][:2]
    expect_error(write_raw(tmp_path / "bad.hdf5", columns), "masked_lm_ids=2", "input_ids=3")


def test_empty_file(tmp_path):
    expect_error(write_raw(tmp_path / "empty.hdf5", valid_columns(0)), "no samples")


def test_missing_file(tmp_path):
    expect_error(tmp_path / "part_00007_of_00008.hdf5", "does not exist")


def test_unreadable_file(tmp_path):
    path = tmp_path / "garbage.hdf5"
    path.write_bytes(b"this is not HDF5" * 10)
    expect_error(path, "HDF5")


@pytest.mark.parametrize("length", [0, MAX_SEQ + 1])
def test_sequence_length_out_of_range(tmp_path, length):
    columns = valid_columns()
    columns["input_ids"][1] = np.full(length, 104)
    columns["segment_ids"][1] = np.zeros(length)
    columns["masked_lm_positions"][1] = []
    columns["masked_lm_ids"][1] = []
    expect_error(
        write_raw(tmp_path / "bad.hdf5", columns), "sample 1", "input_ids", f"length {length}"
    )


def test_segment_length_differs(tmp_path):
    columns = valid_columns()
    columns["segment_ids"][2] = columns["segment_ids"][2][:-1]
    expect_error(write_raw(tmp_path / "bad.hdf5", columns), "sample 2", "segment_ids")


def test_masked_counts_disagree(tmp_path):
    columns = valid_columns()
    columns["masked_lm_ids"][0] = columns["masked_lm_ids"][0][:1]
    expect_error(
        write_raw(tmp_path / "bad.hdf5", columns),
        "sample 0",
        "masked_lm_ids",
        "masked_lm_positions",
    )


def test_too_many_predictions(tmp_path):
    columns = valid_columns()
    columns["masked_lm_positions"][1] = np.arange(1, MAX_PRED + 2)
    columns["masked_lm_ids"][1] = np.full(MAX_PRED + 1, 104)
    expect_error(
        write_raw(tmp_path / "bad.hdf5", columns),
        "sample 1",
        "masked_lm_positions",
        f"max_predictions={MAX_PRED}",
    )


def test_a_position_masked_twice_names_the_shard_and_sample(tmp_path):
    columns = valid_columns()
    columns["masked_lm_positions"][2] = np.array([3, 3], dtype=np.int16)
    path = write_raw(tmp_path / "part_00000_of_00001.hdf5", columns)
    expect_error(path, "sample 2", "position 3 more than once")


@pytest.mark.parametrize("position", [-1, 7, 130])
def test_masked_position_outside_sequence(tmp_path, position):
    columns = valid_columns()  # sample 1 has length 7
    columns["masked_lm_positions"][1] = [1, position]
    message = expect_error(write_raw(tmp_path / "part_00003_of_00004.hdf5", columns))
    assert message.endswith(
        f"part_00003_of_00004.hdf5: sample 1: masked_lm_positions value "
        f"{position} is outside its sequence of length 7"
    )


def test_nsp_label_not_binary(tmp_path):
    columns = valid_columns()
    columns["next_sentence_labels"][2] = 2
    expect_error(
        write_raw(tmp_path / "bad.hdf5", columns), "sample 2", "next_sentence_labels", "value 2"
    )


def test_segment_value_not_binary(tmp_path):
    columns = valid_columns()
    columns["segment_ids"][1] = np.full(len(columns["input_ids"][1]), 3)
    expect_error(write_raw(tmp_path / "bad.hdf5", columns), "sample 1", "segment_ids", "value 3")


def test_negative_token_id(tmp_path):
    columns = valid_columns()
    columns["input_ids"][2] = np.where(columns["input_ids"][2] == 102, -5, 104)
    expect_error(write_raw(tmp_path / "bad.hdf5", columns), "sample 2", "input_ids", "-5")


# --------------------------------------------------------------------------------------------
# Discovery
# --------------------------------------------------------------------------------------------


def test_list_shards_sorted_and_filtered(tmp_path):
    for name in [
        "part_00001_of_00003.hdf5",
        "part_00000_of_00003.hdf5",
        "eval.hdf5",
        "part_00002_of_00003.hdf5",
        "notes.txt",
    ]:
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in list_shards(tmp_path)] == [
        "part_00000_of_00003.hdf5",
        "part_00001_of_00003.hdf5",
        "part_00002_of_00003.hdf5",
    ]


def test_list_shards_errors(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        list_shards(tmp_path / "nowhere")
    with pytest.raises(DataError, match="no part_"):
        list_shards(tmp_path)


# --------------------------------------------------------------------------------------------
# ShardStream
# --------------------------------------------------------------------------------------------

SHARD_SIZES = [7, 5, 9, 6, 4]


@pytest.fixture
def shard_files(tmp_path) -> list[Path]:
    """Shards of unequal sizes whose samples are all distinct."""
    files, tag = [], 0
    for k, size in enumerate(SHARD_SIZES):
        samples = [make_sample(tag + i, length=5 + i % 3) for i in range(size)]
        tag += size
        files.append(
            write_samples(tmp_path / f"part_{k:05d}_of_{len(SHARD_SIZES):05d}.hdf5", samples)
        )
    return files


def make_stream(files, rank=0, world_size=1, seed=7) -> ShardStream:
    return ShardStream(RankShards(files, rank, world_size, seed, MAX_SEQ, MAX_PRED))


def epoch_samples(stream: ShardStream, epoch: int) -> int:
    return sum(SHARD_SIZES[k] for k in stream.shards_of_epoch(epoch))


def read_in_chunks(stream: ShardStream, total: int, chunk: int = 3) -> list[Sample]:
    samples = []
    while len(samples) < total:
        samples += stream.next_batch(min(chunk, total - len(samples)))
    return samples


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_every_sample_seen_once_per_epoch_across_ranks(shard_files, world_size):
    all_keys = {sample_key(s) for f in shard_files for s in read_samples(f, MAX_SEQ, MAX_PRED)}
    for epoch in range(2):
        seen = []
        for rank in range(world_size):
            stream = make_stream(shard_files, rank, world_size)
            if epoch:
                read_in_chunks(stream, epoch_samples(stream, 0))
            assert stream.state_dict() == {"epoch": epoch, "shard_pos": 0, "offset": 0}
            seen += [sample_key(s) for s in read_in_chunks(stream, epoch_samples(stream, epoch))]
            assert stream.state_dict() == {"epoch": epoch + 1, "shard_pos": 0, "offset": 0}
        assert len(seen) == len(all_keys) and set(seen) == all_keys


def test_all_ranks_agree_on_the_shard_order(shard_files):
    for epoch in range(3):
        order = [make_stream(shard_files, r, 3).shards_of_epoch(epoch) for r in range(3)]
        flat = [k for rank_shards in order for k in rank_shards]
        assert sorted(flat) == list(range(len(SHARD_SIZES)))
        reference = np.random.default_rng([7, epoch]).permutation(len(SHARD_SIZES))
        assert order == [reference[r::3].tolist() for r in range(3)]


def test_same_seed_same_order_other_seed_other_order(shard_files):
    total = 2 * sum(SHARD_SIZES)
    first = [sample_key(s) for s in make_stream(shard_files).next_batch(total)]
    again = [sample_key(s) for s in make_stream(shard_files).next_batch(total)]
    other = [sample_key(s) for s in make_stream(shard_files, seed=8).next_batch(total)]
    assert first == again
    assert first != other
    epoch_len = sum(SHARD_SIZES)
    assert first[:epoch_len] != first[epoch_len:]  # a new epoch reshuffles


@pytest.mark.parametrize("consumed", [4, 7, sum(SHARD_SIZES) - 2, sum(SHARD_SIZES)])
def test_resume_continues_with_the_same_samples(shard_files, consumed):
    """Mid-shard, at a shard boundary, just before and at an epoch boundary (world size 2)."""
    original = make_stream(shard_files, rank=1, world_size=2)
    original.next_batch(consumed)
    state = original.state_dict()
    expected = original.next_batch(25)
    restored = make_stream(shard_files, rank=1, world_size=2)
    restored.load_state_dict(dict(state))
    assert_same_samples(restored.next_batch(25), expected)
    assert restored.state_dict() == original.state_dict()


def test_batch_crosses_epoch_boundary(shard_files):
    stream = make_stream(shard_files)
    epoch_len = sum(SHARD_SIZES)
    batch = stream.next_batch(epoch_len + 3)
    assert len(batch) == epoch_len + 3
    assert stream.state_dict()["epoch"] == 1


def test_fewer_shards_than_ranks(shard_files):
    with pytest.raises(DataError, match="5 training shards for 6 ranks"):
        make_stream(shard_files, rank=0, world_size=6)


def test_bad_state_is_rejected(shard_files):
    stream = make_stream(shard_files, rank=0, world_size=2)
    with pytest.raises(ValueError):
        stream.load_state_dict({"epoch": 0, "shard_pos": 0})
    with pytest.raises(ValueError):
        stream.load_state_dict({"epoch": 0, "shard_pos": 3, "offset": 0})
    with pytest.raises(ValueError, match="offset"):
        stream.load_state_dict({"epoch": 0, "shard_pos": 0, "offset": 100})


# --------------------------------------------------------------------------------------------
# Eval
# --------------------------------------------------------------------------------------------


def test_eval_split_across_ranks(tmp_path):
    samples = [make_sample(i) for i in range(10)]
    path = write_samples(tmp_path / "eval.hdf5", samples)
    parts = [read_eval_samples(path, r, 3, 8, MAX_SEQ, MAX_PRED) for r in range(3)]
    assert [len(p) for p in parts] == [3, 3, 2]
    for rank, part in enumerate(parts):
        assert_same_samples(part, samples[:8][rank::3])
    assert len(read_eval_samples(path, 0, 1, 0, MAX_SEQ, MAX_PRED)) == 10
    with pytest.raises(DataError, match="fewer than the 11"):
        read_eval_samples(path, 0, 1, 11, MAX_SEQ, MAX_PRED)


def test_next_shard_is_read_in_the_background(shard_files):
    """While shard k is consumed, shard k+1 of the same rank is already being read."""
    import time

    stream = make_stream(shard_files, rank=0, world_size=2)
    stream.next_batch(1)
    order = stream.shards_of_epoch(0)
    pending = stream.loader._shards[(0, order[1])]
    deadline = time.monotonic() + 60  # a hang detector, not a speed limit
    while not pending.done():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert len(pending.result().samples) == SHARD_SIZES[order[1]]
    rest = SHARD_SIZES[order[0]] - 1
    stream.next_batch(rest + 1)  # crosses into the prefetched shard, which is reused
    assert stream.loader._shards[(0, order[1])] is pending
    stream.close()


def test_background_read_error_names_the_file_when_needed(shard_files):
    stream = make_stream(shard_files, rank=0, world_size=1)
    order = stream.shards_of_epoch(0)
    shard_files[order[1]].write_bytes(b"broken")
    first = SHARD_SIZES[order[0]]
    stream.next_batch(first - 1)  # the broken next shard is read already, not yet needed
    with pytest.raises(DataError, match=shard_files[order[1]].name):
        stream.next_batch(2)
