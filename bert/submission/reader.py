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

import importlib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from bert.core.errors import BadInputError
from bert.core.files import real_path
from bert.core.inputs import check_regular
from bert.core.readers import parse_json
from bert.mlperf import constants as C
from bert.mlperf.constants import (
    MAX_JSON_DEPTH,
    MAX_LINE_CHARS,
    MLLOG_MARKER,
    NOT_LOGS,
    RESUMED_FROM_CHECKPOINT,
    RESUMED_NAME,
    RULESET,
    STOP_REASON,
    TOPOLOGY_KEYS,
)


# a log's size: a BERT run's log is a few hundred KB; a file far beyond it is no log, and reading
# it line by line would take minutes
MAX_LOG_BYTES = 256 << 20


class LogError(BadInputError):
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
        return self.status == C.SUCCESS

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
        if self.status not in (C.SUCCESS, C.ABORTED):
            return f"run_stop status {self.status!r}: neither success nor aborted"
        if self.status != C.SUCCESS and not allow_aborted:
            return (
                f"incomplete: run_stop status {self.status} (the run did not reach the "
                "target or crashed); MLPerf scores at most one such run of 10, as the "
                "slowest: pass --allow-aborted to include it"
            )
        return None


def parse_log(path: Path) -> tuple[list, list]:
    """(lines, errors) of the official parser (mlperf-logging, imported here: writing a log
    and reading one's JSON lines need none), fed only lines `checked_lines` let through."""
    parser = importlib.import_module(
        "mlperf_logging.compliance_checker.mlp_parser.ruleset_" + RULESET.replace(".", "")
    )
    return parser.parse_generator(checked_lines(path))


def checked_lines(path: Path) -> list[str]:
    """The MLLOG lines of `path`, each bounded and a well-formed record; LogError naming the
    first that is not. The official parser's per-line regex is quadratic in the line's length,
    json.loads recurses without bound, and a record missing `metadata` is a KeyError there: a
    bad line must be one error line here, not minutes of CPU or a traceback."""
    kept = []
    check_regular(path, "log", LogError, MAX_LOG_BYTES)  # a FIFO is named, not opened
    try:
        with open(path, encoding="latin-1") as f:
            for number, line in enumerate(iter(lambda: f.readline(MAX_LINE_CHARS + 1), ""), 1):
                if len(line) > MAX_LINE_CHARS:
                    raise LogError(
                        f"{path}: line {number} is longer than {MAX_LINE_CHARS} characters: "
                        "not an MLPerf log line"
                    )
                if MLLOG_MARKER in line:
                    _check_record(line, f"{path}: line {number}")
                    kept.append(line)
    except UnicodeError as err:  # latin-1 decodes any byte; kept for other encodings' sake
        raise LogError(f"{path}: {err}") from None
    return kept


def _check_record(line: str, where: str) -> dict:
    """The record of an MLLOG line, checked (LogError naming `where` otherwise)."""
    if line.count(MLLOG_MARKER) != 1:
        raise LogError(f"{where}: holds {line.count(MLLOG_MARKER)} {MLLOG_MARKER} markers")
    text = line.split(MLLOG_MARKER, 1)[1].strip()
    depth = json_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise LogError(f"{where}: JSON nested {depth} deep (at most {MAX_JSON_DEPTH})")
    # a key given twice (a second "key" or "status") would be read one way here and the other
    # by a reader that keeps the first
    record = parse_json(text, f"{where} (after {MLLOG_MARKER})", LogError)
    if not isinstance(record, dict):
        raise LogError(f"{where}: the record is not a JSON object")
    missing = [k for k in ("time_ms", "key", "value", "metadata") if k not in record]
    if missing:
        raise LogError(f"{where}: the record has no {', '.join(missing)}")
    if not isinstance(record["key"], str) or not isinstance(record["metadata"], dict):
        raise LogError(f"{where}: key must be a string and metadata a JSON object")
    if not _is_number(record["time_ms"]):
        raise LogError(f"{where}: time_ms {record['time_ms']!r} is not a finite number")
    return record


