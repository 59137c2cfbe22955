"""Submission packaging (bert/submission/package.py, reader.py; scripts/package_results.py) and run
plots (bert/submission/plot.py; scripts/plot_run.py).

Two kinds of logs:
- real tiny ones, made once per session by `python run_pretraining.py` (CPU, a 1-layer BERT,
  target 1.0 so every run ends aborted): an uninterrupted run, and a run killed after step 5
  (checkpoints every 2 steps, SIGKILL through tests/faults.py) then resumed from step 4.
  "Converged" copies are these logs edited by hand (last accuracy 0.725, run_stop success,
  their own seed and timing);
- ten fake BERT-Large runs written with bert.mlperf.writer.MLPerfLogger (distinct seeds, GBS 448, an
  eval every 150,000 samples, 2.4-2.55M samples: what the RCP for 448 expects) and re-timed,
  since the logger stamps the real clock.
Rules from REFERENCE 1: 10 runs, drop the fastest and slowest, average 8; at most one run may
fail to converge (it counts as the slowest). Exit status 0 ok, 1 checker or rule failure,
2 bad input.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

# The packaging scripts read logs with mlperf-logging; where it is absent (the bare GPU image)
# these tests skip instead of failing the collection of the whole suite.
pytest.importorskip("mlperf_logging")

from bert.config import Config
from bert.submission import package as package_results
from bert.submission import plot as plot_run
from bert.submission import reader as run_logs
from bert.submission import system_desc
from bert.mlperf.writer import MLPerfLogger
from bert.train.run_shape import RunShape
from bert.submission.system_desc import cpu_model
from bert.tools.common import set_args

from commands import check_compliance, run_python
from tiny_run import TINY_SHAPE, make_tiny_data

ROOT = Path(__file__).resolve().parents[2]
BLOCK = 150_000  # eval spacing for GBS 448 (REFERENCE 1)
MINUTES = [30.0, 25.0, 27.0, 29.0, 31.0, 26.0, 28.0, 33.0, 24.0, 32.0]
INIT_MS = 30_000
TINY_GBS, KILL_STEP, RESUME_STEP = 8, 5, 4


# -- logs -----------------------------------------------------------------------------------------


def records(path: Path) -> list[dict]:
    return [
        json.loads(line.split(":::MLLOG ", 1)[1])
        for line in path.read_text().splitlines()
        if ":::MLLOG" in line
    ]


def write_records(path: Path, recs: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f":::MLLOG {json.dumps(r)}\n" for r in recs))
    return path


def write_log(path: Path, seed: int, converge: bool, blocks: int = 17) -> Path:
    """A complete closed-division BERT log; accuracy reaches 0.725 at the last block if
    `converge`, else stops at 0.70 (run_stop aborted)."""
    cfg = Config()
    path.parent.mkdir(parents=True, exist_ok=True)
    with MLPerfLogger(str(path), rank=0) as log:
        log.cache_clear(True)
        log.init_start()
        log.submission_info("open-bert", "1x8xA100-SXM4-80GB", "closed", "onprem")
        log.hyperparameters(
            cfg,
            RunShape.build(cfg, 8),
            train_samples=blocks * BLOCK,
            eval_samples=10_000,
            seed=seed,
        )
        log.init_stop()
        log.run_start()
        for b in range(blocks):
            log.block_start(b * BLOCK, b * BLOCK, BLOCK)
            log.block_stop((b + 1) * BLOCK, b * BLOCK, BLOCK)
            log.eval_start((b + 1) * BLOCK)
            log.eval_stop((b + 1) * BLOCK)
            top = 0.725 if converge else 0.70
            log.eval_accuracy(0.35 + (top - 0.35) * (b + 1) / blocks, (b + 1) * BLOCK)
        log.run_stop("success" if converge else "aborted")
    return path


def retime(path: Path, minutes: float, t0_ms: int = 1_700_000_000_000) -> Path:
    """Init lines 1 ms apart, run_start 30 s after init_start, the run's lines evenly spread so
    that run_stop comes `minutes` after run_start."""
    recs = records(path)
    start = next(i for i, r in enumerate(recs) if r["key"] == "run_start")
    run_ms, body = round(minutes * 60_000), len(recs) - start - 1
    for i, record in enumerate(recs):
        if i < start:
            record["time_ms"] = t0_ms + i
        else:
            record["time_ms"] = t0_ms + INIT_MS + round(run_ms * (i - start) / body)
    return write_records(path, recs)


def make_runs(folder: Path, failed: tuple[int, ...] = ()) -> Path:
    """result_0..9.txt as launch/run_and_time.sh leaves them."""
    for i, minutes in enumerate(MINUTES):
        log = write_log(
            folder / f"result_{i}.txt",
            seed=1000 + 7 * i,
            converge=i not in failed,
            blocks=16 + i % 2,
        )
        retime(log, minutes)
    return folder


def converged_copy(src: Path, dst: Path, seed: int, minutes: float) -> Path:
    """A real tiny log edited to a converged run: last accuracy 0.725, run_stop success."""
    recs = records(src)
    for r in recs:
        if r["key"] == "seed":
            r["value"] = seed
        if r["key"] == "run_stop":
            r["metadata"]["status"] = "success"
    next(r for r in reversed(recs) if r["key"] == "eval_accuracy")["value"] = 0.725
    return retime(write_records(dst, recs), minutes)


def with_event(src: Path, dst: Path, key: str, value, after: str = "eval_samples") -> Path:
    """A copy of `src` with one POINT_IN_TIME event added after the line with key `after`."""
    out = []
    for r in records(src):
        out.append(r)
        if r["key"] == after:
            out.append(
                {
                    **r,
                    "event_type": "POINT_IN_TIME",
                    "key": key,
                    "value": value,
                    "metadata": {"file": "hand-edited", "lineno": 0},
                }
            )
    return write_records(dst, out)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    """Real logs of `python run_pretraining.py`: whole/mlperf.log (uninterrupted, aborted at
    the step budget), killed/mlperf.log.<time>-<pid>.partial (SIGKILL after step 5, no
    run_stop: the log never took its final name) and killed/mlperf_resumed_step_4.log (the
    resume from the step-4 checkpoint)."""
    base = tmp_path_factory.mktemp("tiny_runs")
    data = base / "data"
    make_tiny_data(data)
    settings = {
        **TINY_SHAPE,
        "data.synthetic.enabled": "false",
        "data.train_dir": data,
        "data.eval_file": data / "eval.hdf5",
        "run.global_batch_size": TINY_GBS,
        "run.max_steps": 8,
        "eval.interval_samples": 2 * TINY_GBS,
        "eval.samples": 40,
        "run.device": "cpu",
        "run.seed": 7,
        "eval.target_mlm_accuracy": 1.0,
        "checkpoint.interval_steps": 2,
        "log.interval_s": 1000,
        "schedule.total_steps": 20,
        "schedule.warmup_steps": 2,
        "submission.division": "closed",
    }

    def run(out: Path, *extra: str, **env: str) -> subprocess.CompletedProcess:
        # tests/faults.py is run_pretraining.py with the faults `env` asks for
        program = ROOT / ("tests/faults.py" if env else "run_pretraining.py")
        args = ["--quiet", *extra, *set_args({**settings, "run.output_dir": out})]
        return run_python(program, *args, timeout=600, env={**os.environ, **env})

    whole = run(base / "whole")
    # a budget stop (8 of the schedule's 20 steps): exit 0, yet its log says run_stop aborted
    # and the packager refuses it (LOG_CASES "not converged")
    assert whole.returncode == 0, whole.stdout[-2000:] + whole.stderr[-2000:]
    killed = run(base / "killed", BERT_TEST_KILL_RANK="0", BERT_TEST_KILL_STEP=str(KILL_STEP))
    assert killed.returncode != 0 and not (base / "killed" / "mlperf_resumed_step_4.log").exists()
    resumed = run(base / "killed", "--resume", "auto")
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert not (base / "killed" / "mlperf.log").exists()
    logs = {
        "whole": base / "whole" / "mlperf.log",
        "killed": next((base / "killed").glob("mlperf.log.*.partial")),
        "resumed": base / "killed" / f"mlperf_resumed_step_{RESUME_STEP}.log",
    }
    for path in logs.values():
        assert path.is_file(), sorted(p.name for p in path.parent.iterdir())
    return logs


def package(*args: str) -> subprocess.CompletedProcess:
    return run_python(ROOT / "scripts" / "package_results.py", *args, timeout=300)


def last_line(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout.strip().splitlines()[-1]


def assert_refused(proc: subprocess.CompletedProcess, *fragments: str) -> str:
    """Exit status 2, exactly one `error:` line holding every fragment, no traceback."""
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and proc.stderr.strip() == errors[0], proc.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


# -- which logs are runs --------------------------------------------------------------------------


def test_the_real_logs_are_what_the_fixture_says(tiny):
    """The trainer's own logs: a killed run has no run_stop; the resumed one starts at step 4."""
    assert not any(r["key"] == "run_stop" for r in records(tiny["killed"]))
    first_block = next(r for r in records(tiny["resumed"]) if r["key"] == "block_start")
    assert first_block["metadata"]["samples_count"] == RESUME_STEP * TINY_GBS
    stops = [r for r in records(tiny["whole"]) if r["key"] == "run_stop"]
    assert [r["metadata"]["status"] for r in stops] == ["aborted"]


