"""The promises about runs that do not end by themselves, one test each:

- SIGTERM mid-run: the run stops at the next step boundary, saves a checkpoint, exits 143, and
  closes its log as interrupted (run_stop aborted with a stop_reason; the checker accepts it)
  under its own name, named on the last line; an earlier complete mlperf.log is untouched.
- A lock held: a second run in the same output folder is refused (exit 2, one `error:` line);
  a stale lock file of a dead process is taken over.
- A stalled rank: with dist.timeout_s small, the waiting rank stops with one error line naming
  the stalled rank and the step (2 ranks, gloo), in bounded time.
- NaN: a loss that stays non-finite for run.max_nonfinite_steps steps stops the run with one
  error line naming the step; its log holds only JSON and is kept aside as failed.
- A damaged newest checkpoint: `--resume auto` reports it and resumes from the newest intact
  one; an interrupted prune leaves no half-deleted checkpoint under a checkpoint's name.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from bert.config import load_config
from bert.core.errors import CheckpointError
from bert.train.checkpoint import save
from bert.train.checkpoint.layout import complete_checkpoints, step_dir
from bert.train.checkpoint.save import remove_folder
from bert.train.run_lock import LOCK_NAME, RunLock
from bert.train.trainer import Callback, Trainer

from tiny_run import make_tiny_data, tiny_settings
from bert.tools.common import set_args

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import run_pretraining  # noqa: E402

ERROR_LINE = re.compile(r"(^|: )error: ")
# what a finished run leaves in its folder: the final checkpoint (checkpoint.final) among them
OUTPUTS = ("checkpoints", "metrics.jsonl", "mlperf.log", "run.json")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return make_tiny_data(tmp_path_factory.mktemp("reliability_data"))


def settings(data_dir: Path, out: Path, **changed) -> dict:
    return tiny_settings(
        data_dir,
        out,
        **{
            "run.max_steps": 2,
            "run.threads": 1,
            "schedule.total_steps": 2000,
            "log.interval_s": 1000,
            **changed,
        },
    )


def cli(values: dict) -> list[str]:
    return ["--quiet", *set_args(values)]


def run_main(capsys, values: dict, callbacks=()) -> tuple[int, str, str]:
    capsys.readouterr()
    code = run_pretraining.main(cli(values), callbacks=callbacks)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error(err: str) -> str:
    errors = [line for line in err.splitlines() if ERROR_LINE.search(line)]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


def records(path: Path) -> list[dict]:
    """The MLLOG lines, parsed as strict JSON (NaN or Infinity would fail here)."""

    def refuse(name):
        raise ValueError(f"{path}: non-JSON constant {name}")

    return [
        json.loads(line.split(":::MLLOG ", 1)[1], parse_constant=refuse)
        for line in path.read_text().splitlines()
        if ":::MLLOG " in line
    ]


def check_compliance(log: Path, tmp: Path) -> None:
    copy = tmp / "checked" / "result_0.txt"
    copy.parent.mkdir(exist_ok=True)
    shutil.copy(log, copy)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check_compliance.py"), str(copy)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture
def finished(capsys, data_dir, tmp_path) -> Path:
    """An output folder holding one complete run's mlperf.log (2 steps, no target)."""
    out = tmp_path / "out"
    code, _, err = run_main(capsys, settings(data_dir, out))
    assert code == 0, err  # a budget stop
    assert sorted(p.name for p in out.iterdir()) == [*OUTPUTS]
    return out


# -- SIGTERM ------------------------------------------------------------------------------------


def signal_mid_run(data_dir: Path, folder: Path, signum: int) -> tuple[int, str, str]:
    """Start a long tiny run in `folder`, send `signum` once its first eval is logged (the
    checker wants one); (exit status, stdout, stderr)."""
    values = settings(
        data_dir,
        folder,
        **{"run.max_steps": 2000, "eval.interval_samples": 16, "checkpoint.interval_steps": 1000},
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "run_pretraining.py", *cli(values)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            partial = list(folder.glob("mlperf.log.*.partial"))
            if partial and '"eval_accuracy"' in partial[0].read_text():
                break
            time.sleep(0.05)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=240)
    finally:
        proc.kill()
    return proc.returncode, out, err


