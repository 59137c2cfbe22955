"""Where metrics records go. A sink has `write(record)` and `close(publish)`.

- `JsonLines`: metrics.jsonl, one JSON object per line, flushed per line (tail -f works). It is
  written under a per-attempt partial name and takes its final name with the run's MLPerf log
  (bert/mlperf/logfile.py: an earlier run's file found there is kept beside it, never replaced).
- `TensorBoard` (`log.tensorboard`): the numeric fields as scalars, tag "<kind>/<field>", with
  the samples trained as the step (so runs of different batch sizes line up). Event files have
  unique names: a folder shared with earlier runs only gains files.

More sinks (Weights & Biases, ...) implement the same two methods.
"""

from __future__ import annotations

import json
from pathlib import Path

from bert.core.errors import BadInputError
from bert.core.readers import parse_json
from bert.mlperf.logfile import LogFile

# not plotted: bookkeeping fields of a record
NOT_SCALARS = {"kind", "time", "step", "samples", "finite"}


class JsonLines:
    """Opened at the first record: a run that fails in its init phase leaves no empty file."""

    def __init__(self, final: Path) -> None:
        self.file = LogFile(final)
        self._out = None
        self._closed = False

    def write(self, record: dict) -> None:
        if self._out is None:
            self._out = open(self.file.partial, "x", encoding="utf-8")
        self._out.write(json.dumps(record, allow_nan=False) + "\n")
        self._out.flush()

    def close(self, publish: bool) -> Path | None:
        """Close; with `publish`, rename to the final name (an empty file if nothing was
        written). Returns where an earlier file of that name was kept."""
        if self._closed:
            return None
        self._closed = True
        if self._out is None and publish:
            self._out = open(self.file.partial, "x", encoding="utf-8")
        if self._out is not None:
            self._out.close()
        return self.file.publish() if publish else None


class TensorBoard:
    def __init__(self, log_dir: Path) -> None:
        # imported only when asked for: tensorboard is an optional extra ([track])
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir))

    def write(self, record: dict) -> None:
        kind = record["kind"]
        for key, value in record.items():
            if key in NOT_SCALARS or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            self.writer.add_scalar(
                f"{kind}/{key}", value, global_step=record["samples"], walltime=record["time"]
            )
        self.writer.flush()

    def close(self, publish: bool) -> None:
        self.writer.close()


def read_records(path: str | Path) -> list[dict]:
    """The records of a metrics.jsonl (a partial file's complete lines too)."""
    records = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.endswith("\n"):  # a line being written is not complete yet
                records.append(parse_json(line, f"{path}: line {number}", BadInputError))
    return records