def _drop_run(src: Path, dst: Path) -> Path:
    """An eval-only-like log: everything from run_start on removed."""
    recs = records(src)
    return write_records(
        dst, recs[: next(i for i, r in enumerate(recs) if r["key"] == "run_start")]
    )


LOG_CASES = {
    # name: (make(tiny, tmp) -> log path, refusal fragment or None, with --allow-aborted)
    "converged": (lambda t, d: converged_copy(t["whole"], d / "result_0.txt", 1, 2.0), None, False),
    "not converged": (lambda t, d: t["whole"], "run_stop status aborted", False),
    "not converged, allowed": (lambda t, d: t["whole"], None, True),
    "killed": (lambda t, d: t["killed"], "no run_stop", True),
    "resumed, trainer's name": (
        lambda t, d: t["resumed"],
        "file name mlperf_resumed_step_4.log",
        True,
    ),
    # a renamed copy of the resumed log: the trainer's mark says it resumed
    "resumed, renamed": (
        lambda t, d: shutil.copyfile(t["resumed"], d / "result_0.txt"),
        f"MLLOG resumed_from_checkpoint event: resumed from step {RESUME_STEP}",
        True,
    ),
    # the same without the mark (a log from before it existed): its first block starts late
    "resumed, renamed, unmarked": (
        lambda t, d: write_records(
            d / "result_0.txt",
            [r for r in records(t["resumed"]) if r["key"] != "resumed_from_checkpoint"],
        ),
        f"first block starts after {RESUME_STEP * TINY_GBS} samples",
        True,
    ),
    # the mark itself, on a log that would otherwise be a converged fresh run
    "resumed, MLLOG mark": (
        lambda t, d: with_event(
            converged_copy(t["whole"], d / "c.txt", 1, 2.0),
            d / "result_0.txt",
            "resumed_from_checkpoint",
            RESUME_STEP,
        ),
        f"MLLOG resumed_from_checkpoint event: resumed from step {RESUME_STEP}",
        True,
    ),
    "no run": (lambda t, d: _drop_run(t["whole"], d / "result_0.txt"), "no run_start", True),
    # stopped from outside its loop (SIGTERM): refused even as the one aborted run allowed
    "interrupted": (
        lambda t, d: _interrupted(t["whole"], d / "result_0.txt"),
        "stopped from outside the training loop (interrupted by SIGTERM",
        True,
    ),
}


