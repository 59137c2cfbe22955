"""The data pipeline across processes: run_pretraining.py under torchrun (gloo) and mpiexec (MPI).

Each run trains a tiny model with `--record-samples` and the audit trail is checked against the
oracle of tests/data_audit.py: every rank trained exactly the samples the strategy assigns it,
every sample of every global batch once, and (strategies without stratified queues) every
sample once over the epoch the run covers, the same number of samples on every rank in every
step. The strategies are spread over the launchers and world sizes (2 and 4 ranks; the
node-local ones with 2-rank nodes, so the host comm is split); node_swap and
stratified_node_swap each run under both launchers, and each launcher at both sizes, with
two nodes (their sparse transport: MPI_Alltoallv, gloo's all_to_all_single); their trail must
be the simulator's assignment (data/order/strategies.balance) for the same lengths. Every
strategy also runs with 2 and 4 thread-ranks in tests/unit/test_pipeline.py.

A rank that fails (BERT_TEST_CRASH_RANK, injected by tests/faults.py) must end the whole job
with its message and a non-zero status, while its peers wait in a host collective: no hang.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from data_audit import (
    all_samples,
    check_trail,
    expected_assignment,
    first_pass_steps,
    read_rank_files,
    stratified,
    trained,
)
from launchers import LOCAL, SEED, TIMEOUT_S, launch, tiny_job_args
from tiny_run import TINY_DATA, make_tiny_data

FAULTS = Path(__file__).resolve().parents[1] / "faults.py"  # run_pretraining.py with faults
MAX_SEQ, MAX_PRED = TINY_DATA["max_seq_length"], TINY_DATA["max_predictions"]
SHARDS, PER_SHARD = 4, 64

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("dist_data")
    return make_tiny_data(
        folder, num_shards=SHARDS, samples_per_shard=PER_SHARD, eval_samples=16, seed=3
    )


def run_steps(data: Path, strategy: str, world: int) -> int:
    """One epoch; for stratified queues, only their first pass (no sample may repeat)."""
    steps = SHARDS * PER_SHARD // (world * LOCAL)
    if stratified(strategy):
        steps = min(steps, first_pass_steps(data, world, LOCAL, SEED, MAX_SEQ, MAX_PRED))
    assert steps >= 2
    return steps


@pytest.mark.parametrize(
    "launcher, world, strategy, ranks_per_node",
    [
        ("torchrun", 2, "none", 2),
        ("torchrun", 4, "stratified_local_presort", 2),
        ("mpiexec", 2, "stratified", 2),
        ("mpiexec", 4, "stratified_local_snake", 2),
        # the sparse transport, two nodes each: both strategies under both launchers,
        # both launchers at both sizes
        ("torchrun", 2, "node_swap", 1),
        ("torchrun", 4, "stratified_node_swap", 2),
        ("mpiexec", 2, "stratified_node_swap", 1),
        ("mpiexec", 4, "node_swap", 2),
    ],
)
def test_every_sample_trained_exactly_once(
    data_dir, tmp_path, launcher, world, strategy, ranks_per_node
):
    steps = run_steps(data_dir, strategy, world)
    code, output, _ = launch(
        launcher, world, tiny_job_args(data_dir, tmp_path, strategy, world, steps, ranks_per_node)
    )
    # The tiny budget cannot reach the target accuracy: a budget stop, status 0, an MLPerf log
    # closed as aborted.
    assert code == 0, output[-3000:]
    assert '"status": "aborted"' in (tmp_path / "mlperf.log").read_text().splitlines()[-1]
    recorded = read_rank_files(tmp_path / "rec", world)
    expected = expected_assignment(
        data_dir, strategy, world, world * LOCAL, SEED, MAX_SEQ, MAX_PRED, ranks_per_node, steps
    )
    check_trail(recorded, expected, steps)
    assert {len(samples) for rank in recorded for samples in rank.values()} == {LOCAL}
    counts = Counter(trained(recorded))
    assert max(counts.values()) == 1
    if not stratified(strategy):
        assert sorted(counts) == sorted(all_samples(data_dir))


@pytest.mark.parametrize(
    "launcher, strategy", [("torchrun", "serpentine"), ("mpiexec", "global_presort")]
)
def test_a_failing_rank_ends_the_job(data_dir, tmp_path, launcher, strategy):
    """Rank 1 fails preparing step 2 while rank 0 waits for it in the step-2 all-gather."""
    args = [str(FAULTS), *tiny_job_args(data_dir, tmp_path, strategy, 2, 6)[1:]]
    code, output, seconds = launch(launcher, 2, args, BERT_TEST_CRASH_RANK="1")
    assert code != 0, output[-3000:]
    assert "BERT_TEST_CRASH_RANK=1: injected failure while preparing step 2" in output
    if launcher == "mpiexec":
        assert "aborting the MPI job" in output
    assert seconds < TIMEOUT_S
    # What the ranks trained before the failure was recorded correctly. (Rank 1 raises as soon
    # as its thread fails, so it may not hand out step 1, already prepared, or even step 0.)
    recorded = read_rank_files(tmp_path / "rec", 2)
    assert all(max(rank, default=-1) < 2 for rank in recorded)
    done = min(len(rank) for rank in recorded)
    expected = expected_assignment(
        data_dir, strategy, 2, 2 * LOCAL, SEED, MAX_SEQ, MAX_PRED, 2, done
    )
    check_trail(recorded, expected, done, complete=False)
