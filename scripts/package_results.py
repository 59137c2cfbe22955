#!/usr/bin/env python3
"""Lay out MLPerf result logs as a submission, run the official checkers, print the score.

    python scripts/package_results.py RUNS... --system NAME --out DIR [--strict]

RUNS are result logs, or folders holding result_*.txt (launch/run_and_time.sh) or a mlperf.log
(one run's output_dir), taken in the order given. The package is

    DIR/results/<system>/bert/result_<i>.txt
    DIR/systems/<system>.json      MLPerf system description (flags, then --field, then
                                   --system-json; fields nobody filled say "unknown")

Then, for training ruleset 5.0.0 (REFERENCE 1): the compliance checker on every log, the
RCP checker on the results folder and the package checker on DIR; their verdicts are printed.
The score is the olympic mean of run_stop - run_start in minutes: a non-converged run counts as
the slowest, the fastest and slowest are dropped, the rest averaged; more than one
non-converged run leaves no score. (The official result_summarizer also applies the RCP
checker's scaling factor, when there is one.)

Exit status 1 when a converged run fails the compliance checker, more than one run did not
converge, or no log was found; with --strict also when the package or RCP checker fails or the
run count is not 10. Otherwise 0, whatever the package and RCP checkers say (tiny runs have no
RCP entry; their verdict is reported, not hidden). Exit status 2 for bad arguments or logs.
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
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import check_compliance  # scripts/ is this script's own folder, first on sys.path
from mlperf_logging.compliance_checker import mlp_parser

RULESET = "5.0.0"
BENCHMARK = "bert"
RUNS_PER_SUBMISSION = 10  # REFERENCE 1
AVAILABILITY = {"onprem": "Available on-premise", "cloud": "Available cloud",
                "research": "Research, Development, or Internal (RDI)", "preview": "Preview"}
# system_desc_checker's required fields that no flag fills.
OTHER_FIELDS = (
    "host_processors_per_node", "host_processor_model_name", "host_processor_core_count",
    "host_processor_vcpu_count", "host_processor_frequency", "host_processor_caches",
    "host_processor_interconnect", "host_memory_capacity", "host_storage_type",
    "host_storage_capacity", "host_networking", "host_networking_topology",
    "host_memory_configuration", "accelerator_host_interconnect", "accelerator_frequency",
    "accelerator_on-chip_memories", "accelerator_memory_configuration",
    "accelerator_memory_capacity", "accelerator_interconnect",
    "accelerator_interconnect_topology", "cooling", "hw_notes", "operating_system", "sw_notes")


class PackageError(Exception):
    """Bad arguments or logs (exit status 2)."""


@dataclass
class Run:
    path: Path
    seed: int | None
    status: str  # run_stop's status, or "missing" when the log has no run_stop
    minutes: float  # run_stop - run_start; inf when the run did not converge
    org: str | None
    division: str | None
    submission_status: str | None

    @property
    def converged(self) -> bool:
        return self.status == "success"


# -- reading logs -----------------------------------------------------------------------------

def read_run(path: Path) -> Run:
    lines, errors = mlp_parser.parse_file(str(path), ruleset=RULESET)
    if errors:
        raise PackageError(f"{path}: {len(errors)} unparsable MLLOG line(s), first: "
                           f"{errors[0][0][:120]!r}")
    first = {}
    for line in lines:
        first.setdefault(line.key, line)
    start, stop = first.get("run_start"), first.get("run_stop")
    status = stop.value["metadata"].get("status", "missing") if stop else "missing"
    minutes = (stop.timestamp - start.timestamp) / 60_000 if start and stop else math.inf

    def value(key: str):
        return first[key].value["value"] if key in first else None

    return Run(path, value("seed"), status, minutes if status == "success" else math.inf,
               value("submission_org"), value("submission_division"),
               value("submission_status"))


def collect_logs(paths: list[str]) -> list[Path]:
    logs: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            logs.append(path)
        elif path.is_dir() and list(path.glob("result_*.txt")):
            logs += sorted(path.glob("result_*.txt"),
                           key=lambda p: int(re.sub(r"\D", "", p.stem) or 0))
        elif (path / "mlperf.log").is_file():
            logs.append(path / "mlperf.log")
        else:
            raise PackageError(f"{path}: not a log, and holds no result_*.txt or mlperf.log")
    if not logs:
        raise PackageError("no result logs given")
    return logs


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

def lay_out(logs: list[Path], out: Path, system: str, force: bool) -> list[Path]:
    bench = out / "results" / system / BENCHMARK
    if bench.exists() and any(bench.iterdir()):
        if not force:
            raise PackageError(f"{bench} is not empty; pass --force to replace its files")
        shutil.rmtree(bench)
    bench.mkdir(parents=True)
    copies = []
    for i, log in enumerate(logs):
        copies.append(Path(shutil.copyfile(log, bench / f"result_{i}.txt")))
    return copies


def system_description(args: argparse.Namespace, runs: list[Run]) -> dict:
    status = runs[0].submission_status or "onprem"
    desc = {
        "submitter": args.submitter or runs[0].org or "unknown",
        "division": args.division or runs[0].division or "closed",
        "status": AVAILABILITY.get(status, status),
        "system_name": args.system,
        "number_of_nodes": str(args.nodes),
        "accelerators_per_node": str(args.accelerators_per_node),
        "accelerator_model_name": args.accelerator,
        "framework": f"PyTorch {_version('torch')}",
        "other_software_stack": f"mlperf-logging {_version('mlperf-logging')}",
    }
    desc.update({name: "unknown" for name in OTHER_FIELDS})
    for item in args.field:
        key, sep, value = item.partition("=")
        if not sep:
            raise PackageError(f"--field {item!r}: expected key=value")
        desc[key] = value
    if args.system_json:
        desc.update(json.loads(Path(args.system_json).read_text()))
    return desc


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "unknown"


def write_system(out: Path, system: str, desc: dict) -> Path:
    path = out / "systems" / f"{system}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(desc, indent=2) + "\n")
    return path


# -- checkers ---------------------------------------------------------------------------------

def compliance(copies: list[Path]) -> list[check_compliance.Verdict]:
    options = argparse.Namespace(usage="training", ruleset=RULESET, werror=False)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:  # one process per log
        return list(pool.map(lambda p: check_compliance.run_checker(p, options), copies))


def run_module(module: str, *args: str) -> tuple[int, str]:
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([sys.executable, "-m", module, *args, "--log_output",
                               os.path.join(tmp, "checker.log")],
                              capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def rcp_checker(bench: Path) -> tuple[bool, list[str]]:
    code, output = run_module("mlperf_logging.rcp_checker", "--rcp_version", RULESET,
                              "--rcp_usage", "training", str(bench))
    return code == 0, _verdict_lines(output, ("RCP", "Missing", "Insufficient", "Could not"))


def package_checker(out: Path) -> tuple[bool, list[str]]:
    code, output = run_module("mlperf_logging.package_checker", str(out), "training", RULESET)
    passed = code == 0 and "PACKAGE CHECKER FOUND NO ERRORS" in output
    return passed, _verdict_lines(output, ("ERROR",))


def _verdict_lines(output: str, markers: tuple[str, ...], width: int = 200) -> list[str]:
    """The checker's lines that carry its verdict or reasons, cut to `width` characters."""
    return [line.strip()[:width] for line in output.splitlines()
            if any(m in line for m in markers)]