def _interrupted(src: Path, dst: Path) -> Path:
    recs = records(src)
    stop = next(r for r in recs if r["key"] == "run_stop")
    stop["metadata"]["stop_reason"] = "interrupted by SIGTERM at step 3"
    return write_records(dst, recs)


@pytest.mark.parametrize("case", LOG_CASES)
def test_which_logs_are_runs(tiny, tmp_path, case):
    make, refusal, allow_aborted = LOG_CASES[case]
    run = run_logs.read_run(Path(make(tiny, tmp_path)))
    said = run.refusal(allow_aborted)
    if refusal is None:
        assert said is None
    else:
        assert said is not None and refusal in said, said


def test_resumed_mark_key():
    """The key the trainer is to log (value: the step it resumed from)."""
    assert run_logs.RESUMED_FROM_CHECKPOINT == "resumed_from_checkpoint"


def test_official_checker_passes_a_resumed_log_and_check_compliance_notes_it(tiny, tmp_path):
    """The user's report: the official checker takes a resumed log for a complete run."""
    log = converged_copy(tiny["resumed"], tmp_path / "result_0.txt", 1, 0.2)
    proc = check_compliance(log)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"PASS {log}" in proc.stdout
    assert (
        f"note: resumed log (MLLOG resumed_from_checkpoint event: resumed from step "
        f"{RESUME_STEP}): not a timed MLPerf run"
    ) in proc.stdout
    fresh = converged_copy(tiny["whole"], tmp_path / "result_1.txt", 1, 0.2)
    proc = check_compliance(fresh)
    assert proc.returncode == 0 and "note: resumed" not in proc.stdout, proc.stdout


REFUSED = {
    # name: (arguments built from the tiny logs, fragments of the one error line)
    "the resumed log": (
        lambda t, d: [str(t["resumed"])],
        ["mlperf_resumed_step_4.log: resumed log", "times only the part"],
    ),
    # the killed run's folder: its log stayed partial (not a *.log), the other log is a resume
    "the killed run's folder": (
        lambda t, d: [str(t["killed"].parent)],
        ["no complete, non-resumed log", "mlperf_resumed_step_4.log: resumed log"],
    ),
    "the killed log": (lambda t, d: [str(t["killed"])], ["incomplete: no run_stop"]),
    "a resumed copy among results": (
        lambda t, d: [
            str(_results(d, [converged_copy(t["whole"], d / "c.txt", 1, 2.0), t["resumed"]]))
        ],
        ["result_1.txt: resumed log"],
    ),
    "an aborted run without --allow-aborted": (
        lambda t, d: [str(t["whole"])],
        ["run_stop status aborted", "--allow-aborted"],
    ),
    "the same log twice": (
        lambda t, d: [str(t["whole"]), str(t["whole"]), "--allow-aborted"],
        ["given twice"],
    ),
    "a file that is no log": (lambda t, d: [str(ROOT / "pyproject.toml")], ["no :::MLLOG lines"]),
}


