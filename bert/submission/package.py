"""Lay out MLPerf result logs as a submission, run the official checkers, print the score.

    open-bert-package RUNS... --system NAME --out DIR
        [--allow-aborted] [--unofficial] [--skip-checks]

RUNS are result logs, folders of result_*.txt (launch/run_and_time.sh), or one run's
output_dir, taken in the order given. Only complete, uninterrupted runs are packaged
(reader.py): a resumed log (mlperf_resumed_step_N.log, or a log marked
resumed_from_checkpoint, or one whose first block starts after 0 samples) times only the part
after the resume, and a log without run_stop is a killed run; both are refused. A run whose
run_stop says aborted (did not reach the target) is refused unless --allow-aborted: MLPerf
scores at most one of 10 such runs, as the slowest. From an output_dir holding several logs the
single complete, non-resumed one is taken, and the output says which and why. A run stopped from
outside its loop (run_stop's stop_reason: SIGTERM, an error), a run_stop status other than
success or aborted, and runs of more than one submission_division or submission_org are refused
whatever the flags (--skip-checks included); so is a malformed log (reader.checked_lines).

The package is

    DIR/results/<system>/bert/result_<i>.txt
    DIR/systems/<system>.json      MLPerf system description: read from the logs and this
                                   machine (system_desc.py), then flags, then --field,
                                   then --system-json
    DIR/NOT_A_VALID_SUBMISSION.txt present while the package fails a check or was not checked

Then, for training ruleset 5.0.0 (REFERENCE 1): the compliance checker on every log, the RCP
checker on the results folder (closed division) and the package checker on DIR. A checker
fails when it prints an ERROR line, exits non-zero or gives no verdict, whatever its exit
status (the package checker exits 0 with ERROR lines). The rules checked here as well: BERT
needs 10 runs with distinct seeds; at most one may fail to converge; a global batch size
without an RCP entry can be compared only by interpolation between two entries, and outside
the entries' range the closed division cannot accept it. The score is the olympic mean of
run_stop - run_start in minutes (a non-converged run counts as the slowest; the fastest and
slowest are dropped). The official result_summarizer also applies the RCP checker's scaling
factor, when there is one.

Exit status: 0 the package passed every check (or --unofficial, whose output and marker file
say the package would be rejected and why); 1 a checker or rule failure (one summary line
last); 2 bad input: arguments, unreadable, resumed or incomplete logs (one "error:" line).
--skip-checks runs no checker: every run says "not checked" and the package is marked unchecked.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bert.core.errors import BadInputError
from bert.core.files import real_path, safe_name
from bert.core.inputs import check_output_path, check_regular, command_parser, int_arg
from bert.core.readers import read_json
from bert.submission import system_desc
from bert.submission.compliance import Verdict, run_checker
from bert.mlperf.constants import BENCHMARK, RULESET, USAGE
from bert.submission.reader import LogError, Run, collect

MARKER = "NOT_A_VALID_SUBMISSION.txt"


def runs_per_submission() -> int:
    """10 for BERT (REFERENCE 1), as the official tools count it."""
    from mlperf_logging.benchmark_meta import get_result_file_counts

    return get_result_file_counts(USAGE)[BENCHMARK]


def rcp_batch_sizes() -> list[int]:
    """The global batch sizes with a BERT reference convergence point in the ruleset."""
    from bert.mlperf import rcp  # reads the installed mlperf-logging's table

    return sorted({entry.global_batch_size for entry in rcp.table()})


class PackageError(BadInputError):
    """Bad arguments (exit status 2)."""


MAX_NODES = 100_000  # beyond any system: the number a description may state
MAX_PER_NODE = 1024


# -- score ------------------------------------------------------------------------------------


class NoScore(Exception):
    """The runs give no score; `fatal` when the rules reject the set (not just too few runs)."""

    def __init__(self, message: str, fatal: bool):
        super().__init__(message)
        self.fatal = fatal


def olympic_mean(minutes: list[float]) -> float:
    """Drop the fastest and slowest run, average the rest; non-converged runs are inf."""
    failed = sum(math.isinf(m) for m in minutes)
    if failed > 1:
        raise NoScore(f"{failed} runs did not converge; at most one may (REFERENCE 1)", True)
    if len(minutes) < 3:
        raise NoScore(f"{len(minutes)} run(s): the olympic mean needs at least 3", False)
    kept = sorted(minutes)[1:-1]
    return sum(kept) / len(kept)


# -- the package ------------------------------------------------------------------------------


def lay_out(runs: list[Run], out: Path, system: str, force: bool) -> list[Path]:
    bench = out / "results" / system / BENCHMARK
    if bench.exists() and any(bench.iterdir()):
        if not force:
            raise PackageError(f"{bench} is not empty; pass --force to replace its files")
        shutil.rmtree(bench)
    bench.mkdir(parents=True)
    return [
        Path(shutil.copyfile(run.path, bench / f"result_{i}.txt")) for i, run in enumerate(runs)
    ]


def check_system_json(out: Path, system: str, desc: dict, force: bool) -> None:
    """Before anything is written: a submission tree's systems/<system>.json is shared by every
    benchmark of that system and often edited by hand; replace a different one only with
    --force (the same content is rewritten as is)."""
    path = out / "systems" / f"{system}.json"
    if force or not path.exists():
        return
    try:  # unreadable, not JSON, a key given twice: not the same description either
        same = read_json(path, "system description") == json.loads(json.dumps(desc))
    except BadInputError:
        same = False
    if not same:
        raise PackageError(
            f"{path} already exists with another description; pass --force to "
            f"replace it, or give its fields with --system-json and a copy of "
            f"it (they win)"
        )


def write_system(out: Path, system: str, desc: dict) -> Path:
    path = out / "systems" / f"{system}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(desc, indent=2) + "\n")
    return path


# -- checkers ---------------------------------------------------------------------------------


def compliance(copies: list[Path]) -> list[Verdict]:
    options = argparse.Namespace(usage=USAGE, ruleset=RULESET, werror=False)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:  # one process per log
        return list(pool.map(lambda p: run_checker(p, options), copies))


def run_module(module: str, *args: str) -> tuple[int, str]:
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [sys.executable, "-m", module, *args, "--log_output", os.path.join(tmp, "checker.log")],
            capture_output=True,
            text=True,
            check=False,
        )
    return proc.returncode, proc.stdout + "\n" + proc.stderr


def checker_errors(code: int, output: str, success_marker: str) -> list[str]:
    """Why a checker's run fails: its ERROR lines, whatever its exit status; a non-zero exit or
    a missing verdict count too (a crash prints neither)."""
    errors = []
    for line in output.splitlines():
        match = re.match(r"\s*ERROR\s*-\s*(.*)", line)
        if match and match.group(1).strip():
            errors.append(match.group(1).strip())
    if not errors and code != 0:
        last = next(
            (line.strip() for line in reversed(output.splitlines()) if line.strip()), "no output"
        )
        errors.append(f"exited with status {code}: {last[:200]}")
    if not errors and success_marker not in output:
        errors.append(f"no verdict (expected {success_marker!r})")
    return list(dict.fromkeys(errors))


def rcp_checker(bench: Path) -> list[str]:
    code, output = run_module(
        "mlperf_logging.rcp_checker", "--rcp_version", RULESET, "--rcp_usage", USAGE, str(bench)
    )
    return checker_errors(code, output, "RCP test PASSED")


def package_checker(out: Path) -> list[str]:
    code, output = run_module("mlperf_logging.package_checker", str(out), USAGE, RULESET)
    return checker_errors(code, output, "PACKAGE CHECKER FOUND NO ERRORS")


# -- rules ------------------------------------------------------------------------------------


def rule_problems(runs: list[Run]) -> list[str]:
    """What the BERT rules reject, found without the official tools."""
    problems = []
    need = runs_per_submission()
    if len(runs) != need:
        problems.append(
            f"{len(runs)} run(s): a BERT submission is exactly {need} runs, each "
            f"with its own seed (the olympic mean drops the fastest and slowest)"
        )
    seeds = [run.seed for run in runs]
    repeated = sorted({str(s) for s in seeds if seeds.count(s) > 1})
    if repeated:
        problems.append(
            f"seed(s) {', '.join(repeated)} used by more than one run; each run needs its own seed"
        )
    return problems


def rcp_note(runs: list[Run], division: str) -> str | None:
    """What the runs' global batch size means for the RCP check (closed division)."""
    sizes = sorted({run.global_batch_size for run in runs if run.global_batch_size})
    if division != "closed" or not sizes:
        return None
    if len(sizes) > 1:
        return f"runs use different global batch sizes {sizes}: one RCP check cannot cover them"
    known, gbs = rcp_batch_sizes(), sizes[0]
    if gbs in known:
        return None
    listed = f"RCP entries for bert in training {RULESET}: {', '.join(map(str, known))}"
    if gbs > known[-1]:
        return (
            f"global batch {gbs} has no reference convergence point and lies above every "
            f"entry ({listed}): nothing to compare it with, so the closed division cannot "
            f"accept it"
        )
    if gbs < known[0]:
        return (
            f"global batch {gbs} has no reference convergence point ({listed}); below the "
            f"smallest entry the runs must need at least as many samples as the {known[0]} "
            f"reference, else the closed division cannot accept the result"
        )
    return (
        f"global batch {gbs} has no reference convergence point of its own ({listed}); "
        f"the RCP checker compares it with an interpolation of its neighbours"
    )