def json_depth(text: str) -> int:
    """How deeply `text`'s arrays and objects nest, strings skipped (one pass, no recursion)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (char == "\\", char != '"')
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def mllog_records(text: str) -> list[dict]:
    """The JSON of every MLLOG line of a log's text, in order (key, value, metadata, ...);
    LogError for a line `checked_lines` would refuse."""
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if MLLOG_MARKER not in line:
            continue
        if len(line) > MAX_LINE_CHARS:
            raise LogError(f"line {number} is longer than {MAX_LINE_CHARS} characters")
        records.append(_check_record(line, f"line {number}"))
    return records


def read_run(path: Path) -> Run:
    lines, errors = parse_log(path)
    if errors:
        raise LogError(
            f"{path}: {len(errors)} unparsable MLLOG line(s), first: {errors[0][0][:120]!r}"
        )
    if not lines:
        raise LogError(f"{path}: no {MLLOG_MARKER} lines: not an MLPerf result log")
    first: dict = {}
    for line in lines:
        if line.key in (C.RUN_START, C.RUN_STOP) and line.key in first:
            raise LogError(f"{path}: more than one {line.key}: not the log of one run")
        first.setdefault(line.key, line)
    start, stop = first.get(C.RUN_START), first.get(C.RUN_STOP)
    status = stop.value["metadata"].get(C.STATUS, "missing") if stop else "missing"
    if not isinstance(status, str):
        raise LogError(f"{path}: run_stop's status {status!r} is not a string")
    minutes = math.inf
    if start and stop and status == C.SUCCESS:
        minutes = (stop.timestamp - start.timestamp) / 60_000

    def value(key: str, kind: type | tuple = (str, int)):
        found = first[key].value["value"] if key in first else None
        if found is not None and (not isinstance(found, kind) or isinstance(found, bool)):
            raise LogError(f"{path}: {key} {found!r} is not a {_kind_name(kind)}")
        return found

    return Run(
        path,
        value(C.SEED, int),
        start is not None,
        status,
        minutes,
        value(C.SUBMISSION_ORG, str),
        value(C.SUBMISSION_DIVISION, str),
        value(C.SUBMISSION_STATUS, str),
        value(C.GLOBAL_BATCH_SIZE, int),
        resumed_reason(path, first),
        {k: str(value(k)) for k in TOPOLOGY_KEYS if k in first},
        stop.value["metadata"].get(STOP_REASON) if stop else None,
    )


def _kind_name(kind: type | tuple) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join({int: "whole number", str: "string"}[k] for k in kinds)


def _count(path: Path, key: str, meta: dict, field: str) -> int:
    """A sample count of a record's metadata: a whole number >= 0 (0 when absent)."""
    found = meta.get(field, 0) or 0
    if not isinstance(found, int) or isinstance(found, bool) or found < 0:
        raise LogError(f"{path}: {key}'s {field} {found!r} is not a whole number >= 0")
    return found


def resumed_reason(path: Path, first: dict) -> str | None:
    """(a), (b), (c) of the module docstring; None for a log of a fresh run."""
    named = RESUMED_NAME.search(path.name)
    if named:
        return f"file name {path.name}: resumed from step {int(named.group(1))}"
    if RESUMED_FROM_CHECKPOINT in first:
        step = first[RESUMED_FROM_CHECKPOINT].value["value"]
        return f"MLLOG {RESUMED_FROM_CHECKPOINT} event: resumed from step {step}"
    block = first.get(C.BLOCK_START) or first.get(C.EPOCH_START)
    if block is not None:
        meta, key = block.value["metadata"], block.key
        begun = max(
            _count(path, key, meta, C.SAMPLES_COUNT), _count(path, key, meta, C.FIRST_EPOCH_NUM)
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
    """Whether `path` holds MLLOG lines (a run's plain stdout log holds none) in its first
    MAX_LOG_BYTES, read in bounded pieces (a file of one endless line is not read whole); a
    FIFO or a device holds none (its open could block)."""
    if not path.is_file():
        return False
    with open(path, encoding="latin-1") as f:
        pieces = iter(lambda: f.readline(MAX_LINE_CHARS), "")
        return any(
            MLLOG_MARKER in piece
            for _, piece in zip(range(MAX_LOG_BYTES // MAX_LINE_CHARS), pieces)
        )


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
        if path.is_dir() and any(path.glob("result_*.txt")):
            found = [read_run(p) for p in sorted(path.glob("result_*.txt"), key=_result_index)]
        elif path.is_dir():
            run, why = pick_from_output_dir(path, allow_aborted)
            found = [run]
            notes.append(why)
        else:  # missing, a FIFO, a device: named as such (checked_lines) before it is opened
            found = [read_run(path)]
        for run in found:
            why = run.refusal(allow_aborted)
            if why:
                raise LogError(f"{run.path}: {why}")
        runs += found
    seen: dict[Path, Path] = {}
    for run in runs:
        real = real_path(run.path)
        if real in seen:
            raise LogError(f"{run.path}: given twice (also as {seen[real]})")
        seen[real] = run.path
    if not runs:
        raise LogError("no result logs given")
    _check_one_submission(runs)
    return runs, notes


def _check_one_submission(runs: list[Run]) -> None:
    """A package is one organisation's runs in one division: the score would mix rules."""
    for name in ("division", "org"):
        found = {getattr(run, name) for run in runs}
        if len(found) > 1:
            listed = ", ".join(f"{run.path}: {getattr(run, name)}" for run in runs)
            raise LogError(f"the runs are of more than one submission_{name} ({listed})")
