"""data.pipeline and data.sources.stratified in one process: the world's ranks run as threads.

`ThreadComm` (tests/thread_comm.py) stands in for MPI/gloo (collectives through shared slots and
a barrier), so every strategy can be checked at several world sizes in seconds: each rank trains
exactly the samples the strategy assigns it, every sample of a global batch once, every sample
once per epoch.
Resume, an injected failure (tests/faults.py) and error propagation are checked on one rank.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from bert.config import load_config
from bert.train.run_shape import RunShape
from data.comm.host import LocalComm
from data.order.lengths import strata_counts, stratum_of
from data.order.strategies import STRATEGIES
from data.packing import Sample
from data.pipeline import TrainPipeline
from data.sources.rank_shards import RankShards
from data.sources.shard_stream import ShardStream
from data.sources.shards import DataError, list_shards, read_samples, write_samples
from data.sources.stratified import StratifiedStream
from data.synthetic import generate

from data_audit import (
    all_samples,
    check_trail,
    expected_assignment,
    first_pass_steps,
    read_rank_files,
    stratified,
    trained,
)
from faults import crash_at
from thread_comm import ThreadComm, open_pipeline, run_thread_ranks

MAX_SEQ, MAX_PRED, SEED = 64, 10, 11
SHARDS, PER_SHARD = 4, 48


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("pipeline_data")
    generate(
        folder,
        num_shards=SHARDS,
        samples_per_shard=PER_SHARD,
        eval_samples=8,
        max_seq_length=MAX_SEQ,
        max_predictions=MAX_PRED,
        vocab_size=256,
        seed=4,
    )
    return folder


def config(
    data_dir: Path, strategy: str = "none", global_batch: int = 8, accum: int = 1, *extra: str
):
    return load_config(
        None,
        [
            f"data.train_dir={data_dir}",
            f"data.max_seq_length={MAX_SEQ}",
            f"data.max_predictions_per_seq={MAX_PRED}",
            "model.max_position_embeddings=64",
            f"data.balance={strategy}",
            f"run.global_batch_size={global_batch}",
            f"run.gradient_accumulation_steps={accum}",
            *extra,
        ],
    )


# --------------------------------------------------------------------------------------------
# Ranks as threads
# --------------------------------------------------------------------------------------------

SPARSE = [name for name, s in STRATEGIES.items() if s.transport == "sparse"]


def run_world(cfg, world: int, steps: int, record_dir: Path, ranks_per_node: int = 0) -> list:
    """Train `steps` steps of data on `world` thread ranks, recording the samples; the bytes
    each rank received from the others."""

    def rank_main(rank: int, comm: ThreadComm) -> int:
        with open_pipeline(
            cfg, rank, world, SEED, comm, record_dir=record_dir, ranks_per_node=ranks_per_node
        ) as pipeline:
            for _ in range(steps):
                pipeline.next_step()
        return comm.received

    return run_thread_ranks(world, rank_main)


@pytest.mark.parametrize(
    "strategy, world, ranks_per_node",
    [
        *((s, w, r) for s in STRATEGIES for w, r in [(2, 2), (4, 2)]),
        *((s, 2, 1) for s in SPARSE),  # node_swap with one-rank nodes: it swaps between them
    ],
)
def test_every_sample_of_every_global_batch_trained_once(
    data_dir, tmp_path, strategy, world, ranks_per_node
):
    local = 8
    cfg = config(data_dir, strategy, global_batch=world * local)
    epoch_steps = SHARDS * PER_SHARD // (world * local)
    steps = epoch_steps
    if stratified(strategy):  # queues pass through their strata at their own rates
        steps = min(epoch_steps, first_pass_steps(data_dir, world, local, SEED, MAX_SEQ, MAX_PRED))
        assert steps >= 2
    run_world(cfg, world, steps, tmp_path, ranks_per_node)
    recorded = read_rank_files(tmp_path, world)
    expected = expected_assignment(
        data_dir, strategy, world, world * local, SEED, MAX_SEQ, MAX_PRED, ranks_per_node, steps
    )
    check_trail(recorded, expected, steps)
    counts = Counter(trained(recorded))
    assert max(counts.values()) == 1  # no sample twice in the run
    if not stratified(strategy):  # one whole epoch: every sample exactly once
        assert sorted(counts) == sorted(all_samples(data_dir))


def test_balancing_evens_out_tokens(data_dir, tmp_path):
    """serpentine's per-rank token spread is below no balancing's (same global batches)."""
    spread = {}
    for strategy in ("none", "serpentine"):
        folder = tmp_path / strategy
        run_world(config(data_dir, strategy, global_batch=32), 4, 3, folder)
        lengths = {
            (p.name, i): len(s.input_ids)
            for p in list_shards(data_dir)
            for i, s in enumerate(read_samples(p, MAX_SEQ, MAX_PRED))
        }
        recorded = read_rank_files(folder, 4)
        spread[strategy] = sum(
            np.ptp([sum(lengths[k] for k in rank[step]) for rank in recorded]) for step in range(3)
        )
    assert spread["serpentine"] < spread["none"]


def test_sparse_transport_receives_less_than_the_all_gather(data_dir, tmp_path):
    """node_swap's ranks get the sizes and the samples that change rank, serpentine's every
    sample of the others: the pipeline takes the sparse transport for node_swap."""
    received = {}
    for strategy in ("serpentine", "node_swap"):
        received[strategy] = run_world(
            config(data_dir, strategy, global_batch=32), 4, 3, tmp_path / strategy, ranks_per_node=2
        )
    assert max(received["node_swap"]) < min(received["serpentine"]) / 2


# --------------------------------------------------------------------------------------------
# One rank: shapes, resume, failures
# --------------------------------------------------------------------------------------------


def test_micro_batches_of_a_step(data_dir):
    cfg = config(data_dir, "global_presort", 12, 3)
    with open_pipeline(cfg, 0, 1, SEED) as pipeline:
        micro = pipeline.next_step()
    assert len(micro) == 3 and all(b.num_sequences == 4 for b in micro)
    # global_presort on one rank sorts the local batch longest first before splitting
    maxima = [b.max_seqlen for b in micro]
    assert maxima == sorted(maxima, reverse=True)


def test_prefetch_runs_at_most_depth_steps_ahead(data_dir):
    cfg = config(data_dir, "none", 4, 1, "data.prefetch_depth=2")
    with open_pipeline(cfg, 0, 1, SEED) as pipeline:
        pipeline.next_step()
        # 1 consumed + 2 queued + 1 prepared and waiting for room, and no more
        deadline = time.monotonic() + 60  # a hang detector, not a speed limit
        while pipeline._next_to_prepare < 4:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.2)
        assert pipeline._next_to_prepare == 4
        assert pipeline.state_dict()["step"] == 1


@pytest.mark.parametrize("strategy", ["none", "serpentine", "stratified_local_snake"])
def test_resume_continues_with_the_same_batches(data_dir, strategy):
    cfg = config(data_dir, strategy, 8, 2)

    def take(pipeline, n):
        return [[b.input_ids.numpy().copy() for b in pipeline.next_step()] for _ in range(n)]

    with open_pipeline(cfg, 0, 1, SEED) as original:
        take(original, 7)  # crosses a shard boundary (48 samples per shard)
        state = original.state_dict()
        expected = take(original, 4)
    assert state["step"] == 7
    with open_pipeline(cfg, 0, 1, SEED) as resumed:
        resumed.load_state_dict(state)
        got = take(resumed, 4)
        with pytest.raises(RuntimeError, match="before next_step"):
            resumed.load_state_dict(state)
    for a, b in zip(got, expected):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_resume_appends_to_the_record(data_dir, tmp_path):
    cfg = config(data_dir, "none", 4)
    with open_pipeline(cfg, 0, 1, SEED, record_dir=tmp_path) as first:
        first.next_step()
        first.next_step()
        state = first.state_dict()
    with open_pipeline(cfg, 0, 1, SEED, record_dir=tmp_path) as second:
        second.load_state_dict(state)
        second.next_step()
    steps = [int(line.split()[0]) for line in (tmp_path / "rank0.txt").read_text().splitlines()]
    assert steps == [0] * 4 + [1] * 4 + [2] * 4


@pytest.mark.parametrize("step", [0, 3])  # a fresh run's first write, a resumed run's
def test_a_record_symlinked_to_a_users_file_is_not_written_through(tmp_path, step):
    """rank<R>.txt is created anew or appended without following a link."""
    from bert.core.errors import ConfigError
    from data.sample_record import SampleRecorder

    mine = tmp_path / "notes.txt"
    mine.write_text("my own notes\n")
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "rank0.txt").symlink_to(mine)
    recorder = SampleRecorder(tmp_path / "records", 0, ["part_0.hdf5"])
    with pytest.raises(ConfigError, match="rank0.txt"):
        recorder.write(step, np.array([[0, 1]], dtype=np.int64))
    assert mine.read_text() == "my own notes\n"


def test_a_prepare_hook_failure_fails_that_step(data_dir):
    with open_pipeline(config(data_dir), 0, 1, SEED, prepare_hooks=[crash_at(0, 1)]) as pipeline:
        pipeline.next_step()
        with pytest.raises(RuntimeError, match="BERT_TEST_CRASH_RANK=0: injected failure"):
            pipeline.next_step()
    with open_pipeline(config(data_dir), 0, 1, SEED, prepare_hooks=[crash_at(0, 9)]) as pipeline:
        for _ in range(3):
            pipeline.next_step()


def test_a_broken_shard_surfaces_as_data_error(data_dir, tmp_path):
    broken = tmp_path / "data"
    broken.mkdir()
    for path in list_shards(data_dir):
        (broken / path.name).write_bytes(path.read_bytes())
    list_shards(broken)[1].write_bytes(b"not hdf5")
    with open_pipeline(config(broken, "none", 8), 0, 1, SEED) as pipeline:
        with pytest.raises(DataError, match="cannot read as HDF5"):
            for _ in range(SHARDS * PER_SHARD // 8):
                pipeline.next_step()


def test_the_node_size_is_the_run_shapes(data_dir):
    """The pipeline reads the node size the run shape derived; it never derives its own."""
    cfg = config(data_dir, "serpentine", 8, 1, "data.ranks_per_node=4")
    shape = dataclasses.replace(RunShape.build(cfg, 1), ranks_per_node=1)
    with TrainPipeline(cfg.data, shape, 0, SEED, "cpu", LocalComm()) as pipeline:
        assert pipeline.ranks_per_node == 1


@pytest.mark.parametrize("strategy", ["stratified_local_presort", *SPARSE])
def test_bad_node_size(data_dir, strategy):
    cfg = config(data_dir, strategy, 24)
    with pytest.raises(ValueError, match="not a whole number of 2-rank nodes"):
        open_pipeline(cfg, 0, 3, SEED, ranks_per_node=2)


# --------------------------------------------------------------------------------------------
# Stratified draw
# --------------------------------------------------------------------------------------------


def test_stratified_batches_have_the_fixed_counts(data_dir):
    files = list_shards(data_dir)
    stream = StratifiedStream(RankShards(files, 0, 2, SEED, MAX_SEQ, MAX_PRED))
    counts = stream.counts(8)
    assert counts.sum() == 8 and counts.tolist() == strata_counts(8, stream.fracs).tolist()
    seen = []
    for _ in range(3):
        samples, origin = stream.next_batch_tagged(8)
        lengths = np.array([len(s.input_ids) for s in samples])
        np.testing.assert_array_equal(
            np.bincount(stratum_of(lengths, stream.edges), minlength=len(counts)), counts
        )
        seen += [tuple(o) for o in origin.tolist()]
    assert len(seen) == len(set(seen))
    state = stream.state_dict()
    expected = stream.next_batch_tagged(8)[1]
    again = StratifiedStream(RankShards(files, 0, 2, SEED, MAX_SEQ, MAX_PRED))
    again.load_state_dict(state)
    np.testing.assert_array_equal(again.next_batch_tagged(8)[1], expected)
    with pytest.raises(ValueError, match="stratum positions"):
        again.load_state_dict({"strata": []})


def test_missing_stratum_is_a_clear_error(tmp_path):
    """All samples short: the first longer stratum finds nothing and says so."""
    for k in range(2):
        samples = [
            Sample(
                np.full(6, 104, np.int16),
                np.zeros(6, np.int8),
                np.array([1], np.int16),
                np.array([104], np.int16),
                0,
            )
        ] * 10
        write_samples(tmp_path / f"part_{k:05d}_of_00002.hdf5", samples)
    stream = StratifiedStream(RankShards(list_shards(tmp_path), 0, 1, SEED, MAX_SEQ, MAX_PRED))
    with pytest.raises(DataError, match=r"no sample of length in \(16, 32\]"):
        stream.next_batch_tagged(8)


def test_stratum_stream_resumes_before_a_shard_without_its_lengths(tmp_path):
    """A stratum queue's position may point at a shard holding none of its lengths."""

    def sample(length):
        return Sample(
            np.full(length, 104, np.int16),
            np.zeros(length, np.int8),
            np.array([1], np.int16),
            np.array([104], np.int16),
            0,
        )

    first = int(np.random.default_rng([SEED, 0]).permutation(2)[0])  # read first in epoch 0
    write_samples(tmp_path / f"part_{first:05d}_of_00002.hdf5", [sample(60)] * 3)
    write_samples(tmp_path / f"part_{1 - first:05d}_of_00002.hdf5", [sample(6)] * 3)
    files = list_shards(tmp_path)
    stream = ShardStream(RankShards(files, 0, 1, SEED, MAX_SEQ, MAX_PRED), length_range=(48, 64))
    stream.next_batch(3)  # the long samples of the first shard, up to its end
    state = stream.state_dict()
    assert state == {"epoch": 0, "shard_pos": 1, "offset": 0}  # a shard with none of them
    again = ShardStream(RankShards(files, 0, 1, SEED, MAX_SEQ, MAX_PRED), length_range=(48, 64))
    again.load_state_dict(state)
    np.testing.assert_array_equal(again.next_batch_tagged(2)[1], stream.next_batch_tagged(2)[1])


@pytest.mark.parametrize(
    "override, message",
    [
        ("data.balance=sorted", "data.balance='sorted': expected one of none, "),
        ("data.prefetch_depth=0", "data.prefetch_depth=0 must be >= 1"),
        ("data.ranks_per_node=-1", "data.ranks_per_node=-1 must be >= 0"),
    ],
)
def test_data_config_is_validated(override, message):
    from bert.config import ConfigError

    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        load_config(None, [override])