# -- report -----------------------------------------------------------------------------------

def report_runs(runs: list[Run], verdicts: list[check_compliance.Verdict]) -> int:
    """Print one line per run; returns how many converged runs failed compliance."""
    bad = 0
    for i, (run, verdict) in enumerate(zip(runs, verdicts)):
        took = f"{run.minutes:.3f} min" if run.converged else f"not converged ({run.status})"
        print(f"result_{i}.txt  seed {run.seed}  {took}  compliance "
              f"{'PASS' if verdict.passed else 'FAIL'}  <- {run.path}")
        if not verdict.passed:
            bad += run.converged
            for reason in verdict.reasons[:5]:
                print(f"    {reason}")
    return bad


def report_checker(name: str, result: tuple[bool, list[str]]) -> bool:
    passed, lines = result
    print(f"{name}: {'PASS' if passed else 'FAIL'}")
    for line in lines[:12]:
        print(f"    {line}")
    return passed


def package(args: argparse.Namespace) -> int:
    out = Path(args.out)
    logs = collect_logs(args.runs)
    runs = [read_run(p) for p in logs]
    copies = lay_out(logs, out, args.system, args.force)
    system_json = write_system(out, args.system, system_description(args, runs))
    print(f"package: {len(copies)} logs in {copies[0].parent}, system description "
          f"{system_json}")
    failures = 0
    if args.skip_checks:
        print("checkers: skipped (--skip-checks); a submission must pass them")
        verdicts = [check_compliance.Verdict(p, True) for p in copies]
    else:
        verdicts = compliance(copies)
    failures += report_runs(runs, verdicts)
    strict_failures = 0
    if not args.skip_checks:
        strict_failures += not report_checker("rcp checker", rcp_checker(copies[0].parent))
        strict_failures += not report_checker("package checker", package_checker(out))
    if len(runs) != RUNS_PER_SUBMISSION:
        print(f"note: {len(runs)} runs; a BERT submission has {RUNS_PER_SUBMISSION}")
        strict_failures += 1
    try:
        score = olympic_mean([r.minutes for r in runs])
        print(f"score: {score:.3f} min (olympic mean of {len(runs) - 2} of {len(runs)} runs)")
    except NoScore as err:
        print(f"score: none ({err})")
        failures += err.fatal
        strict_failures += 1
    return 1 if failures or (args.strict and strict_failures) else 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", metavar="RUNS")
    parser.add_argument("--system", required=True, help="system name: folder and json name")
    parser.add_argument("--out", required=True, help="submission folder (the submitter's)")
    parser.add_argument("--submitter", help="default: the logs' submission_org")
    parser.add_argument("--division", choices=("closed", "open"),
                        help="default: the logs' submission_division")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--accelerators-per-node", type=int, default=8)
    parser.add_argument("--accelerator", default="unknown", help="e.g. NVIDIA A100-SXM4-80GB")
    parser.add_argument("--field", action="append", default=[], metavar="KEY=VALUE",
                        help="any system description field; repeatable")
    parser.add_argument("--system-json", help="a system description whose fields win")
    parser.add_argument("--force", action="store_true", help="replace an existing package")
    parser.add_argument("--strict", action="store_true",
                        help="also fail on package/RCP checker failures and run count != 10")
    parser.add_argument("--skip-checks", action="store_true",
                        help="layout and score only (quick look; not for submission)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return package(args)
    except (PackageError, OSError, json.JSONDecodeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
