"""launch/slurm.sbatch and launch/srun.sh under a real one-node Slurm cluster.

The cluster (tests/slurm_cluster.py: munged, slurmctld and slurmd from Debian's slurm-wlm and
munge packages, started for this module and stopped after it) runs the commands of
launch/README.md with configs/tiny_cpu.yaml on a CPU partition (`--gpus-per-node=0`), two
tasks per node, shortened by `--set` overrides (a 16-step budget, open division):

- `NUM_RUNS=2 sbatch ... launch/slurm.sbatch CONFIG`: two runs with distinct seeds,
  each result passes the compliance checker, each run's audit trail (RECORD_SAMPLES=1) is
  exactly what the data oracle (tests/data_audit.py) assigns, no sample twice;
- `salloc ... launch/srun.sh CONFIG`: one run, the same checks;
- one rank killed mid-run (tests/faults.py's BERT_TEST_KILL_RANK hook, SIGKILL after step 8, while
  its peer evaluates): srun --kill-on-bad-exit ends the step within 60 s and the log closes
  with run_stop "aborted".

Skipped where the Slurm or munge binaries are missing (apt-get install slurm-wlm munge);
.ci/run installs them. No Slurm or munge process outlives the module: the cluster's teardown
checks it by pid and by its environment marker.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

from bert.config import load_config
from bert.train.run_shape import RunShape
from data.synthetic import ensure_synthetic_data

from data_audit import check_trail, expected_assignment, read_rank_files, trained
import commands
from slurm_cluster import SlurmCluster, free_port, missing

ROOT = Path(__file__).resolve().parents[2]
CONFIG = "configs/tiny_cpu.yaml"
TASKS, STEPS, KILL_STEP = 2, 16, 8
# CPU partition: no GPUs (the script asks for 8 per node), two tasks on the node.
ALLOCATION = ["--nodes=1", f"--ntasks-per-node={TASKS}", "--gpus-per-node=0"]
# tiny_cpu, shortened: smaller synthetic shards, evals every 8 steps, a 16-step budget (the
# target is not reached: run_stop "aborted", a budget stop, exit status 0), open division (so
# the checker does not require the target accuracy).
SETTINGS = {
    "data.synthetic.samples_per_shard": 512,
    "data.synthetic.eval_samples": 256,
    "eval.samples": 256,
    "eval.interval_samples": 256,
    "run.max_steps": STEPS,
    "log.interval_s": 1000,
    "submission.division": "open",
}
TIMEOUT_S = 300

pytestmark = [pytest.mark.slow, pytest.mark.distributed]


@pytest.fixture(scope="module")
def cluster():
    reason = missing()
    if reason:
        pytest.skip(reason)
    # Directly under /tmp: munged wants every folder above its socket searchable by all, and a
    # short socket path (108 bytes at most).
    root = Path(tempfile.mkdtemp(prefix="bert-slurm-"))
    slurm = SlurmCluster(root)
    slurm.start()
    try:
        yield slurm
    finally:
        slurm.stop()  # raises if any Slurm, munge or job process is still alive
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """tiny_cpu's synthetic data in a cache of the test's own, made before the jobs (the ranks
    then find it there and only read it)."""
    folder = tmp_path_factory.mktemp("slurm_data")
    cfg = load_config(ROOT / CONFIG, overrides(folder))
    ensure_synthetic_data(cfg.data, cfg.model.vocab_size)  # made in the test's cache
    return folder


def overrides(data: Path) -> list[str]:
    return [f"data.synthetic.cache_dir={data}", *(f"{k}={v}" for k, v in SETTINGS.items())]


def set_args(data: Path) -> list[str]:
    return [arg for item in overrides(data) for arg in ("--set", item)]


def run(cluster: SlurmCluster, cmd: list[str], **env: str) -> tuple[int, str, float]:
    """A client command from the project folder, as a user types it: (status, output, seconds).

    On timeout every job is cancelled and the test fails with the daemons' log tails."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("BERT_TEST_")}
    full_env = cluster.env(
        base, PYTHON=sys.executable, OMP_NUM_THREADS="1", MASTER_PORT=str(free_port()), **env
    )
    try:  # srun.sh's rendezvous host is the node's name: it must resolve
        socket.gethostbyname(cluster.node)
    except OSError:
        full_env["MASTER_ADDR"] = "127.0.0.1"
    started = time.monotonic()
    try:
        proc = subprocess.run(
            cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=TIMEOUT_S
        )
    except subprocess.TimeoutExpired as err:
        cluster.cancel_all()
        out = err.stdout or ""  # bytes even with text=True (the subprocess module's quirk)
        out = out.decode(errors="replace") if isinstance(out, bytes) else out
        pytest.fail(
            f"{' '.join(cmd[:2])} hung for {TIMEOUT_S} s:\n{out[-3000:]}\n{cluster.log_tails()}"
        )
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - started


