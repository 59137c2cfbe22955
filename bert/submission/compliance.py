"""Run the official MLPerf compliance checker on result logs and summarize PASS/FAIL.

    open-bert-check results/run/result_0.txt
    open-bert-check results/run            # every result_*.txt and MLLOG *.log in it

Each file goes through `python -m mlperf_logging.compliance_checker --usage training
--ruleset 5.0.0 FILE` in its own process (the checker keeps module-global state between files).
How the checker signals its verdict (mlperf_logging/compliance_checker/__main__.py): exit status 1
and an `ERROR - FAILED` line on failure; exit status 0 and an `INFO - SUCCESS` line on success;
the reasons are `WARNING - ...` blocks before the verdict. A file passes here only when both say
so: exit status 0 and SUCCESS present and FAILED absent, so a crashed or silent checker fails.
Exit status: 0 every file passed, 1 a file failed, 2 bad arguments (rules the installed
checker does not have, a NUL in an argument), a path that names no log, or a log the
official checker must not see (a line over MAX_LINE_CHARS, JSON nested over MAX_JSON_DEPTH, a
record without its key, time_ms or metadata object): one `error:` line, nothing checked.

The official checker also passes the log of a run resumed from a checkpoint, although it times
only the part after the resume; such a log gets a note (reader.py says how it is recognised;
package.py refuses it).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from bert.core.inputs import Parser, check_regular
from bert.mlperf.constants import CHECKER_REPORT_NAME, MLLOG_MARKER, RULESET, USAGE
from bert.submission.reader import (
    MAX_LOG_BYTES,
    LogError,
    checked_lines,
    has_mllog_lines,
    resumed_log,
)

# The verdict lines __main__.py logs through its "%(levelname)s - %(message)s" formatter.
SUCCESS_LINE = "INFO - SUCCESS"
FAILED_LINE = "ERROR - FAILED"


@dataclass
class Verdict:
    path: Path
    passed: bool
    reasons: list[str] = field(default_factory=list)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(prog="open-bert-check", description=__doc__.splitlines()[0])
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="LOG_OR_DIR",
        help="a result log, or a folder of result_*.txt / *.log files",
    )
    parser.add_argument("--ruleset", default=RULESET)
    parser.add_argument("--usage", default=USAGE)
    parser.add_argument(
        "--werror",
        action="store_true",
        help="treat checker warnings (e.g. a once-only key repeated with the "
        "same value) as failures",
    )
    parser.add_argument("--quiet", action="store_true", help="print only the PASS/FAIL lines")
    args = parser.parse_args(argv)
    problem = ruleset_problem(args.usage, args.ruleset)
    if problem:
        parser.error(problem)
    return args


def ruleset_problem(usage: str, ruleset: str) -> str | None:
    """Why the installed checker has no `usage` rules of version `ruleset`, or None: its own
    argparse would refuse them in the subprocess, and every log would read as FAILED."""
    if not re.fullmatch(r"[a-z]+", usage) or not re.fullmatch(r"\d+\.\d+\.\d+", ruleset):
        return f"--usage {usage!r} --ruleset {ruleset!r}: expected a word and a version (5.0.0)"
    spec = importlib.util.find_spec("mlperf_logging.compliance_checker")
    rules = Path(spec.origin).parent if spec and spec.origin else None
    if rules is not None and not (rules / f"{usage}_{ruleset}").is_dir():
        known = sorted(p.name for p in rules.glob(f"{usage}_*") if p.is_dir())
        return (
            f"--usage {usage} --ruleset {ruleset}: the installed mlperf-logging has no such "
            f"rules (has: {', '.join(known) or 'none for this usage'})"
        )
    return None


def logs_in_dir(folder: Path) -> list[Path]:
    """result_*.txt always; *.log only if it holds MLLOG lines (plain stdout logs are skipped)."""
    found = set(folder.glob("result_*.txt"))
    found.update(
        p for p in folder.glob("*.log") if p.name != CHECKER_REPORT_NAME and has_mllog_lines(p)
    )
    return sorted(p for p in found if p.is_file())


def collect(paths: list[str]) -> tuple[list[Path], list[str]]:
    """Files to check, and complaints about arguments that named nothing usable."""
    files, problems = [], []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = logs_in_dir(path)
            if not found:
                problems.append(f"{path}: no result_*.txt or MLLOG *.log files")
            files += found
        else:
            try:  # a regular file under the log cap; a FIFO or a device is named as such
                check_regular(path, "log", LogError, MAX_LOG_BYTES)
                files.append(path)
            except LogError as err:
                problems.append(str(err))
    return files, problems


def unreadable(files: list[Path]) -> list[str]:
    """Logs the official checker must not see: a line too long for its quadratic regex, JSON
    nested deep enough to crash it, a record it would answer with a traceback."""
    problems = []
    for path in files:
        try:
            if not checked_lines(path):  # empty, or text: no log, not a failed one
                problems.append(f"{path}: no {MLLOG_MARKER} lines: not an MLPerf result log")
        except (LogError, OSError) as err:
            problems.append(str(err))
    return problems


def checker_command(path: Path, args: argparse.Namespace, report: str) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "mlperf_logging.compliance_checker",
        "--usage",
        args.usage,
        "--ruleset",
        args.ruleset,
        # Without this the checker appends to ./compliance_checker.log in the caller's cwd.
        "--log_output",
        report,
        str(path),
    ]
    if args.werror:
        cmd.append("--werror")
    return cmd


def reason_lines(output: str) -> list[str]:
    """The checker's explanation: everything but progress lines and the verdict itself."""
    skip_prefixes = ("INFO - ", "** Logging output also at")
    lines = []
    for line in output.splitlines():
        if not line.strip() or line.startswith(skip_prefixes) or line == FAILED_LINE:
            continue
        lines.append(line)
    return lines


def run_checker(path: Path, args: argparse.Namespace) -> Verdict:
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, CHECKER_REPORT_NAME)
        proc = subprocess.run(
            checker_command(path, args, report), capture_output=True, text=True, check=False
        )
    output = proc.stdout + "\n" + proc.stderr
    lines = {line.strip() for line in output.splitlines()}
    # Whole-line matches: a logged value that merely contains the word must not count.
    said_success = SUCCESS_LINE in lines and FAILED_LINE not in lines
    passed = proc.returncode == 0 and said_success
    reasons = reason_lines(output)
    if not passed and proc.returncode == 0:
        reasons.append("checker exited 0 but did not report SUCCESS")
    if passed is False and not reasons:
        reasons.append(f"checker exited with status {proc.returncode} and gave no reason")
    return Verdict(path, passed, reasons)


def report(verdict: Verdict, quiet: bool) -> None:
    print(f"{'PASS' if verdict.passed else 'FAIL'} {verdict.path}")
    if quiet:
        return
    resumed = resumed_log(verdict.path)
    if resumed:
        print(
            f"    note: resumed log ({resumed}): not a timed MLPerf run, whatever the checker says"
        )
    # On a pass the remaining lines are warnings; still worth seeing.
    for line in verdict.reasons:
        print(f"    {line}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    files, problems = collect(args.paths)
    problems += unreadable(files)
    if problems:  # a path that names no log is bad input, not a failed check
        print(f"error: {'; '.join(problems)}", file=sys.stderr)
        return 2
    verdicts = [run_checker(path, args) for path in files]
    for verdict in verdicts:
        report(verdict, args.quiet)
    failed = sum(not v.passed for v in verdicts)
    print(f"{len(verdicts) - failed}/{len(verdicts)} logs passed (training ruleset {args.ruleset})")
    return 1 if failed or not verdicts else 0
