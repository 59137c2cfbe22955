"""Where one run's MLPerf log lives, so no run ever leaves a partial log on top of a result.

    log = LogFile(out_dir / "mlperf.log")
    MLPerfLogger(str(log.partial), rank)   # written as mlperf.log.<time>-<pid>-<id>.partial
    ... run_stop ...
    log.publish()                           # a run that ended by itself: renamed to mlperf.log
    log.keep_aborted("interrupted")         # one stopped from outside: mlperf.log.<...>.interrupted

- A run that ends by itself (run_stop success, or aborted at its step budget) publishes its log
  under the final name; a complete log of an earlier run found there is not replaced but kept
  beside it as `mlperf.log.<its time>.previous`.
- A run stopped from outside its loop (a signal, an error after the log opened, a diverged
  loss) closes its log with run_stop aborted and a stop_reason, and keeps it under its own name,
  ending `.interrupted` or `.failed`: mlperf.log stays as it was. So does a run killed outright
  (SIGKILL, a crash in the init phase), whose log stays `.partial`.
- None of those names ends in `.log`, so bert/submission/compliance.py and
  bert/submission/package.py, which read `*.log` and `result_*.txt`, never take them for a run,
  and launch/run_and_time.sh collects `mlperf.log` only from runs that ended by themselves.

Only the rank that writes the log (rank 0) publishes it.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

from bert.mlperf.constants import EVAL_ONLY_LOG_NAME, LOG_NAME, resumed_log_name

PARTIAL_SUFFIX = ".partial"
PREVIOUS_SUFFIX = ".previous"


def log_name(eval_only: bool, resumed_step: int | None) -> str:
    """The log's name in a run's output_dir: a resumed run's log and an eval-only run's log
    have names of their own, which the readers (bert/submission/reader.py) never score."""
    if eval_only:
        return EVAL_ONLY_LOG_NAME
    if resumed_step is not None:
        return resumed_log_name(resumed_step)
    return LOG_NAME


def _stamp(seconds: float | None = None) -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(seconds))


def _free_name(path: Path) -> Path:
    """`path`, or `path` with a counter before its suffix if that name is taken."""
    candidate, n = path, 1
    while candidate.exists():
        candidate = path.with_name(f"{path.stem}.{n}{path.suffix}")
        n += 1
    return candidate


class LogFile:
    def __init__(self, final: str | os.PathLike) -> None:
        self.final = Path(final)
        # unique per attempt, even for two attempts of one process in the same second
        self.attempt = f"{self.final.name}.{_stamp()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.partial = self.final.with_name(f"{self.attempt}{PARTIAL_SUFFIX}")

    def keep_aborted(self, how: str) -> Path:
        """The log of a run stopped from outside, under its own name ending `.<how>`."""
        kept = self.final.with_name(f"{self.attempt}.{how}")
        os.rename(self.partial, kept)
        return kept

    def publish(self) -> Path | None:
        """Rename the finished log to its final name; returns where an earlier log found there
        was kept (None if there was none)."""
        kept = None
        if self.final.exists():
            earlier = _stamp(self.final.stat().st_mtime)
            kept = _free_name(self.final.with_name(f"{self.final.name}.{earlier}{PREVIOUS_SUFFIX}"))
            os.rename(self.final, kept)
        os.rename(self.partial, self.final)
        return kept
