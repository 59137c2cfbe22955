"""The run's human-readable lines through the standard `logging` module, in one format:

    2026-05-01 12:00:00 rank 0 INFO step     10 | samples ...

Rank 0 logs at INFO; the other ranks only at WARNING (their INFO lines would repeat rank 0's),
unless `log.all_ranks` is set. Lines go to stdout, read at each write (so a test or a caller that
swaps sys.stdout sees them). The `error:` lines for bad input are not log lines: they keep their
exact form (bert/train/launch_env.py report_error) and go to stderr.
"""

from __future__ import annotations

import logging
import sys

ROOT_NAME = "bert"
FORMAT = "%(asctime)s rank %(rank)s %(levelname)s %(message)s"
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"


class _CurrentStdout(logging.StreamHandler):
    """A StreamHandler on whatever sys.stdout is at the time of each line."""

    def __init__(self) -> None:
        super().__init__(sys.stdout)

    @property
    def stream(self):  # noqa: D401 - the logging API's attribute
        return sys.stdout

    @stream.setter
    def stream(self, _value) -> None:
        pass


class _RankFilter(logging.Filter):
    def __init__(self, rank: int) -> None:
        super().__init__()
        self.rank = rank

    def filter(self, record: logging.LogRecord) -> bool:
        record.rank = self.rank
        return True


def setup_logging(rank: int, all_ranks: bool = False) -> logging.Logger:
    """Install the one handler on the project's logger (replacing an earlier setup in this
    process: a second run in one process logs with its own rank and level)."""
    root = logging.getLogger(ROOT_NAME)
    for handler in list(root.handlers):
        if isinstance(handler, _CurrentStdout):
            root.removeHandler(handler)
    handler = _CurrentStdout()
    handler.setFormatter(logging.Formatter(FORMAT, DATE_FORMAT))
    handler.addFilter(_RankFilter(rank))
    root.addHandler(handler)
    root.setLevel(logging.INFO if rank == 0 or all_ranks else logging.WARNING)
    root.propagate = False  # not twice through a root handler someone else installed
    return root


def get_logger(name: str) -> logging.Logger:
    """A logger under the project's root ("bert.<name>")."""
    return logging.getLogger(f"{ROOT_NAME}.{name}")
