"""Which of an output folder's files this program wrote: a run publishes its MLPerf log,
metrics and run record by renaming the earlier file of that name aside (bert/mlperf/logfile.py),
which is only right for a file an earlier run of ours wrote. A user's own `run.json` or
`metrics.jsonl` in the folder (run.output_dir=. in a project folder) is refused instead, with
one `error:` line naming it and `--force`.

Recognised as ours, from what the writers put in them:
    run*.json       an object with WRITER's "written_by" (bert/obs/run_record.py), or the
                    fields every run record had before that marker ("format", "config", ...)
    metrics*.jsonl  empty (a run that published before its first record), or a first line
                    that is a metrics record: an object with "kind" and "time"
                    (bert/obs/metrics.py)
    *.log           a first line that is an MLPerf log line (`:::MLLOG {...}`)
"""

from __future__ import annotations

import os
from pathlib import Path

from bert.core.errors import BadInputError, ConfigError
from bert.core.readers import parse_json
from bert.mlperf.constants import MLLOG_MARKER

WRITER = "open-bert-train"  # run.json's "written_by"
RECORD_FIELDS = {"format", "config", "versions", "code"}  # a run.json written before WRITER
HEAD_BYTES = 1 << 16  # enough for any first line this program writes


def _first_line(path: Path) -> str:
    with open(path, "rb") as f:
        return f.read(HEAD_BYTES).split(b"\n", 1)[0].decode("utf-8", "replace")


def _json_object(text: str) -> dict | None:
    """The object `text` holds; None for anything else, a key given twice included (a record
    that says two things was not written by this program)."""
    try:
        value = parse_json(text, "record")
    except BadInputError:
        return None
    return value if isinstance(value, dict) else None


def is_ours(path: Path) -> bool:
    """Whether `path` (a plain file) reads as one this program wrote; see the module doc."""
    if path.suffix == ".json":
        if path.stat().st_size > 64 << 20:  # no run record is this big
            return False
        record = _json_object(path.read_text(encoding="utf-8", errors="replace"))
        return record is not None and (
            record.get("written_by") == WRITER or RECORD_FIELDS <= record.keys()
        )
    if path.suffix == ".jsonl":
        if path.stat().st_size == 0:
            return True
        first = _json_object(_first_line(path))
        return first is not None and {"kind", "time"} <= first.keys()
    return _first_line(path).startswith(f"{MLLOG_MARKER} {{")


def check_own_files(paths: list[Path], force: bool) -> None:
    """Refuse (ConfigError) a run whose published files (`paths`) would displace one this
    program did not write, unless `force`. A symlink of those names is never ours."""
    if force:
        return
    for path in paths:
        if not os.path.lexists(path):
            continue
        if path.is_symlink() or not path.is_file() or not is_ours(path):
            raise ConfigError(
                f"{path}: was not written by this program, and this run would rename it away "
                f"to write its own {path.name}; left as it is: move it, choose another "
                f"run.output_dir, or pass --force to keep it beside under another name"
            )