def _results(folder: Path, logs: list[Path]) -> Path:
    results = folder / "results_in"
    results.mkdir()
    for i, log in enumerate(logs):
        shutil.copyfile(log, results / f"result_{i}.txt")
    return results


@pytest.mark.parametrize("case", REFUSED)
def test_refuses_resumed_and_incomplete_logs(tiny, tmp_path, case):
    make, fragments = REFUSED[case]
    out = tmp_path / "out"
    proc = package(*make(tiny, tmp_path), "--system", "s", "--out", str(out), "--unofficial")
    assert_refused(proc, *fragments)
    assert not out.exists()  # nothing half-written
    assert "score" not in proc.stdout


def test_output_dir_gives_its_complete_log_and_says_why(tiny, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    complete = converged_copy(tiny["whole"], run_dir / "mlperf.log", 1, 0.5)
    shutil.copyfile(tiny["resumed"], run_dir / tiny["resumed"].name)
    _drop_run(tiny["whole"], run_dir / "mlperf_eval_only.log")
    (run_dir / "stdout.log").write_text("not an MLPerf log\n")
    out = tmp_path / "out"
    proc = package(str(run_dir), "--system", "s", "--out", str(out), "--unofficial")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith(f"{run_dir}: using "))
    assert "using mlperf.log (complete, run_stop success)" in line
    assert "mlperf_resumed_step_4.log: resumed log" in line
    assert "mlperf_eval_only.log: no run_start" in line
    packaged = out / "results" / "s" / "bert" / "result_0.txt"
    assert packaged.read_text() == complete.read_text()


def test_output_dir_with_two_complete_logs_is_refused(tiny, tmp_path):
    run_dir = tmp_path / "run"
    converged_copy(tiny["whole"], run_dir / "mlperf.log", 1, 0.5)
    converged_copy(tiny["whole"], run_dir / "other.log", 2, 0.5)
    proc = package(str(run_dir), "--system", "s", "--out", str(tmp_path / "o"), "--unofficial")
    assert_refused(proc, "several complete logs (mlperf.log, other.log)")


def test_output_dir_with_an_aborted_log_needs_allow_aborted(tiny, tmp_path):
    args = [
        str(tiny["whole"].parent),
        "--system",
        "s",
        "--out",
        str(tmp_path / "o"),
        "--unofficial",
    ]
    assert_refused(package(*args), "mlperf.log: incomplete: run_stop status aborted")
    proc = package(*args, "--allow-aborted")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "using mlperf.log (complete, run_stop aborted)" in proc.stdout


# -- checkers and rules ---------------------------------------------------------------------------


def test_package_layout_checkers_and_score(tmp_path):
    runs = make_runs(tmp_path / "runs", failed=(7,))
    out = tmp_path / "submission"
    proc = package(
        str(runs),
        "--system",
        "1x8xA100",
        "--out",
        str(out),
        "--allow-aborted",
        "--accelerators-per-node",
        "8",
        "--accelerator",
        "NVIDIA A100-SXM4-80GB",
    )
    # One non-converged run is allowed: it fails compliance but not the package.
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bench = out / "results" / "1x8xA100" / "bert"
    assert sorted(p.name for p in bench.glob("result_*.txt")) == sorted(
        f"result_{i}.txt" for i in range(10)
    )
    assert (bench / "result_3.txt").read_text() == (runs / "result_3.txt").read_text()
    from mlperf_logging.system_desc_checker.system_desc_checker import check_system_desc

    valid, name, _, _ = check_system_desc(
        str(out / "systems" / "1x8xA100.json"), "training", "5.0.0"
    )
    assert valid and name == "1x8xA100"
    desc = json.loads((out / "systems" / "1x8xA100.json").read_text())
    assert desc["accelerators_per_node"] == "8"
    assert desc["accelerator_model_name"] == "NVIDIA A100-SXM4-80GB"
    lines = proc.stdout.splitlines()
    for i in range(10):  # the official compliance checker passes every converged log
        row = next(line for line in lines if line.startswith(f"result_{i}.txt "))
        assert ("compliance FAIL" if i == 7 else "compliance PASS") in row, row
        assert f"seed {1000 + 7 * i}" in row
    assert "rcp checker: PASS" in lines and "package checker: PASS" in lines
    # Converged: 24..33 without 33 (run 7 failed, counts as slowest); drop 24 and run 7.
    assert "score: 28.500 min (olympic mean of 8 of 10 runs)" in lines
    assert last_line(proc) == "result: OK: the official checkers (training 5.0.0) found no errors"
    assert not (out / "NOT_A_VALID_SUBMISSION.txt").exists()


