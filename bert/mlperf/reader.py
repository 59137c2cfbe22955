"""Which MLPerf result logs are whole, timed runs: the log side of package.py.

A log is a run only if it is complete and not resumed:

- complete: it has run_start and run_stop, and run_stop's status is success. A run whose
  run_stop says aborted did not reach the target (or crashed); MLPerf scores at most one such
  run per submission, as the slowest, so it is accepted only where the caller allows it.
  A log without run_stop comes from a run that was killed or is still running.
- resumed: a run restarted from a checkpoint logs only the part after the restart, so its
  run_stop - run_start is not a time to train. Recognised by any of
  (a) the trainer's file name for it, `mlperf_resumed_step_<N>.log` (constants.py);
  (b) an MLLOG event with key RESUMED_FROM_CHECKPOINT, value the step it resumed from, so a
      copy under another name (result_3.txt) is still recognised;
  (c) a first block that starts after 0 samples: a fresh run starts at 0 (this catches logs
      written before (b) existed).

A folder that is one run's output_dir can hold several logs (mlperf.log, the resumed ones,
mlperf_eval_only.log); `collect` picks the single complete, non-resumed one and says why, or
refuses the folder.

Keys the logs may carry for the system description (read when present, else the packaging host
is asked): TOPOLOGY_KEYS, each named after its system-description field.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from bert.mlperf.constants import (
    MLLOG_MARKER,
    NOT_LOGS,
    RESUMED_FROM_CHECKPOINT,
    RESUMED_NAME,
    RULESET,
    STOP_REASON,
    TOPOLOGY_KEYS,
)


class LogError(Exception):
    """A log that cannot be packaged (bad input: exit status 2)."""


@dataclass
class Run:
    path: Path
    seed: int | None
    has_start: bool
    status: str  # run_stop's status, or "missing" when the log has no run_stop
    minutes: float  # run_stop - run_start when the run converged; inf otherwise
    org: str | None
    division: str | None
    submission_status: str | None
    global_batch_size: int | None
    resumed: str | None  # why it is a resumed log; None for a fresh run
    topology: dict[str, str] = field(default_factory=dict)  # TOPOLOGY_KEYS found in the log
    # run_stop's stop_reason: the run was stopped from outside its loop (a signal, an error,
    # a diverged loss), so it is no timed result, even as the one aborted run MLPerf allows
    stop_reason: str | None = None

    @property
    def converged(self) -> bool:
        return self.status == "success"

    def refusal(self, allow_aborted: bool) -> str | None:
        """Why this log is not a timed run that may be packaged; None when it is."""
        if self.resumed:
            return (
                f"resumed log ({self.resumed}): it times only the part after the resume; "
                "package the log of an uninterrupted run"
            )
        if not self.has_start:
            return "no run_start: not a training run (an eval-only log?)"
        if self.stop_reason:
            return (
                f"stopped from outside the training loop ({self.stop_reason}): not a timed "
                "run, not even as the one aborted run MLPerf allows"
            )
        if self.status == "missing":
            return "incomplete: no run_stop (the run was killed, crashed or is still running)"
        if self.status != "success" and not allow_aborted:
            return (
                f"incomplete: run_stop status {self.status} (the run did not reach the "
                "target or crashed); MLPerf scores at most one such run of 10, as the "
                "slowest: pass --allow-aborted to include it"
            )
        return None


def parse_log(path: Path) -> tuple[list, list]:
    """(lines, errors) of the official parser (mlperf-logging, imported here: writing a log
    and reading one's JSON lines need none)."""
    from mlperf_logging.compliance_checker import mlp_parser

    return mlp_parser.parse_file(str(path), ruleset=RULESET)


def mllog_records(text: str) -> list[dict]:
    """The JSON of every MLLOG line of a log's text, in order (key, value, metadata, ...)."""
    marker = MLLOG_MARKER + " "
    return [json.loads(line.split(marker, 1)[1]) for line in text.splitlines() if marker in line]


def read_run(path: Path) -> Run:
    lines, errors = parse_log(path)
    if errors:
        raise LogError(
            f"{path}: {len(errors)} unparsable MLLOG line(s), first: {errors[0][0][:120]!r}"
        )
    if not lines:
        raise LogError(f"{path}: no {MLLOG_MARKER} lines: not an MLPerf result log")
    first = {}
    for line in lines:
        first.setdefault(line.key, line)
    start, stop = first.get("run_start"), first.get("run_stop")
    status = str(stop.value["metadata"].get("status", "missing")) if stop else "missing"
    minutes = math.inf
    if start and stop and status == "success":
        minutes = (stop.timestamp - start.timestamp) / 60_000

    def value(key: str):
        return first[key].value["value"] if key in first else None

    return Run(
        path,
        value("seed"),
        start is not None,
        status,
        minutes,
        value("submission_org"),
        value("submission_division"),
        value("submission_status"),
        value("global_batch_size"),
        resumed_reason(path, first),
        {k: str(value(k)) for k in TOPOLOGY_KEYS if k in first},
        stop.value["metadata"].get(STOP_REASON) if stop else None,
    )


def resumed_reason(path: Path, first: dict) -> str | None:
    """(a), (b), (c) of the module docstring; None for a log of a fresh run."""
    named = RESUMED_NAME.search(path.name)
    if named:
        return f"file name {path.name}: resumed from step {int(named.group(1))}"
    if RESUMED_FROM_CHECKPOINT in first:
        step = first[RESUMED_FROM_CHECKPOINT].value["value"]
        return f"MLLOG {RESUMED_FROM_CHECKPOINT} event: resumed from step {step}"
    block = first.get("block_start") or first.get("epoch_start")
    if block is not None:
        meta = block.value["metadata"]
        begun = max(
            int(meta.get("samples_count", 0) or 0), int(meta.get("first_epoch_num", 0) or 0)
        )
        if begun > 0:
            return f"its first block starts after {begun} samples, not 0"
    return None


def resumed_log(path: Path) -> str | None:
    """Why `path` is a resumed log, or None (also for a file that is no readable log)."""
    try:
        return read_run(path).resumed
    except (LogError, OSError, ValueError, KeyError, TypeError):
        return None


# -- which files -------------------------------------------------------------------------------


def _result_index(path: Path) -> int:
    return int(re.sub(r"\D", "", path.stem) or 0)


def has_mllog_lines(path: Path) -> bool:
    """Whether `path` holds MLLOG lines (a run's plain stdout log holds none)."""
    with open(path, encoding="latin-1") as f:
        return any(MLLOG_MARKER in line for line in f)


def pick_from_output_dir(folder: Path, allow_aborted: bool) -> tuple[Run, str]:
    """The one complete, non-resumed log of a run's output_dir, and a line saying why."""
    candidates = sorted(
        p
        for p in folder.glob("*.log")
        if p.is_file() and p.name not in NOT_LOGS and has_mllog_lines(p)
    )
    if not candidates:
        raise LogError(f"{folder}: holds no result_*.txt and no MLPerf *.log")
    runs = [read_run(p) for p in candidates]
    refused = {run.path.name: run.refusal(allow_aborted) for run in runs}
    usable = [run for run in runs if refused[run.path.name] is None]
    skipped = "; ".join(f"{name}: {why}" for name, why in refused.items() if why)
    if not usable:
        raise LogError(f"{folder}: no complete, non-resumed log to package ({skipped})")
    if len(usable) > 1:
        names = ", ".join(run.path.name for run in usable)
        raise LogError(f"{folder}: several complete logs ({names}); name the one to package")
    chosen = usable[0]
    why = f"{folder}: using {chosen.path.name} (complete, run_stop {chosen.status}"
    why += f"); not using {skipped}" if skipped else ")"
    return chosen, why


def collect(paths: list[str], allow_aborted: bool) -> tuple[list[Run], list[str]]:
    """The runs to package, in the order given, and notes on what was chosen and why.

    A path is a log file, a folder of result_*.txt (launch/run_and_time.sh; each one must be a
    run), or one run's output_dir (its single complete, non-resumed log). Raises LogError."""
    runs: list[Run] = []
    notes: list[str] = []
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            found = [read_run(path)]
        elif path.is_dir() and any(path.glob("result_*.txt")):
            found = [read_run(p) for p in sorted(path.glob("result_*.txt"), key=_result_index)]
        elif path.is_dir():
            run, why = pick_from_output_dir(path, allow_aborted)
            found = [run]
            notes.append(why)
        else:
            raise LogError(f"{path}: no such file or folder")
        for run in found:
            why = run.refusal(allow_aborted)
            if why:
                raise LogError(f"{run.path}: {why}")
        runs += found
    seen: dict[Path, Path] = {}
    for run in runs:
        real = run.path.resolve()
        if real in seen:
            raise LogError(f"{run.path}: given twice (also as {seen[real]})")
        seen[real] = run.path
    if not runs:
        raise LogError("no result logs given")
    return runs, notes