def mllog(path: Path) -> list[dict]:
    return [
        json.loads(line.split(":::MLLOG ", 1)[1])
        for line in path.read_text().splitlines()
        if ":::MLLOG " in line
    ]


def values(events: list[dict], key: str) -> list:
    return [e["value"] for e in events if e["key"] == key]


def check_compliance(*paths: Path) -> None:
    proc = commands.check_compliance(*paths)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def check_finished_run(log: Path, records: Path, data: Path) -> int:
    """A run that used its whole budget: closed log, audit trail as assigned. Its seed."""
    cfg = load_config(ROOT / CONFIG, overrides(data))
    data = ensure_synthetic_data(cfg.data, cfg.model.vocab_size)  # made already: its folder
    d, gbs = data, cfg.run.global_batch_size
    events = mllog(log)
    assert events[-1]["key"] == "run_stop", events[-1]
    assert events[-1]["metadata"]["status"] == "aborted"  # budget end, target not reached
    assert values(events, "train_samples") == [STEPS * gbs]
    interval = RunShape.build(cfg, 1).eval_interval_samples
    assert len(values(events, "eval_accuracy")) == STEPS * gbs // interval
    (seed,) = values(events, "seed")
    recorded = read_rank_files(records, TASKS)
    assert all(rank for rank in recorded), f"{records}: a rank recorded nothing"
    expected = expected_assignment(
        Path(d.train_dir),
        d.balance,
        TASKS,
        gbs,
        seed,
        d.max_seq_length,
        d.max_predictions_per_seq,
        TASKS,
        STEPS,
    )
    check_trail(recorded, expected, STEPS)
    counts = Counter(trained(recorded))
    assert len(counts) == STEPS * gbs and max(counts.values()) == 1  # no sample twice
    return seed


def test_sbatch_two_runs(cluster, data_dir, tmp_path):
    """launch/README.md: NUM_RUNS runs in one job, submitted from the project folder. The
    README's `sbatch --wait` returns up to 32 s after the job ends (its polling backs off to
    32 s): the same job is submitted with --parsable instead and waited for every 0.5 s."""
    results = tmp_path / "results"
    job_out = tmp_path / "job.out"
    code, output, _ = run(
        cluster,
        [
            "sbatch",
            "--parsable",
            f"--output={job_out}",
            *ALLOCATION,
            "launch/slurm.sbatch",
            CONFIG,
            *set_args(data_dir),
        ],
        NUM_RUNS="2",
        RESULTS_DIR=str(results),
        RECORD_SAMPLES="1",
    )
    assert code == 0, output
    ended = cluster.wait_job(output.split(";")[0].strip(), TIMEOUT_S)
    text = job_out.read_text() if job_out.exists() else "(no job output)"
    if ended is None:
        cluster.cancel_all()
        pytest.fail(f"the job did not end in {TIMEOUT_S} s:\n{text[-3000:]}\n{cluster.log_tails()}")
    assert ended == ("COMPLETED", 0), f"{ended}\n{text[-5000:]}"
    # Not converged in the budget: a budget stop, status 0 on both ranks (no bad exit for
    # --kill-on-bad-exit to act on, launch/srun.sh); the logs say run_stop aborted.
    assert re.search(r"exit statuses 0 0, run_stop aborted aborted", text), text[-5000:]
    assert text.count(f"{TASKS} rank(s)") == 2, text[-5000:]
    check_compliance(results)
    seeds = [
        check_finished_run(results / f"result_{i}.txt", results / f"run_{i}" / "samples", data_dir)
        for i in range(2)
    ]
    assert seeds[0] != seeds[1]
    for i in range(2):  # result_<i>.txt is run i's log
        assert (results / f"result_{i}.txt").read_text() == (
            results / f"run_{i}" / "mlperf.log"
        ).read_text()


def srun_in_salloc(data_dir: Path, out: Path) -> list[str]:
    """`srun.sh CONFIG` inside an allocation, the run writing into `out` and its samples'
    record into OUT/samples."""
    run_args = [*set_args(data_dir), "--set", f"run.output_dir={out}"]
    return [
        "salloc",
        *ALLOCATION,
        "launch/srun.sh",
        CONFIG,
        *run_args,
        "--record-samples",
        str(out / "samples"),
    ]