def test_two_nonconverged_runs_give_no_score(tmp_path):
    runs = make_runs(tmp_path / "runs", failed=(2, 5))
    proc = package(
        str(runs), "--system", "s", "--out", str(tmp_path / "o"), "--skip-checks", "--allow-aborted"
    )
    assert proc.returncode == 1
    assert "score: none (2 runs did not converge; at most one may" in proc.stdout
    assert last_line(proc).startswith("result: FAIL: not a valid submission (1 problem(s))")


def test_existing_package_needs_force(tmp_path):
    runs = make_runs(tmp_path / "runs")
    args = (str(runs), "--system", "s", "--out", str(tmp_path / "o"), "--skip-checks")
    assert package(*args).returncode == 0
    again = package(*args)
    assert again.returncode == 2 and "--force" in again.stderr
    assert package(*args, "--force").returncode == 0


def test_a_hand_edited_system_description_is_kept_without_force(tmp_path):
    """systems/<system>.json is shared by a system's benchmarks and often edited by hand: a
    package of the bert results alone must not replace a different one without --force."""
    runs = make_runs(tmp_path / "runs")
    out = tmp_path / "o"
    args = (str(runs), "--system", "s", "--out", str(out), "--skip-checks")
    assert package(*args).returncode == 0
    system_json = out / "systems" / "s.json"
    shutil.rmtree(out / "results")  # the bert results go, the description stays
    assert package(*args).returncode == 0  # the same description: rewritten as is
    shutil.rmtree(out / "results")
    desc = json.loads(system_json.read_text())
    desc["sw_notes"] = "hand-edited: driver 580, NCCL 2.27"
    edited = json.dumps(desc, indent=2)
    system_json.write_text(edited)
    refused = package(*args)
    assert_refused(refused, "s.json", "already exists", "--force")
    assert system_json.read_text() == edited and not (out / "results").exists()
    assert package(*args, "--force").returncode == 0
    assert "hand-edited" not in system_json.read_text()


def _break_compliance(path: Path) -> Path:
    """A converged log the checker fails: cache_clear (required, REFERENCE 1) removed."""
    return write_records(path, [r for r in records(path) if r["key"] != "cache_clear"])


def test_skip_checks_never_says_pass(tmp_path):
    runs = make_runs(tmp_path / "runs")
    _break_compliance(runs / "result_4.txt")
    out = tmp_path / "o"
    checked = package(str(runs), "--system", "s", "--out", str(out))
    assert checked.returncode == 1  # the broken log does fail the checker
    row = next(x for x in checked.stdout.splitlines() if x.startswith("result_4.txt "))
    assert "compliance FAIL" in row
    assert "compliance checker: result_4.txt fails" in last_line(checked)

    skipped = package(str(runs), "--system", "s", "--out", str(out), "--force", "--skip-checks")
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    rows = [x for x in skipped.stdout.splitlines() if x.startswith("result_")]
    assert len(rows) == 10 and all("compliance not checked" in x for x in rows), rows
    assert "PASS" not in skipped.stdout
    assert not any(x.startswith("score: ") for x in skipped.stdout.splitlines())
    assert "unchecked score: 28.500 min" in skipped.stdout
    assert last_line(skipped).startswith("result: NOT CHECKED")
    assert "NOT CHECKED" in (out / "NOT_A_VALID_SUBMISSION.txt").read_text()


@pytest.fixture
def five_tiny_runs(tiny, tmp_path) -> Path:
    """Five converged copies of the real tiny log (GBS 8, no RCP entry), distinct seeds."""
    folder = tmp_path / "five"
    for i in range(5):
        converged_copy(tiny["whole"], folder / f"result_{i}.txt", 100 + i, 0.1 + 0.01 * i)
    return folder