def test_sigterm_stops_at_a_step_boundary_and_keeps_mlperf_log(data_dir, finished, tmp_path):
    before = (finished / "mlperf.log").read_bytes()
    code, out, err = signal_mid_run(data_dir, finished, signal.SIGTERM)
    assert code == 143, out[-2000:] + err[-2000:]
    assert "Traceback" not in err and not [l for l in err.splitlines() if ERROR_LINE.search(l)]
    assert (finished / "mlperf.log").read_bytes() == before  # the earlier result stays
    [kept] = finished.glob("mlperf.log.*.interrupted")
    assert (
        out.strip()
        .splitlines()[-1]
        .endswith(f"this run's MLPerf log: {kept} (mlperf.log not replaced)")
    )  # after the log prefix
    stop = records(kept)[-1]
    assert stop["key"] == "run_stop" and stop["metadata"]["status"] == "aborted"
    step = int(
        re.search(r"interrupted by SIGTERM at step (\d+)", stop["metadata"]["stop_reason"]).group(1)
    )
    assert 2 <= step < 2000
    # saved by the interrupt (the interval is 1000 steps), beside the earlier run's final one
    assert [p.name for p in complete_checkpoints(finished / "checkpoints")] == [
        "step_00000002",
        f"step_{step:08d}",
    ]
    check_compliance(kept, tmp_path)


def test_sighup_stops_like_sigterm_and_leaves_no_lock(data_dir, tmp_path):
    """A closed terminal or a dropped ssh session: a graceful stop, not a kill."""
    folder = tmp_path / "hup"
    code, out, err = signal_mid_run(data_dir, folder, signal.SIGHUP)
    assert code == 129, out[-2000:] + err[-2000:]
    assert "Traceback" not in err and not [l for l in err.splitlines() if ERROR_LINE.search(l)]
    [kept] = folder.glob("mlperf.log.*.interrupted")
    stop = records(kept)[-1]
    assert stop["key"] == "run_stop" and stop["metadata"]["status"] == "aborted"
    assert "interrupted by SIGHUP at step" in stop["metadata"]["stop_reason"]
    assert not (folder / LOCK_NAME).exists()


# -- the lock -----------------------------------------------------------------------------------


def test_a_second_run_in_a_folder_in_use_is_refused(capsys, data_dir, finished):
    before = (finished / "mlperf.log").read_bytes()
    holder = RunLock(finished).acquire()  # another run, as far as the lock can tell
    try:
        code, _, err = run_main(capsys, settings(data_dir, finished))
    finally:
        holder.release()
    assert code == 2
    line = one_error(err)
    assert "is in use by another run" in line and f"pid {os.getpid()}" in line
    assert sorted(p.name for p in finished.iterdir()) == [*OUTPUTS]
    assert (finished / "mlperf.log").read_bytes() == before


def test_a_stale_lock_of_a_dead_process_is_taken_over(capsys, data_dir, finished):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    (finished / LOCK_NAME).write_text(
        f"pid {dead} on host {socket.gethostname()} since 2020-01-01 00:00:00\n"
    )
    code, out, err = run_main(capsys, settings(data_dir, finished))
    assert code == 0, err
    assert f"a stale lock (pid {dead}" in out
    assert not (finished / LOCK_NAME).exists()  # released at the end of the run


def test_a_run_lock_that_is_a_symlink_is_never_written_through(capsys, data_dir, tmp_path):
    """A run.lock linking to a user's file is refused, the file untouched."""
    mine = tmp_path / "notes.txt"
    mine.write_text("my own notes\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_NAME).symlink_to(mine)
    code, _, err = run_main(capsys, settings(data_dir, out))
    assert code == 2
    assert "is a symlink" in one_error(err) and LOCK_NAME in one_error(err)
    assert mine.read_text() == "my own notes\n" and (out / LOCK_NAME).is_symlink()
    assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]


def test_a_run_lock_holding_a_users_text_is_left_alone(capsys, data_dir, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_NAME).write_text("my own notes\n")
    code, _, err = run_main(capsys, settings(data_dir, out))
    assert code == 2 and "not a lock a run made" in one_error(err)
    assert (out / LOCK_NAME).read_text() == "my own notes\n"


USERS = {"run.json": '{"my": "own settings"}\n', "metrics.jsonl": "1,2,3\n"}


@pytest.mark.parametrize("name", sorted(USERS))
def test_a_users_file_of_a_run_name_is_refused_unless_force(capsys, data_dir, tmp_path, name):
    """run.output_dir=. in a folder holding the user's own run.json or metrics.jsonl: refused
    with one line naming the file and --force; with --force the run goes on and keeps it
    beside under another name."""
    out = tmp_path / "out"
    out.mkdir()
    (out / name).write_text(USERS[name])
    code, _, err = run_main(capsys, settings(data_dir, out))
    assert code == 2
    line = one_error(err)
    assert name in line and "--force" in line and "not written by this program" in line
    assert sorted(p.name for p in out.iterdir()) == [name]  # nothing written, no lock left
    assert (out / name).read_text() == USERS[name]

    capsys.readouterr()
    code = run_pretraining.main(["--force", *cli(settings(data_dir, out))])
    assert code == 0, capsys.readouterr().err
    kept = [p for p in out.iterdir() if p.name.startswith(f"{name}.") and "previous" in p.name]
    assert len(kept) == 1 and kept[0].read_text() == USERS[name]
    assert (out / name).read_text() != USERS[name]  # the run's own