def test_srun_inside_salloc(cluster, data_dir, tmp_path):
    """launch/README.md: `srun.sh CONFIG` is one run inside an allocation."""
    out = tmp_path / "run"
    code, output, _ = run(cluster, srun_in_salloc(data_dir, out))
    assert code in (0, 143), output[-5000:]  # stopped at its 16-step budget: exit 0 (README)
    assert f"{TASKS} rank(s)" in output, output[-5000:]
    check_compliance(out / "mlperf.log")
    check_finished_run(out / "mlperf.log", out / "samples", data_dir)


def test_killed_task_ends_the_step(cluster, data_dir, tmp_path):
    """Rank 1 dies with SIGKILL after step 8 while rank 0 goes on to its eval: srun's
    --kill-on-bad-exit ends the step (SIGTERM to rank 0), and rank 0 closes its log (kept aside
    as interrupted or failed: mlperf.log is only ever a run that ended by itself)."""
    out = tmp_path / "run"
    code, output, seconds = run(
        cluster,
        srun_in_salloc(data_dir, out),
        PROGRAM=str(ROOT / "tests" / "faults.py"),
        BERT_TEST_KILL_RANK="1",
        BERT_TEST_KILL_STEP=str(KILL_STEP),
    )
    ended = time.time()
    assert code != 0, output[-5000:]
    assert re.search(r"task 1: Killed", output), output[-5000:]
    # The kill came right after rank 1 handed out its last step (its record's last write).
    since_kill = ended - (out / "samples" / "rank1.txt").stat().st_mtime
    assert since_kill < 60, f"the step ended {since_kill:.0f} s after the kill:\n{output}"
    # stopped from outside (SIGTERM, or its peer's loss): the log is kept under its own name
    [log] = [*out.glob("mlperf.log.*.interrupted"), *out.glob("mlperf.log.*.failed")]
    assert not (out / "mlperf.log").exists()
    events = mllog(log)
    assert events[-1]["key"] == "run_stop", f"log not closed; ends with {events[-1]}"
    assert events[-1]["metadata"]["status"] == "aborted"
    assert events[-1]["metadata"]["stop_reason"]
    assert not values(events, "eval_accuracy")  # stopped in the first block's eval
    assert max(read_rank_files(out / "samples", TASKS)[1]) == KILL_STEP - 1
    left = [cmd for cmd in cluster.leftovers().values() if "run_pretraining.py" in cmd]
    assert not left, f"ranks still running after the step ended: {left}"


def test_gpu_request_needs_the_override(cluster):
    """The script's own --gpus-per-node=8 on a node without GPUs: refused at submission, which
    is why launch/README.md says to pass --gpus-per-node=0 on a CPU partition."""
    code, output, _ = run(
        cluster,
        ["sbatch", f"--ntasks-per-node={TASKS}", "launch/slurm.sbatch", CONFIG],
        DRY_RUN="1",
    )
    assert code != 0 and "Invalid generic resource" in output, output


def test_srun_task_count_on_a_cpu_partition():
    """Inside `salloc --gpus-per-node=0 --ntasks-per-node=2`, srun.sh starts 2 tasks per
    node (not 0 GPUs' worth, nor nvidia-smi's count), and one page-cache flush per node."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "GPUS_"))}
    env.update(
        DRY_RUN="1",
        SLURM_JOB_NUM_NODES="2",
        SLURM_NTASKS="4",
        SLURM_NTASKS_PER_NODE="2",
        SLURM_GPUS_ON_NODE="0",
        MASTER_ADDR="node0",
    )
    proc = subprocess.run(
        ["bash", str(ROOT / "launch" / "srun.sh"), "c.yaml"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    flush, train = [line[2:] for line in proc.stdout.splitlines() if line.startswith("+ ")]
    assert flush.startswith("srun --nodes=2 --ntasks=2 --ntasks-per-node=1 ")
    assert train.startswith("srun --nodes=2 --ntasks=4 --ntasks-per-node=2 ")
    assert "--kill-on-bad-exit=1" in train and "--config c.yaml" in train


def test_teardown_kills_what_carries_the_marker(tmp_path):
    """stop() finds a process started with the cluster's environment (as every daemon and job
    process is) by its marker, kills it, and then reports nothing left; no daemon needed."""
    slurm = SlurmCluster(tmp_path)
    proc = subprocess.Popen(["sleep", "300"], env=slurm.env())
    try:
        # Until the child has exec'd, /proc shows the parent's environment: wait for the marker
        # (at once on an idle machine; a while under load).
        deadline = time.time() + 30
        while not slurm.leftovers() and time.time() < deadline:
            time.sleep(0.05)
        assert list(slurm.leftovers()) == [proc.pid]
        slurm.stop()
        proc.wait(timeout=10)  # killed, and reaped (by stop() or here)
        assert not Path(f"/proc/{proc.pid}").exists() and not slurm.leftovers()
    finally:
        proc.kill()
