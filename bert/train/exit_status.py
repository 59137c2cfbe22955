"""How a run ends: its exit status, and the line the user sees last.

A run that ended by itself (`run_end`): 0 when it ended where it was told to, 1 when it failed:

    target_reached  the eval accuracy reached eval.target_mlm_accuracy (run_stop success)    0
    eval_only       run.eval_only: the one eval is done                                      0
    step_budget     stopped at the user's step budget (run.max_steps / run.max_samples) before
                    the schedule's end; run_stop aborted (no MLPerf result, which the packager
                    refuses), but no failure: a smoke test, a profile window, a timing       0
    target_missed   the schedule ran out without reaching the target (run_stop aborted)      1

So `open-bert-train ... && next-step` goes on after a budget stop, and torchrun prints no
ChildFailedError traceback for it; the last console line says which end it was, and so does
run.json's result (`end`).

A run that raised (`exit_status`):

    except BaseException as err:
        code = exit_status(err)      # prints the `error:` line (once per job) when there is one
        if code is None:
            raise                    # a crash: its traceback is the report

- a stop signal at a step boundary (RunInterrupted): 128 + N, nothing more to print;
- bad input (BadInputError, MLPerfLogError): one `error:` line, 2;
- a job that cannot go on (JobError: a stalled or dead peer, a diverged loss; or the disk under
  the output full or turned read-only, OUT_OF_DISK): one line, 1;
  for a stalled or dead peer (PeerLost) the process then exits at once: shutting down a
  process group whose peer never answers would wait for it (gloo waits in its destructors);
- anything else on a rank whose peer already printed its `error:` line: that error is the
  cause and this one its consequence (a collective whose peer is gone), so 1, silently;
- anything else: a crash, None (the caller re-raises: the traceback is the report).
Under mpirun a failed rank aborts the job (bert/train/launch_env.py: abort_mpi_job).
"""

from __future__ import annotations

import errno
import os
import sys

from bert.core.errors import BadInputError, JobError, PeerLost
from bert.mlperf.writer import MLPerfLogError
from bert.train.launch_env import abort_mpi_job, peer_reported_error, report_error
from bert.train.stop_signals import RunInterrupted


# TrainResult.end -> (exit status, the last console line's words for it)
RUN_ENDS = {
    "target_reached": (0, "target reached"),
    "eval_only": (0, "eval-only done"),
    "step_budget": (0, "stopped at its step budget before the target, as told (no MLPerf result)"),
    "target_missed": (1, "failed: the schedule ended without reaching the target"),
}


def run_end_status(end: str) -> int:
    return RUN_ENDS[end][0]


def run_end_line(end: str, log_path: str) -> str:
    """The run's last console line: how it ended, its exit status, where its log is."""
    code, words = RUN_ENDS[end]
    return (
        f"ended: {words}; exit status {code}. MLPerf log: {log_path}  "
        f"(check it with: open-bert-check {log_path})"
    )


# Write failures that no retry in this run can fix: the run ends with one line naming the file.
OUT_OF_DISK = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


def disk_error(err: BaseException) -> JobError | None:
    """The one-line JobError for a full or read-only disk under a file being written."""
    if not isinstance(err, OSError) or err.errno not in OUT_OF_DISK:
        return None
    where = f" writing {err.filename}" if err.filename else ""
    return JobError(
        f"{err.strerror or os.strerror(err.errno)}{where}: the run cannot go on "
        f"(free space, or set run.output_dir on another disk, then --resume auto)"
    )


def exit_status(err: BaseException) -> int | None:
    if isinstance(err, RunInterrupted):
        return err.status
    err = disk_error(err) or err
    if isinstance(err, (BadInputError, MLPerfLogError, JobError)):
        code = 1 if isinstance(err, JobError) else 2
        report_error(str(err), code)  # once per job, not once per rank
        abort_mpi_job(code)  # under mpirun, peers blocked in collectives would otherwise hang
        if isinstance(err, PeerLost):
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        return code
    if peer_reported_error():
        abort_mpi_job(1)
        return 1
    abort_mpi_job(1, err)
    return None