def test_a_run_in_a_folder_of_its_own_earlier_run_goes_on(capsys, data_dir, finished):
    """The run's own files (run.json, metrics.jsonl, mlperf.log) are recognised: no --force."""
    code, _, err = run_main(capsys, settings(data_dir, finished))
    assert code == 0, err
    assert len(list(finished.glob("run.json.*.previous"))) == 1


def test_a_second_run_on_one_record_samples_folder_is_refused(capsys, data_dir, tmp_path):
    """Two runs given one --record-samples folder would overwrite each other's audit trail."""
    records = tmp_path / "records"
    holder = RunLock(records).acquire()  # a run writing that folder now
    try:
        capsys.readouterr()
        args = ["--record-samples", str(records), *cli(settings(data_dir, tmp_path / "out"))]
        code = run_pretraining.main(args)
        err = capsys.readouterr().err
    finally:
        holder.release()
    assert code == 2
    line = one_error(err)
    assert f"--record-samples {records} is in use by another run" in line
    assert not list(records.glob("rank*.txt"))
    assert not (tmp_path / "out" / LOCK_NAME).exists()  # the output folder's lock released


# -- a stalled rank -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.distributed
def test_a_stalled_rank_is_named_after_the_timeout(data_dir, tmp_path):
    """Rank 1 freezes after step 2; rank 0 waits dist.timeout_s in step 3, then stops with one
    line naming rank 1 and step 3. The ranks are started directly (as torchrun would set
    them up), so the test can kill the frozen one itself."""
    values = settings(
        data_dir,
        tmp_path / "out",
        **{"run.max_steps": 6, "eval.interval_samples": 800, "dist.timeout_s": 6},
    )
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "OPEN_BERT_EXIT_DIR": str(tmp_path / "exit"),
        "BERT_TEST_STALL_RANK": "1",
        "BERT_TEST_STALL_STEP": "2",
    }
    (tmp_path / "exit").mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "faults.py"), *cli(values)],
            cwd=ROOT,
            env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    started = time.monotonic()
    try:
        out, err = procs[0].communicate(timeout=300)
        waited = time.monotonic() - started
    finally:
        for proc in procs:
            proc.kill()
    procs[1].communicate()
    assert procs[0].returncode == 1, out[-2000:] + err[-3000:]
    line = one_error(err)
    assert "rank 1 stalled" in line and "step 3" in line and "dist.timeout_s" in line, line
    assert waited < 200  # not the collective library's 30 minutes
    [log] = (tmp_path / "out").glob("mlperf.log.*.failed")
    assert "rank 1 stalled" in records(log)[-1]["metadata"]["stop_reason"]


# -- NaN ----------------------------------------------------------------------------------------


class PoisonWeights(Callback):
    """After step 1 every weight is NaN: the loss is NaN from step 2 on."""

    def on_step_end(self, trainer, step: int) -> None:
        if step == 1:
            with torch.no_grad():
                for param in trainer.raw_model.parameters():
                    param.fill_(math.nan)


def test_a_nonfinite_loss_stops_the_run(capsys, data_dir, finished):
    before = (finished / "mlperf.log").read_bytes()
    values = settings(
        data_dir,
        finished,
        **{"run.max_steps": 50, "eval.interval_samples": 800, "run.max_nonfinite_steps": 2},
    )
    code, out, err = run_main(capsys, values, callbacks=[PoisonWeights()])
    assert code == 1
    line = one_error(err)
    assert "not finite for 2 consecutive steps, up to step 3" in line, line
    assert (finished / "mlperf.log").read_bytes() == before
    [kept] = finished.glob("mlperf.log.*.failed")
    assert str(kept) in out.strip().splitlines()[-1]
    stop = records(kept)[-1]  # strict JSON throughout
    assert stop["key"] == "run_stop" and "diverged" in stop["metadata"]["stop_reason"]


def test_a_full_disk_ends_the_run_with_one_line_and_keeps_mlperf_log(
    capsys, data_dir, finished, monkeypatch
):
    """The disk under the output fills mid-run (ENOSPC at the checkpoint after step 1): one
    error line naming the file and what to do, exit 1, the earlier mlperf.log untouched, the
    run's own log kept as failed (a full output folder was once a traceback)."""
    import errno

    before = (finished / "mlperf.log").read_bytes()

    def full(obj, path):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(save, "atomic_torch_save", full)
    values = settings(data_dir, finished, **{"run.max_steps": 4, "checkpoint.interval_steps": 1})
    code, out, err = run_main(capsys, values)
    assert code == 1
    line = one_error(err)
    assert "No space left on device writing " in line and "--resume auto" in line, line
    assert "checkpoints" in line
    assert (finished / "mlperf.log").read_bytes() == before
    [kept] = finished.glob("mlperf.log.*.failed")
    assert records(kept)[-1]["key"] == "run_stop"


