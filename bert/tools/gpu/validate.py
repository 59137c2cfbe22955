"""The GPU harness: turns one short GPU window into validated kernels and measured throughput.

    python scripts/bench/validate_gpu.py window [--continue SUMMARY] [--dry-run] [--out DIR]
    python scripts/bench/validate_gpu.py {kernels,throughput,fused} [--dry-run] [--out DIR]

Run it through scripts/bench/validate_gpu.sh, which first installs the wheels carried in .whl/.
`window` is what to run first whenever a GPU is lent (window.py: one command
within 420 s, its steps ordered by what they reveal, each started only if its expected time
fits what is left; `--continue` runs what it left within 240 s). The three stages below are
for a longer lease. Each is one device command, planned to end inside BUDGET_S seconds
(default 540, under the device's 10-minute limit): every step gets its own timeout, cut to
what is left of the budget, and the summary is rewritten after every step, so a hang costs one
step, not the window.

    kernels     build for this GPU's arch with all cores; every GPU test (a missing or failing
                build FAILS the kernel tests); each kernel microbenchmark eager, then one size
                against torch.compile
    throughput  BERT-Large bf16 on the MLPerf length mix without custom kernels: flash_varlen
                and the unpadded reference against HF padded eager and HF compiled; then the
                choice among the attention backends (eager and compiled)
    fused       the same with every fused switch on, with a per-op profile

The output folder (OUT, else --out, else results/gpu-validation/<stage>) receives two files,
summary.json and logs_<stage>.tar.gz (every log and raw JSON): the device returns 8 at most.
--dry-run, on a CPU machine, does every step that needs no GPU: the commit, the collection of
every GPU test with mlperf_logging hidden (the GPU image has none), each benchmark command
checked against its --help, the summary and the file count. CI runs it
(tests/tools/test_validate_gpu.py).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from bert.model.fused import FUSED_OPS
from bert.optim.specs import OPTIMIZERS
from bert.tools.common import ROOT, git_commit
from bert.tools.gpu import report as gpu_report
from bert.tools.gpu import pytest_journal
from bert.tools.gpu import window as gpu_window
from bert.tools.gpu.launch import gpu_pytest_args, gpu_test_env, run_capped, timeout_args

STAGES = ("window", "kernels", "throughput", "fused")
BUDGETS_S = {"window": gpu_window.WINDOW_BUDGET_S, "kernels": 540, "throughput": 540, "fused": 540}
MAX_FILES = 8  # what the device tool brings back from $OUT
RESERVE_S = 15  # kept back from the budget for the summary and the tarball
PY = sys.executable

# Kernel microbenchmarks: (script, eager arguments, one compiled size or None when the op has no
# torch.compile competitor), each run under its own timeout.
MICROBENCH_TIMEOUT_S = 90
MAX_CRASH_RERUNS = 3  # a GPU test file that keeps dying is not worth the whole window
# BERT-Large bf16 on the MLPerf length mix (bench_throughput.py's defaults on CUDA).
THROUGHPUT = {
    "throughput": [
        (
            "throughput_flash_varlen",
            [
                "--fastest",
                "flash_varlen",
                "--variants",
                "fastest,reference,hf_eager",
                "--hf-compile",
            ],
            270,
        ),
        (
            "throughput_flash_varlen_subset",
            ["--fastest", "flash_varlen+subset", "--variants", "fastest"],
            90,
        ),
        (
            "throughput_backend_choice",
            [
                "--fastest",
                "auto",
                "--include-unvalidated",
                "--no-fused",
                "--no-subset",
                "--variants",
                "fastest",
            ],
            170,
        ),
        # torch.compile's fusion of the sublayers, the competitor to the fused kernels; last,
        # so the budget cuts it first
        (
            "throughput_compiled_sublayers",
            ["--fastest", "flash_varlen+sublayers", "--variants", "fastest"],
            120,
        ),
    ],
    "fused": [
        (
            "throughput_fused_flash_varlen",
            [
                "--fastest",
                "flash_varlen+fused",
                "--variants",
                "fastest,reference,hf_eager",
                "--profile",
            ],
            240,
        ),
        (
            "throughput_fused_flash_varlen_subset",
            ["--fastest", "flash_varlen+fused+subset", "--variants", "fastest"],
            90,
        ),
        (
            "throughput_fused_grouped_flash",
            ["--fastest", "grouped_flash+fused", "--variants", "fastest"],
            120,
        ),
    ],
}


def microbenchmarks() -> list[tuple[str, list[str], list[str] | None]]:
    """(script, eager arguments, compiled arguments or None) of every kernel benchmark a record
    names (the fused ops', the optimizers' fused kernels'), each script once, read when the
    window runs: a kernel's record brings its benchmark into the window."""
    named = [op.bench for op in FUSED_OPS.values()] + [
        spec.sharded.fused_bench for spec in OPTIMIZERS.values() if spec.sharded
    ]
    benches = {bench.script: bench for bench in named if bench is not None}
    return [
        (b.script, ["--no-compile"], None if b.compiled is None else list(b.compiled))
        for b in benches.values()
    ]


class Harness:
    """Runs one stage's steps under a budget and keeps summary.json current."""

    def __init__(self, stage: str, out: Path, dry_run: bool, budget_s: float):
        self.stage, self.out, self.dry_run = stage, out, dry_run
        self.budget_s, self.reserve_s = budget_s, RESERVE_S
        self.root, self.py = ROOT, PY
        self.done: set[str] = set()  # steps an earlier call finished (window --continue)
        self.helped: dict[str, tuple[str, int]] = {}  # dry run: script -> (step, its --help code)
        self.deadline = time.monotonic() + budget_s
        commit = git_commit()
        if commit == "unknown":
            # A refusal here would cost a whole device command: record it and go on.
            print(
                "warning: validate_gpu: no commit to record (no .git, no BERT_COMMIT, no "
                ".whl/COMMIT): the records say 'unknown'",
                file=sys.stderr,
            )
        self.env = dict(os.environ, PYTHONUNBUFFERED="1", BERT_COMMIT=commit)
        self.work = Path(tempfile.mkdtemp(prefix=f"gpu-{stage}-"))
        self.summary = {
            "stage": stage,
            "dry_run": dry_run,
            "commit": self.env["BERT_COMMIT"],
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": shlex.join([PY, *sys.argv]),
            "budget_s": budget_s,
            "steps": [],
        }

    # -- running -------------------------------------------------------------------------------

    def remaining(self) -> float:
        return self.deadline - time.monotonic() - RESERVE_S

    def step(
        self,
        name: str,
        argv: list[str],
        limit_s: float,
        env: dict | None = None,
        planned: list[str] | None = None,
    ) -> int:
        """Run one command with its output in <work>/<name>.log; record it; return its code.
        `planned`: in a dry run, the command a GPU run would have run instead."""
        timeout = min(limit_s, self.remaining())
        record = {"name": name, "command": shlex.join(argv), "log": f"{name}.log"}
        if planned is not None:
            record["planned_command"] = shlex.join(planned)
        if self.remaining() < 5:
            record.update(status="skipped", reason="out of budget")
            return self._record(record, 124)
        start = time.monotonic()
        with open(self.work / f"{name}.log", "w") as log:
            code = run_capped(argv, {**self.env, **(env or {})}, log, timeout)
        record.update(
            seconds=round(time.monotonic() - start, 1),
            returncode=code,
            status="ok" if code == 0 else "timeout" if code == 124 else "failed",
        )
        if code == 124:
            record["timeout_s"] = round(timeout)
        print(f"[{self.stage}] {name}: {record['status']} ({record['seconds']} s)", flush=True)
        return self._record(record, code)

    def _record(self, record: dict, code: int) -> int:
        self.summary["steps"].append(record)
        self.write()
        return code

    # -- stages --------------------------------------------------------------------------------

    def device_info(self, cap_s: float = 120) -> None:
        code = (
            "import json, torch; c = torch.cuda.is_available(); p = c and "
            "torch.cuda.get_device_properties(0); b = torch.backends; print(json.dumps({"
            "'device': p.name if c else 'cpu (dry run)', 'capability': '%d.%d' % (p.major, "
            "p.minor) if c else None, 'sm_count': p.multi_processor_count if c else None, "
            "'torch': torch.__version__, 'cuda': torch.version.cuda, 'driver': "
            "(getattr(torch._C, '_cuda_getDriverVersion', None) or (lambda: None))() if c else "
            "None, 'cudnn': "
            "b.cudnn.version() if c else None, 'sdpa': {'flash': "
            "b.cuda.is_flash_attention_available(), 'flash_enabled': "
            "b.cuda.flash_sdp_enabled(), 'efficient_enabled': "
            "b.cuda.mem_efficient_sdp_enabled(), 'cudnn_enabled': b.cuda.cudnn_sdp_enabled(),"
            " 'math_enabled': b.cuda.math_sdp_enabled()}, 'cpu_count': "
            "__import__('os').cpu_count()}))"
        )
        failed = self.step("device", [PY, "-c", code], cap_s) != 0
        log = (self.work / "device.log").read_text().strip().splitlines()
        try:
            self.summary.update(json.loads(log[-1]))
        except (IndexError, json.JSONDecodeError):
            self.summary["device"] = "unknown: the device query failed (device.log)"
        if failed and not self.dry_run:
            last = log[-1] if log else "no output"
            raise HarnessError(f"the device query failed: {last} (device.log)")
        if not self.dry_run and self.summary.get("capability") is None:
            raise HarnessError("no CUDA GPU visible to PyTorch (use --dry-run on a CPU machine)")

    def build(self, cap_s: float = 300) -> bool:
        """Build for this GPU's arch only, with every core; True when the build succeeded."""
        if self.dry_run:
            self._record({"name": "build", "status": "skipped", "reason": "dry run"}, 0)
            return True
        env = toolchain_env()
        argv = [
            PY,
            "-m",
            "kernels.build",
            "--build-dir",
            "build/kernels",
            "--arch",
            self.summary["capability"],
            "--jobs",
            str(os.cpu_count() or 1),
        ]
        return self.step("build", argv, cap_s, env) == 0

    def collect_gpu_tests(self, files: list[str]) -> None:
        """Dry run: collect every GPU test as the image would (without mlperf_logging), and
        record any collected file the window's per-file list lacks."""
        args = ["-m", "gpu", "tests", "-q", "--collect-only", "-p", "no:cacheprovider"]
        self.step(
            "gpu_tests", [PY, "scripts/bench/pytest_without.py", "mlperf_logging", *args], 120
        )
        self.summary["tests"] = gpu_report.collected(self.work / "gpu_tests.log")
        missing = sorted(set(self.summary["tests"]["per_file"]) - set(files))
        self.summary["test_files"] = files
        if missing:
            self.summary["steps"][-1].update(
                status="failed", reason=f"GPU test files not in the window: {missing}"
            )
            self.write()

    def run_gpu_test_file(
        self, name: str, path: str, junit: Path, cap_s: float, require_kernels: bool
    ) -> dict[str, dict]:
        """One GPU test file in its own pytest process, each test journaled as it ends
        (bert.tools.gpu.pytest_journal). When the process dies in a test (a device fault), that
        test is recorded as crashed and the file runs again without it and without the tests
        that already have a verdict, at most MAX_CRASH_RERUNS times within `cap_s`.
        Returns the journal: nodeid -> outcome (and the failure text)."""
        journal = self.work / f"{name}.journal.jsonl"
        deadline = time.monotonic() + cap_s
        env = {**gpu_test_env(require_kernels), pytest_journal.JOURNAL_ENV: str(journal)}
        tests: dict[str, dict] = {}  # the journal so far: every test with a verdict
        for attempt in range(MAX_CRASH_RERUNS + 1):
            args = [
                *gpu_pytest_args(path, junit),
                "-p",
                "bert.tools.gpu.pytest_journal",
                *(f"--deselect={nodeid}" for nodeid in tests),
                *timeout_args(),
            ]
            step_name = name if attempt == 0 else f"{name}_after_crash_{attempt}"
            code = self.step(
                step_name, [PY, "-m", "pytest", *args], deadline - time.monotonic(), env
            )
            finished, tests = tests, pytest_journal.read_journal(journal)
            crashed = [
                nodeid
                for nodeid, test in tests.items()
                if test["outcome"] == "crashed" and nodeid not in finished
            ]
            # Ended by itself (0 all passed, 1 some failed, 5 none left), timed out, or died
            # outside any test: nothing a rerun would add.
            if code in (0, 1, 5, 124) or not crashed or time.monotonic() >= deadline:
                break
        return tests

    def gpu_tests(self, require_kernels: bool) -> None:
        junit = self.work / "gpu-tests.xml"
        args = gpu_pytest_args("tests", junit)
        if self.dry_run:
            # Collect as the GPU image would: without mlperf_logging.
            self.step(
                "gpu-tests",
                [PY, "scripts/bench/pytest_without.py", "mlperf_logging", "--collect-only", *args],
                120,
            )
            self.summary["tests"] = gpu_report.collected(self.work / "gpu-tests.log")
            return
        self.step(
            "gpu-tests",
            [PY, "-m", "pytest", *args, *timeout_args()],
            330,
            gpu_test_env(require_kernels),
        )
        self.summary["tests"] = gpu_report.junit_counts(junit)

    def microbenchmarks(self) -> None:
        rows = {}
        for script, eager, compiled in microbenchmarks():
            runs = [(f"{script}", eager)]
            if compiled is not None:
                runs.append((f"{script}_compiled", compiled))
            for name, extra in runs:
                out = self.work / f"{name}.json"
                argv = [PY, f"scripts/bench/{script}.py", *extra, "--out", str(out)]
                if self.check_or_run(name, argv, MICROBENCH_TIMEOUT_S) and out.is_file():
                    rows[name] = gpu_report.speedups(json.loads(out.read_text()))
        self.summary["microbench"] = rows

    def throughput(self) -> None:
        results = {}
        for name, extra, limit in THROUGHPUT[self.stage]:
            out = self.work / f"{name}.json"
            argv = [
                PY,
                "scripts/bench_throughput.py",
                "--model",
                "large",
                *extra,
                "--json",
                str(out),
            ]
            if self.check_or_run(name, argv, limit) and out.is_file():
                results[name] = gpu_report.throughput(json.loads(out.read_text()))
        self.summary["throughput"] = results
        self.summary["targets"] = gpu_report.targets(results)

    def check_or_run(self, name: str, argv: list[str], limit_s: float) -> bool:
        """Run the command; in a dry run, check that it imports and knows every flag given."""
        if not self.dry_run:
            return self.step(name, argv, limit_s) == 0
        script = argv[1]
        if script in self.helped:  # the same script's --help already ran: read it again
            first, code = self.helped[script]
            self._record(
                {
                    "name": name,
                    "command": shlex.join(argv[:2] + ["--help"]),
                    "log": f"{first}.log",
                    "planned_command": shlex.join(argv),
                    "status": "ok" if code == 0 else "failed",
                    "returncode": code,
                    "reason": f"--help shared with step {first}",
                },
                code,
            )
        else:
            code = self.step(name, argv[:2] + ["--help"], 120, planned=argv)
            self.helped[script] = (name, code)
            first = name
        flags = [a for a in argv[2:] if a.startswith("--")]
        help_text = (self.work / f"{first}.log").read_text()
        unknown = [f for f in flags if f not in help_text]
        if unknown:
            self.summary["steps"][-1].update(status="failed", reason=f"unknown flags {unknown}")
            self.write()
        return code == 0 and not unknown

    # -- output --------------------------------------------------------------------------------

    def write(self) -> None:
        """summary.json and the tarball of every log and raw JSON, both written atomically."""
        self.out.mkdir(parents=True, exist_ok=True)
        self.summary["files"] = sorted(p.name for p in self.work.iterdir())
        tarball = self.out / f"logs_{self.stage}.tar.gz"
        with tarfile.open(tarball.with_suffix(".tmp"), "w:gz") as tar:
            for path in sorted(self.work.iterdir()):
                tar.add(path, arcname=f"{self.stage}/{path.name}")
        tarball.with_suffix(".tmp").replace(tarball)
        summary = self.out / "summary.json"
        summary.with_suffix(".tmp").write_text(json.dumps(self.summary, indent=2) + "\n")
        summary.with_suffix(".tmp").replace(summary)

    def finish(self) -> int:
        failed = [s["name"] for s in self.summary["steps"] if s["status"] not in ("ok", "skipped")]
        count = sum(1 for p in self.out.rglob("*") if p.is_file())
        self.summary.update(failed_steps=failed, out_files=count)
        self.write()
        shutil.rmtree(self.work, ignore_errors=True)
        if count > MAX_FILES:
            print(
                f"error: {self.out} holds {count} files; the device returns {MAX_FILES}",
                file=sys.stderr,
            )
            return 1
        print(
            f"[{self.stage}] wrote {self.out}/summary.json and logs_{self.stage}.tar.gz; "
            f"failed steps: {', '.join(failed) or 'none'}"
        )
        return 1 if failed else 0


class HarnessError(Exception):
    """Bad setup: one `error:` line, exit status 2."""


def toolchain_env() -> dict:
    """CUDA_HOME as given, else the folder of the nvcc on PATH or in a usual place."""
    if os.environ.get("CUDA_HOME"):
        return {}
    nvcc = shutil.which("nvcc") or next(
        (str(p) for p in sorted(Path("/usr/local").glob("cuda*/bin/nvcc"))), None
    )
    if nvcc is None:
        raise HarnessError("nvcc not found on PATH or under /usr/local/cuda*: set CUDA_HOME")
    home = Path(nvcc).resolve().parent.parent
    return {"CUDA_HOME": str(home), "PATH": f"{home / 'bin'}:{os.environ.get('PATH', '')}"}


def run_stage(h: Harness, previous: dict | None = None) -> None:
    if h.stage == "window":
        gpu_window.run_window(h, previous)
        return
    h.device_info()
    if h.stage == "kernels":
        built = h.build()
        h.gpu_tests(require_kernels=True)
        if built:
            h.microbenchmarks()
        else:
            h._record({"name": "microbench", "status": "skipped", "reason": "build failed"}, 1)
    elif h.stage == "throughput":
        h.throughput()
    else:
        if h.build():
            h.throughput()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("stage", choices=STAGES)
    p.add_argument("--dry-run", action="store_true", help="on a CPU: every step needing no GPU")
    p.add_argument("--out", type=Path, help="output folder (the OUT variable wins)")
    p.add_argument(
        "--continue",
        dest="previous",
        type=Path,
        metavar="SUMMARY",
        help="window: run only the steps this earlier summary.json did not finish",
    )
    args = p.parse_args(argv)
    if args.previous and args.stage != "window":
        p.error("--continue is for the window stage")
    out = Path(
        os.environ.get("OUT") or args.out or ROOT / "results" / "gpu-validation" / args.stage
    ).resolve()
    # the --continue call is the short second one (window.py: CONTINUE_BUDGET_S)
    default = gpu_window.CONTINUE_BUDGET_S if args.previous else BUDGETS_S[args.stage]
    budget = float(os.environ.get("BUDGET_S", default))
    previous = gpu_window.load_previous(args.previous) if args.previous else None
    try:
        h = Harness(args.stage, out, args.dry_run, budget)
        run_stage(h, previous)
    except HarnessError as err:
        print(f"error: validate_gpu: {err}", file=sys.stderr)
        return 2
    return h.finish()