def rcp_reference(runs: list[Run], division: str) -> str | None:
    """Which RCP the runs' one global batch is checked against (closed division)."""
    sizes = {run.global_batch_size for run in runs if run.global_batch_size}
    if division != "closed" or len(sizes) != 1:
        return None
    from bert.mlperf.rcp_check import package_reference  # reads mlperf-logging's RCP table

    return package_reference(sizes.pop())


# -- report -----------------------------------------------------------------------------------


def report_runs(runs: list[Run], verdicts: list[Verdict] | None) -> list[str]:
    """One line per run; returns the problems: converged runs that fail compliance."""
    problems = []
    for i, run in enumerate(runs):
        took = f"{run.minutes:.3f} min" if run.converged else f"not converged ({run.status})"
        verdict = verdicts[i] if verdicts else None
        said = "not checked" if verdict is None else "PASS" if verdict.passed else "FAIL"
        print(f"result_{i}.txt  seed {run.seed}  {took}  compliance {said}  <- {run.path}")
        if verdict is not None and not verdict.passed:
            for reason in verdict.reasons[:5]:
                print(f"    {reason}")
            if run.converged:
                first = verdict.reasons[0] if verdict.reasons else "no reason given"
                problems.append(f"compliance checker: result_{i}.txt fails ({first.strip()})")
    return problems