class InfGradientAt(Callback):
    """One weight's gradient is inf during step `step` (1-based): the loss of that step is
    finite, its gradient norm is not, and the update makes every later loss NaN."""

    def __init__(self, step: int):
        self.step, self.current = step, 1

    def on_train_start(self, trainer) -> None:
        weight = next(trainer.raw_model.parameters())
        weight.register_hook(lambda grad: grad * math.inf if self.current == self.step else grad)

    def on_step_end(self, trainer, step: int) -> None:
        self.current = step + 1


def test_a_nonfinite_gradient_norm_stops_the_run_at_its_own_step(capsys, data_dir, finished):
    """The gradient norm is checked beside the loss: the run stops at the
    step whose gradient was not finite, not one step later when the poisoned weights make the
    loss NaN."""
    values = settings(
        data_dir,
        finished,
        **{"run.max_steps": 50, "eval.interval_samples": 800, "run.max_nonfinite_steps": 1},
    )
    code, _, err = run_main(capsys, values, callbacks=[InfGradientAt(3)])
    assert code == 1
    line = one_error(err)
    assert (
        "the loss or the gradient norm was not finite for 1 consecutive steps, up to step 3" in line
    ), line


def test_the_mlperf_log_refuses_non_json_values(tmp_path):
    from bert.mlperf.writer import MLPerfLogError, MLPerfLogger

    log = MLPerfLogger(str(tmp_path / "x.log"), rank=0)
    with pytest.raises(MLPerfLogError, match="cannot be logged"):
        log.event("some_value", math.inf)
    log.close()


# -- damaged checkpoints ------------------------------------------------------------------------


def train(data_dir: Path, out: Path, steps: int, **extra) -> tuple[Trainer, object]:
    values = settings(
        data_dir,
        out,
        **{
            "run.max_steps": steps,
            "log.quiet": True,
            "checkpoint.interval_steps": 2,
            "checkpoint.keep": 0,
            **extra,
        },
    )
    trainer = Trainer(load_config(None, [f"{k}={v}" for k, v in values.items()]))
    return trainer, trainer.train()


def test_resume_auto_skips_a_damaged_newest_checkpoint(data_dir, tmp_path, capsys):
    out = tmp_path / "run"
    train(data_dir, out, 4)
    root = out / "checkpoints"
    (step_dir(root, 4) / "trainer.pt").write_bytes(b"not a pickle")
    capsys.readouterr()
    trainer, result = train(data_dir, out, 6, **{"checkpoint.resume": "auto", "log.quiet": True})
    assert trainer.ckpt.resume_from == step_dir(root, 2) and result.steps == 6
    printed = capsys.readouterr().err  # quiet hides progress, never a skipped checkpoint
    assert f"resume auto: {step_dir(root, 4)} is damaged, skipping it" in printed
    assert "trainer.pt" in printed and f"resuming from {step_dir(root, 2)}" in printed
    # named explicitly, a damaged checkpoint is refused, never replaced by another
    (step_dir(root, 6) / "manifest.json").write_text('{"format": "open-bert-train-state"}')
    with pytest.raises(CheckpointError, match="manifest"):
        train(data_dir, out, 8, **{"checkpoint.resume": str(step_dir(root, 6))})
    for folder in complete_checkpoints(root):
        (folder / "rank_00000.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match="no intact checkpoint under"):
        train(data_dir, out, 8, **{"checkpoint.resume": "auto"})


def test_an_interrupted_prune_leaves_no_half_deleted_checkpoint(data_dir, tmp_path, monkeypatch):
    out = tmp_path / "run"
    train(data_dir, out, 4)
    root = out / "checkpoints"
    real_rmtree = shutil.rmtree

    def killed_half_way(path, ignore_errors=False):
        victim = Path(path)
        if victim.is_dir():
            next(victim.iterdir()).unlink()  # one file gone, then the "kill"
        raise KeyboardInterrupt

    monkeypatch.setattr(save.shutil, "rmtree", killed_half_way)
    with pytest.raises(KeyboardInterrupt):
        remove_folder(step_dir(root, 2))
    monkeypatch.setattr(save.shutil, "rmtree", real_rmtree)
    assert not step_dir(root, 2).exists()  # never half there under a checkpoint's name
    assert [p.name for p in complete_checkpoints(root)] == ["step_00000004"]
    save.prune(root, keep=2)  # the next save's prune clears the leftover
    assert sorted(p.name for p in root.iterdir()) == ["step_00000004"]