def test_official_package_checker_exits_0_despite_errors(five_tiny_runs, tmp_path):
    """Why exit statuses are not trusted: the official tool prints ERROR and exits 0."""
    out = tmp_path / "o"
    package(str(five_tiny_runs), "--system", "s", "--out", str(out), "--unofficial")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlperf_logging.package_checker",
            str(out),
            "training",
            "5.0.0",
            "--log_output",
            str(tmp_path / "pc.log"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0
    assert "ERROR - Incorrect number of files" in proc.stdout + proc.stderr


def test_five_tiny_runs_fail_the_rules_and_checkers(five_tiny_runs, tmp_path):
    out = tmp_path / "o"
    proc = package(str(five_tiny_runs), "--system", "cpu", "--out", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    verdict = last_line(proc)
    assert verdict.startswith("result: FAIL: not a valid submission")
    assert "a BERT submission is exactly 10 runs" in verdict
    assert "package checker: Incorrect number of files" in verdict
    assert "rcp checker: Missing RCP, please submit RCP with BS = 8" in verdict
    assert "rcp note: global batch 8 has no reference convergence point" in proc.stdout
    assert "closed division cannot accept" in proc.stdout
    assert "unofficial score, not a valid result: " in proc.stdout
    assert not any(x.startswith("score: ") for x in proc.stdout.splitlines())
    assert "FAIL" in (out / "NOT_A_VALID_SUBMISSION.txt").read_text()


def test_unofficial_packages_test_runs_but_says_they_would_be_rejected(five_tiny_runs, tmp_path):
    out = tmp_path / "o"
    proc = package(str(five_tiny_runs), "--system", "cpu", "--out", str(out), "--unofficial")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verdict = last_line(proc)
    assert verdict.startswith("result: UNOFFICIAL, NOT A VALID SUBMISSION")
    assert "would be rejected: package checker: Incorrect number of files" in verdict
    assert "would be rejected: rcp checker: Missing RCP" in verdict
    assert "result: OK" not in proc.stdout
    marker = (out / "NOT_A_VALID_SUBMISSION.txt").read_text()
    assert marker.startswith("UNOFFICIAL, NOT A VALID SUBMISSION") and "10 runs" in marker
    # the system description of a CPU run, read from this machine
    desc = json.loads((out / "systems" / "cpu.json").read_text())
    if system_desc.local_cuda() is None:
        assert desc["accelerators_per_node"] == "0"
        assert desc["accelerator_model_name"] == "N/A"
    assert desc["host_processor_model_name"] == (cpu_model() or "unknown")
    assert desc["framework"].startswith("PyTorch ")


def test_topology_keys_in_the_logs_describe_the_system(five_tiny_runs, tmp_path):
    """What the trainer is to log (run_logs.TOPOLOGY_KEYS) wins over this host's devices."""
    for log in five_tiny_runs.glob("result_*.txt"):
        with_event(log, log, "accelerators_per_node", 8)
        with_event(log, log, "accelerator_model_name", "NVIDIA H100 80GB HBM3")
        with_event(log, log, "number_of_nodes", 1)
    out = tmp_path / "o"
    proc = package(str(five_tiny_runs), "--system", "gpu", "--out", str(out), "--unofficial")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    desc = json.loads((out / "systems" / "gpu.json").read_text())
    assert (
        desc["number_of_nodes"],
        desc["accelerators_per_node"],
        desc["accelerator_model_name"],
    ) == ("1", "8", "NVIDIA H100 80GB HBM3")
    assert (
        "system: 1 node(s) x 8 accelerator(s) [NVIDIA H100 80GB HBM3] (from the logs)"
        in proc.stdout
    )
    # the official compliance checker ignores these keys
    assert all("compliance PASS" in x for x in proc.stdout.splitlines() if x.startswith("result_"))


def test_a_later_valid_package_removes_the_marker(tmp_path):
    runs = make_runs(tmp_path / "runs")
    out = tmp_path / "o"
    (out).mkdir()
    (out / "NOT_A_VALID_SUBMISSION.txt").write_text("stale\n")
    proc = package(
        str(runs),
        "--system",
        "s",
        "--out",
        str(out),
        "--accelerators-per-node",
        "8",
        "--accelerator",
        "A100",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (out / "NOT_A_VALID_SUBMISSION.txt").exists()


CHECKER_OUTPUTS = [
    # (exit status, output, errors expected)
    (0, "INFO - x\nINFO - PACKAGE CHECKER FOUND NO ERRORS, SUCCESS !", []),
    (
        0,
        "ERROR - Incorrect number of files, found 5, expected 10\n"
        "INFO - PACKAGE CHECKER FOUND ERRORS, LOOK INTO ERROR LOG LINES AND FIX THEM.",
        ["Incorrect number of files, found 5, expected 10"],
    ),
    (
        1,
        "ERROR - Missing RCP, RCP test FAILED\nERROR - Missing RCP, RCP test FAILED",
        ["Missing RCP, RCP test FAILED"],
    ),
    (
        1,
        "Traceback (most recent call last):\n  ...\nKeyError: 'division'",
        ["exited with status 1: KeyError: 'division'"],
    ),
    (0, "", ["no verdict (expected 'PACKAGE CHECKER FOUND NO ERRORS')"]),
    # a value that merely contains the word is no ERROR line
    (0, "INFO - value ERROR - x\nINFO - PACKAGE CHECKER FOUND NO ERRORS", []),
]


@pytest.mark.parametrize("code,output,expected", CHECKER_OUTPUTS)
def test_checker_errors(code, output, expected):
    script = package_results
    assert script.checker_errors(code, output, "PACKAGE CHECKER FOUND NO ERRORS") == expected


@pytest.mark.parametrize(
    "sizes,division,expected",
    [
        ([448], "closed", None),
        ([8], "closed", "below the smallest entry"),
        ([1000], "closed", "interpolation of its neighbours"),
        ([20_000], "closed", "nothing to compare it with"),
        ([8], "open", None),
        ([448, 256], "closed", "different global batch sizes"),
    ],
)
def test_rcp_note(sizes, division, expected):
    script = package_results
    runs = [
        script.Run(Path(f"r{i}"), i, True, "success", 1.0, None, division, None, gbs, None)
        for i, gbs in enumerate(sizes)
    ]
    note = script.rcp_note(runs, division)
    assert note is None if expected is None else expected in note, note


def test_rcp_batch_sizes_are_the_reference_ones():
    """REFERENCE 1 lists the RCP batch sizes; the installed checker may hold more."""
    sizes = package_results.rcp_batch_sizes()
    assert {256, 448, 1536, 3072, 4096, 4608, 6144, 6912, 8192, 12288, 16384} <= set(sizes)


def test_rules_count_runs_and_seeds():
    script = package_results

    def runs(seeds):
        return [
            script.Run(Path(f"r{i}"), s, True, "success", 1.0, None, "closed", None, 448, None)
            for i, s in enumerate(seeds)
        ]

    assert script.rule_problems(runs(range(10))) == []
    assert "exactly 10 runs" in script.rule_problems(runs(range(9)))[0]
    assert script.rule_problems(runs([1, 2, 3, 4, 5, 6, 7, 8, 9, 9])) == [
        "seed(s) 9 used by more than one run; each run needs its own seed"
    ]


def test_olympic_mean_arithmetic():
    script = package_results
    assert script.olympic_mean(MINUTES) == pytest.approx(sum(sorted(MINUTES)[1:-1]) / 8)
    assert script.olympic_mean([3.0, 1.0, 2.0, math.inf]) == pytest.approx(2.5)
    with pytest.raises(script.NoScore):
        script.olympic_mean([1.0, 2.0, math.inf, math.inf])
    with pytest.raises(script.NoScore):
        script.olympic_mean([1.0, 2.0])


def test_score_is_run_stop_minus_run_start(tmp_path):
    run = run_logs.read_run(retime(write_log(tmp_path / "r.txt", seed=5, converge=True), 12.25))
    assert run.converged and run.seed == 5 and run.minutes == pytest.approx(12.25)
    assert run.global_batch_size == Config().run.global_batch_size
    aborted = run_logs.read_run(retime(write_log(tmp_path / "a.txt", seed=6, converge=False), 9))
    assert not aborted.converged and math.isinf(aborted.minutes)


# -- plots ----------------------------------------------------------------------------------------


def test_plot_data_from_log(tmp_path):
    plot = plot_run
    lines = plot.read_lines(retime(write_log(tmp_path / "r.txt", 1, True, blocks=4), 10.0))
    samples, accuracy = plot.eval_curve(lines)
    assert samples == [BLOCK, 2 * BLOCK, 3 * BLOCK, 4 * BLOCK]
    assert accuracy[-1] == pytest.approx(0.725)
    minutes, rates = plot.block_throughput(lines)
    assert len(minutes) == 4 and minutes == sorted(minutes) and minutes[-1] < 10.0
    # 21 lines after run_start, evenly spread over 600 s; block_stop follows block_start.
    assert rates[0] == pytest.approx(BLOCK / (600 / 21), rel=1e-3)


def test_plot_renders(tmp_path):
    pytest.importorskip("matplotlib")
    plot = plot_run
    log = retime(write_log(tmp_path / "r.txt", 1, True, blocks=3), 5.0)
    assert plot.main([str(log), "--out", str(tmp_path / "run.png")]) == 0
    assert (tmp_path / "run.png").stat().st_size > 0


def test_plot_takes_a_run_folder_and_writes_beside_it(tmp_path):
    pytest.importorskip("matplotlib")
    run = tmp_path / "run"
    retime(write_log(run / "mlperf.log", 1, True, blocks=3), 5.0)
    assert plot_run.main([str(run)]) == 0
    assert (run / "accuracy.png").stat().st_size > 0


def test_plot_labels_curves_by_run_folder(tmp_path):
    plot = plot_run
    logs = [
        tmp_path / "a" / "run_0" / "mlperf.log",
        tmp_path / "a" / "run_1" / "mlperf.log",
        tmp_path / "a" / "run_1" / "mlperf_resumed_step_8.log",
    ]
    assert plot.curve_labels(logs) == ["run_0", "run_1", "run_1/mlperf_resumed_step_8.log"]
    same_name = [tmp_path / "x" / "run" / "mlperf.log", tmp_path / "y" / "run" / "mlperf.log"]
    assert plot.curve_labels(same_name) == ["x/run", "y/run"]


def test_plot_without_matplotlib_says_how_to_install(tmp_path, capsys):
    if importlib.util.find_spec("matplotlib") is not None:
        pytest.skip("matplotlib is installed")
    plot = plot_run
    assert plot.main([str(tmp_path / "r.txt"), "--out", str(tmp_path / "x.png")]) == 2
    assert "pip install 'open-bert-mlperf[plot]'" in capsys.readouterr().err


# -- logs that cannot choke the readers ----------------------------------------------------


def _bad_log(case: str, path: Path) -> Path:
    """One converged log broken in one way."""
    recs = records(write_log(path, seed=1, converge=True, blocks=2))
    stop = next(r for r in recs if r["key"] == "run_stop")
    block = next(r for r in recs if r["key"] == "block_start")
    if case == "long-line":  # 1 MB: the official parser's regex is quadratic in it
        write_records(path, recs)
        with open(path, "a") as f:
            f.write("x" * 1_000_000 + ':::MLLOG {"key": "x"}\n')
        return path
    if case == "deep":
        path.write_text("".join(f":::MLLOG {json.dumps(r)}\n" for r in recs[:1]))
        with open(path, "a") as f:
            f.write(':::MLLOG {"key": "x", "time_ms": 1, "value": ' + "[" * 5000)
            f.write("]" * 5000 + ', "metadata": {}}\n')
            f.write("".join(f":::MLLOG {json.dumps(r)}\n" for r in recs[1:]))
        return path
    if case == "samples-count-text":
        block["metadata"].update(samples_count="many", epoch_count="many")
    elif case == "run-stop-metadata-list":
        stop["metadata"] = ["success"]
    elif case == "run-stop-metadata-missing":
        del stop["metadata"]
    elif case == "two-markers":
        stop["metadata"]["note"] = ':::MLLOG {"key": "run_stop"}'
    return write_records(path, recs)


BAD_LOGS = [
    "long-line",
    "deep",
    "samples-count-text",
    "run-stop-metadata-list",
    "run-stop-metadata-missing",
    "two-markers",
]


def _one_error(capsys, code: int) -> str:
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if line.startswith("error: ")]
    assert code == 2 and len(errors) == 1, captured.out[-1000:] + captured.err[-2000:]
    assert "Traceback" not in captured.err
    return errors[0]


@pytest.mark.parametrize("case", BAD_LOGS)
def test_a_malformed_log_is_one_error_line_for_every_reader(tmp_path, capsys, case):
    from bert.submission import compliance

    log = _bad_log(case, tmp_path / "runs" / "result_0.txt")
    started = time.monotonic()
    out = tmp_path / "o"
    assert "result_0.txt" in _one_error(
        capsys, package_results.main([str(log), "--system", "s", "--out", str(out)])
    )
    code = compliance.main([str(log)])
    if case == "samples-count-text":  # well-formed JSON: the official checker's verdict
        captured = capsys.readouterr()
        assert code == 1 and "FAIL" in captured.out and "Traceback" not in captured.err
    else:
        assert "result_0.txt" in _one_error(capsys, code)
    if importlib.util.find_spec("matplotlib") is not None:
        _one_error(capsys, plot_run.main([str(log), "--out", str(tmp_path / "p.png")]))
    assert time.monotonic() - started < 60  # seconds, not the minutes the bare parser takes


def _edit(path: Path, key: str, **changes) -> Path:
    recs = records(path)
    for record in recs:
        if record["key"] == key:
            record.update(changes)
    return write_records(path, recs)


def test_skip_checks_still_refuses_sigterm_runs_and_mixed_submissions(tmp_path, capsys):
    runs = make_runs(tmp_path / "runs")
    out = tmp_path / "o"
    args = [str(runs), "--system", "s", "--out", str(out), "--skip-checks", "--allow-aborted"]
    stopped = {"status": "aborted", "stop_reason": "interrupted by SIGTERM at step 9"}
    _edit(runs / "result_3.txt", "run_stop", metadata=stopped)
    assert "SIGTERM" in _one_error(capsys, package_results.main(args))
    _edit(runs / "result_3.txt", "run_stop", metadata={"status": "converged"})
    assert "'converged'" in _one_error(capsys, package_results.main(args))
    _edit(runs / "result_3.txt", "run_stop", metadata={"status": "success"})
    _edit(runs / "result_5.txt", "submission_division", value="open")
    assert "submission_division" in _one_error(capsys, package_results.main(args))
    _edit(runs / "result_5.txt", "submission_division", value="closed")
    _edit(runs / "result_6.txt", "submission_org", value="someone-else")
    assert "submission_org" in _one_error(capsys, package_results.main(args))