def report_checker(name: str, errors: list[str]) -> list[str]:
    print(f"{name}: {'FAIL' if errors else 'PASS'}")
    for line in errors[:12]:
        print(f"    ERROR {line[:300]}")
    return [f"{name}: {line[:300]}" for line in errors]


def write_marker(out: Path, headline: str, problems: list[str]) -> None:
    marker = out / MARKER
    if not headline:
        marker.unlink(missing_ok=True)
        return
    marker.write_text(headline + "\n" + "".join(f"- {p}\n" for p in problems))


def check_paths(args: argparse.Namespace, out: Path) -> None:
    """Before anything is read or written: the system name stays one folder under --out (the
    folder --force replaces), and no input lies in that folder or is the system json."""
    system = safe_name(args.system, "--system")
    replaced = [out / "results" / system / BENCHMARK, out / "systems" / f"{system}.json"]
    for given in [*args.runs, *([args.system_json] if args.system_json else [])]:
        path = real_path(given)
        for target in map(real_path, replaced):
            if path == target or target in path.parents:
                raise PackageError(
                    f"--out {out}: would replace the input {given}; choose "
                    f"another --out or --system"
                )


def package(args: argparse.Namespace) -> int:
    out = Path(args.out)
    check_paths(args, out)
    runs, notes = collect(args.runs, args.allow_aborted)
    for note in notes:
        print(note)
    desc, where = system_desc.describe(args, runs, system_desc.local_cuda())
    check_system_json(out, args.system, desc, args.force)
    copies = lay_out(runs, out, args.system, args.force)
    system_json = write_system(out, args.system, desc)
    print(f"package: {len(copies)} logs in {copies[0].parent}, system description {system_json}")
    print(where)
    checked = not args.skip_checks
    problems = report_runs(runs, compliance(copies) if checked else None)
    closed = desc.get("division") == "closed"
    note = rcp_note(runs, desc.get("division", ""))
    if note:
        print(f"rcp note: {note}")
    reference = rcp_reference(runs, desc.get("division", ""))
    if reference:
        print(f"rcp reference: {reference}")
    if not checked:
        print("rcp checker, package checker: not run (--skip-checks)")
    elif closed:
        problems += report_checker("rcp checker", rcp_checker(copies[0].parent))
    else:
        print("rcp checker: not applicable (open division)")
    if checked:
        problems += report_checker("package checker", package_checker(out))
    rules = rule_problems(runs)
    for rule in rules:
        print(f"rule: {rule}")
    problems += rules
    try:
        score = olympic_mean([r.minutes for r in runs])
        score_text = f"{score:.3f} min (olympic mean of {len(runs) - 2} of {len(runs)} runs)"
    except NoScore as err:
        score_text = None
        print(f"score: none ({err})")
        if err.fatal:
            problems.append(str(err))
    if problems:
        headline = (
            f"UNOFFICIAL, NOT A VALID SUBMISSION: it would be rejected ({len(problems)} problem(s))"
            if args.unofficial
            else f"FAIL: not a valid submission ({len(problems)} problem(s))"
        )
        if not checked:
            headline += "; the official checkers were not run (--skip-checks)"
        if score_text:
            print(f"unofficial score, not a valid result: {score_text}")
        write_marker(out, headline, problems)
        print(
            f"result: {headline}: "
            + "; ".join(("would be rejected: " if args.unofficial else "") + p for p in problems)
        )
        return 0 if args.unofficial else 1
    if not checked:
        headline = "NOT CHECKED: the official checkers were skipped (--skip-checks)"
        if score_text:
            print(f"unchecked score: {score_text}")
        write_marker(out, headline, ["run the checkers: drop --skip-checks"])
        print(f"result: {headline}; not a submission until they pass")
        return 0
    write_marker(out, "", [])
    if score_text:
        print(f"score: {score_text}")
    print(f"result: OK: the official checkers (training {RULESET}) found no errors")
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = command_parser("open-bert-package", __doc__)
    parser.add_argument("runs", nargs="+", metavar="RUNS")
    parser.add_argument("--system", required=True, help="system name: folder and json name")
    parser.add_argument("--out", required=True, help="submission folder (the submitter's)")
    parser.add_argument("--submitter", help="default: the logs' submission_org")
    parser.add_argument(
        "--division", choices=("closed", "open"), help="default: the logs' submission_division"
    )
    parser.add_argument(
        "--nodes",
        type=int_arg(1, MAX_NODES),
        help="default: the logs' number_of_nodes, else 1",
    )
    parser.add_argument(
        "--accelerators-per-node",
        type=int_arg(0, MAX_PER_NODE),
        help="default: the logs' accelerators_per_node, else this host's CUDA "
        "devices (0 without CUDA: a CPU run)",
    )
    parser.add_argument(
        "--accelerator",
        help="model name, e.g. NVIDIA A100-SXM4-80GB; default: "
        "the logs', else this host's CUDA device",
    )
    parser.add_argument(
        "--field",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any system description field; repeatable",
    )
    parser.add_argument("--system-json", help="a system description whose fields win")
    parser.add_argument("--force", action="store_true", help="replace an existing package")
    parser.add_argument(
        "--allow-aborted",
        action="store_true",
        help="package runs whose run_stop says aborted (not converged); MLPerf "
        "scores at most one of 10, as the slowest",
    )
    parser.add_argument(
        "--unofficial",
        action="store_true",
        help="for test runs: exit 0 even when the checkers or rules reject the "
        "package; the output and DIR/" + MARKER + " say so and why",
    )
    parser.add_argument(
        "--skip-checks",
        action="store_true",
        help="layout and score only, no checker (quick look; not a submission)",
    )
    args = parser.parse_args(argv)
    try:  # before any log is read: the folder the package goes to, and the inputs' kind
        check_output_path(args.out, "--out", PackageError, folder=True)
        if args.system_json:
            check_regular(args.system_json, "--system-json", PackageError)
    except PackageError as err:
        parser.error(str(err))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return package(args)
    except (PackageError, LogError, system_desc.DescriptionError, BadInputError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
