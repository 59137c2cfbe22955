"""SIGTERM, SIGINT and SIGHUP end a run at the next step boundary, not in the middle of a step.

    install_stop_handlers()      # run_pretraining.py, before main()
    ... StepGuard (bert/train/step_guard.py) reads `requested()` after every optimizer step:
        every rank agrees on the step, a checkpoint is saved if checkpoints are on, and
        RunInterrupted is raised; the log is closed as interrupted (run_stop aborted, with a
        stop_reason) and kept under the run's own name; mlperf.log is not replaced.
    exit status 128 + N (143 for SIGTERM, 130 for SIGINT, 129 for SIGHUP), as a shell reports
    a signal.

SIGHUP is what a closed terminal or a dropped ssh session sends; its default action kills the
process on the spot (no checkpoint, no run_stop, the run lock left behind), so it is a stop
signal like the others. The terminal it came from may be gone: messages about it are best-effort.

The first signal only sets a flag (a handler that raised would stop the run anywhere: inside a
collective, half-way through a checkpoint). A second signal stops at once (SystemExit), for a
run that does not reach a step boundary (stuck in a collective; torchrun and Slurm follow up
with SIGKILL anyway).
"""

from __future__ import annotations

import signal
import sys

from bert.train.launch_env import peer_reported_error

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_requested: list[int] = []  # the signals received, in order


class RunInterrupted(BaseException):
    """A stop signal ended the run at a step boundary (a BaseException, like KeyboardInterrupt:
    no `except Exception` on the way may take it for an error)."""

    def __init__(self, signum: int, step: int) -> None:
        self.signum, self.step = signum, step
        self.status = 128 + signum
        super().__init__(f"{signal.Signals(signum).name} at step {step}")


def stop_reason(err: BaseException) -> str:
    """Why a run stopped from outside its loop, for run_stop's stop_reason (one line)."""
    if isinstance(err, RunInterrupted):
        return f"interrupted by {err}"
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def requested() -> int | None:
    """The first stop signal received, or None."""
    return _requested[0] if _requested else None


def request(signum: int) -> None:
    """What the handler does (tests call it directly)."""
    _requested.append(signum)


def clear() -> None:
    _requested.clear()


def _handler(signum: int, frame) -> None:
    name = signal.Signals(signum).name
    if _requested:
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        _say(f"run_pretraining.py: {name} again: stopping now")
        raise SystemExit(128 + signum)
    request(signum)
    if peer_reported_error():
        return  # the launcher stops the job for a peer's error: that error is the one line
    _say(
        f"run_pretraining.py: {name}: stopping at the next step boundary (send it again to "
        f"stop at once)"
    )


def _say(line: str) -> None:
    """stderr may be a terminal that just closed (SIGHUP): a failed write must not turn the
    graceful stop into an exception raised at an arbitrary point of the step."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):  # EIO / EPIPE, or a closed stream
        pass


def install_stop_handlers() -> None:
    for sig in STOP_SIGNALS:
        signal.signal(sig, _handler)
