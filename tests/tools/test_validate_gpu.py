"""The GPU harness (scripts/bench/validate_gpu.sh) on a CPU machine: its dry run, which CI runs so
the harness cannot rot between GPU windows, and the pieces a GPU run depends on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from bert.tools import common as script_utils  # noqa: E402
from bert.tools.gpu import report as gpu_report  # noqa: E402
from bert.tools.gpu import validate as validate_gpu  # noqa: E402
from bert.tools.gpu import window as gpu_window  # noqa: E402
from bert.tools.gpu import expected as gpu_expected  # noqa: E402
from bert.tools.gpu.launch import run_capped  # noqa: E402

HARNESS = ROOT / "scripts" / "bench" / "validate_gpu.sh"


def dry_run(stage: str, out: Path, **env) -> tuple[subprocess.CompletedProcess, dict]:
    run = subprocess.run(
        [str(HARNESS), "--dry-run", stage],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "OUT": str(out), "PYTHON": sys.executable, **env},
        timeout=600,
    )
    summary = out / "summary.json"
    return run, json.loads(summary.read_text()) if summary.is_file() else {}


@pytest.mark.slow  # in the default suite and CI; out of the quick subset (README)
def test_dry_run_collects_every_gpu_test_without_mlperf_logging(tmp_path):
    run, summary = dry_run("kernels", tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs_kernels.tar.gz", "summary.json"]
    assert summary["out_files"] == 2 <= validate_gpu.MAX_FILES
    assert summary["commit"] not in ("", "unknown")
    tests = summary["tests"]
    # Every GPU-marked test file is collected (none lost to an import of mlperf_logging).
    assert tests["errored"] == 0
    assert tests["collected"] >= 280
    for name in (
        "tests/kernels/test_dense.py",
        "tests/unit/test_fused_model.py",
        "tests/unit/test_sync_free.py",
        "tests/unit/test_attention.py",
    ):
        assert tests["per_file"][name]["collected"] > 0
    steps = {s["name"]: s for s in summary["steps"]}
    assert steps["build"]["status"] == "skipped"
    # Each microbenchmark's planned command (flags included) is checked against its --help.
    for script, _, compiled in validate_gpu.microbenchmarks():
        assert steps[script]["status"] == "ok"
        assert "--no-compile" in steps[script]["planned_command"]
        if compiled:
            assert steps[f"{script}_compiled"]["status"] == "ok"


@pytest.mark.slow  # in the default suite and CI; out of the quick subset (README)
@pytest.mark.parametrize("stage", ["throughput", "fused"])
def test_dry_run_throughput_stages(tmp_path, stage):
    run, summary = dry_run(stage, tmp_path, BERT_COMMIT="0123abc")
    assert run.returncode == 0, run.stdout + run.stderr
    assert summary["commit"] == "0123abc"
    planned = [s["planned_command"] for s in summary["steps"] if "planned_command" in s]
    assert len(planned) == len(validate_gpu.THROUGHPUT[stage])
    assert all("bench_throughput.py --model large" in cmd for cmd in planned)
    assert set(summary["targets"]) == set(gpu_report.TARGETS)


def test_dry_run_rejects_an_unknown_flag(tmp_path, monkeypatch):
    """A benchmark command that no longer matches its script fails the dry run (and CI)."""
    monkeypatch.setitem(
        validate_gpu.THROUGHPUT,
        "throughput",
        [("renamed", ["--fastest", "flash_varlen", "--no-such-flag"], 60)],
    )
    monkeypatch.setenv("OUT", str(tmp_path))
    assert validate_gpu.main(["throughput", "--dry-run"]) == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["failed_steps"] == ["renamed"]
    assert "--no-such-flag" in summary["steps"][-1]["reason"]


def test_commit_never_unknown_without_git(tmp_path, monkeypatch, capsys):
    """The GPU machine's copy has no .git: $BERT_COMMIT, else the stamp prepare_gpu_carry.sh
    writes; with neither, the records say 'unknown' and the harness warns but runs (a refusal
    would cost a whole device command)."""
    monkeypatch.setattr(script_utils, "ROOT", tmp_path)  # not a git checkout
    monkeypatch.delenv("BERT_COMMIT", raising=False)
    assert script_utils.git_commit() == "unknown"
    monkeypatch.setattr(validate_gpu, "git_commit", script_utils.git_commit)
    harness = validate_gpu.Harness("window", tmp_path / "o", dry_run=True, budget_s=60)
    assert harness.summary["commit"] == "unknown"
    assert "warning: validate_gpu: no commit to record" in capsys.readouterr().err
    (tmp_path / ".whl").mkdir()
    (tmp_path / ".whl" / "COMMIT").write_text("feedbeef\n")
    assert script_utils.git_commit() == "feedbeef"
    monkeypatch.setenv("BERT_COMMIT", "cafe")
    assert script_utils.git_commit() == "cafe"


def test_kernel_tests_fail_instead_of_skipping_when_the_harness_requires_them():
    """Under the harness a missing GPU or build FAILS the kernel tests; elsewhere they skip."""
    test = "tests/kernels/test_softmax_cross_entropy.py"
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu", test]
    env = {k: v for k, v in os.environ.items() if not k.startswith("BERT_REQUIRE")}
    plain = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env=env)
    assert plain.returncode == 0 and "skipped" in plain.stdout, plain.stdout
    required = subprocess.run(
        args,
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**env, "BERT_REQUIRE_GPU": "1", "BERT_REQUIRE_KERNELS": "1"},
    )
    assert required.returncode != 0
    assert "error" in required.stdout.splitlines()[-1] and "skipped" not in required.stdout


def test_a_hung_step_costs_its_timeout_and_later_steps_are_skipped(tmp_path):
    harness = validate_gpu.Harness(
        "kernels", tmp_path, dry_run=True, budget_s=validate_gpu.RESERVE_S + 8
    )
    assert harness.step("hang", [sys.executable, "-c", "import time; time.sleep(60)"], 2) == 124
    while harness.remaining() >= 5:  # wait out the rest of the budget
        pass
    assert harness.step("late", [sys.executable, "-c", "pass"], 60) == 124
    assert harness.finish() == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [(s["name"], s["status"]) for s in summary["steps"]] == [
        ("hang", "timeout"),
        ("late", "skipped"),
    ]
    assert summary["failed_steps"] == ["hang"]


def test_junit_counts_per_file(tmp_path):
    xml = tmp_path / "t.xml"
    xml.write_text("""<testsuites><testsuite>
      <testcase classname="tests.kernels.test_dense" name="a"/>
      <testcase classname="tests.kernels.test_dense" name="b"><failure message="x"/></testcase>
      <testcase classname="tests.test_attention" name="c"><skipped message="s"/></testcase>
      <testcase classname="tests.test_attention" name="d"><error message="e"/></testcase>
    </testsuite></testsuites>""")
    counts = gpu_report.junit_counts(xml)
    assert (
        counts["collected"],
        counts["passed"],
        counts["failed"],
        counts["skipped"],
        counts["errored"],
    ) == (4, 1, 1, 1, 1)
    assert counts["per_file"]["tests/kernels/test_dense.py"] == {
        "passed": 1,
        "failed": 1,
        "skipped": 0,
        "errored": 0,
        "crashed": 0,
    }
    assert gpu_report.junit_counts(tmp_path / "missing.xml")["collected"] == 0


CRASHING_TESTS = """
import os, signal
import pytest

pytestmark = pytest.mark.gpu

def test_a(): pass
def test_b(): assert 1 == 2, "a plain failure"
def test_c(): os.kill(os.getpid(), signal.SIGSEGV)
def test_d(): pass
def test_e(): os.kill(os.getpid(), signal.SIGSEGV)
def test_f(): pass
"""


def test_a_crashing_test_costs_only_itself(tmp_path):
    """The 2026-11-26 H100 window lost five kernel files' verdicts to one segfault each: now the
    file runs again past the test that died, and every test keeps its own verdict."""
    test_file = tmp_path / "tests" / "test_crashing.py"
    test_file.parent.mkdir()
    test_file.write_text(CRASHING_TESTS)
    harness = validate_gpu.Harness("window", tmp_path / "out", dry_run=False, budget_s=240)
    tests = harness.run_gpu_test_file(
        "tests_test_crashing", str(test_file), harness.work / "j.xml", 200, require_kernels=False
    )
    outcomes = {nodeid.split("::")[-1]: test["outcome"] for nodeid, test in tests.items()}
    assert outcomes == {
        "test_a": "passed",
        "test_b": "failed",
        "test_c": "crashed",
        "test_d": "passed",
        "test_e": "crashed",
        "test_f": "passed",
    }
    assert [s["name"] for s in harness.summary["steps"]] == [
        "tests_test_crashing",
        "tests_test_crashing_after_crash_1",
        "tests_test_crashing_after_crash_2",
    ]
    assert gpu_report.journal_counts(tests) == {
        "passed": 3,
        "failed": 1,
        "skipped": 0,
        "errored": 0,
        "crashed": 2,
    }
    failures = gpu_report.journal_failures(tests)
    assert "a plain failure" in failures[next(n for n in failures if n.endswith("test_b"))]
    assert sum(text.startswith("crashed") for text in failures.values()) == 2


def test_speedups_and_targets():
    rows = gpu_report.speedups(
        {
            "results": [
                {
                    "tokens": 4096,
                    "dtype": "bf16",
                    "torch_eager_ms": 2.0,
                    "torch_compile_ms": 1.0,
                    "fused_ms": 0.5,
                    "fused_gbps": 900.0,
                    "target_met": True,
                }
            ]
        }
    )
    assert rows == [
        {
            "tokens": 4096,
            "dtype": "bf16",
            "fused_vs_torch_eager": 4.0,
            "fused_vs_torch_compile": 2.0,
        }
    ]
    measured = {
        "run": {
            "variants": {"fastest": {"samples_per_s": 1200.0, "mfu": 0.5}},
            "ratios": {"fastest/hf_eager": 3.5, "fastest/hf_compile": 1.5},
        }
    }
    targets = gpu_report.targets(measured)
    assert targets["fastest_samples_per_s"] == {"target": 1000.0, "measured": 1200.0, "met": True}
    assert targets["fastest/hf_compile"]["met"] is False
    assert gpu_report.targets({})["fastest/hf_eager"]["met"] is None


# ---- the window (bert/tools/gpu/window.py) ----------------------------------------------------
@pytest.mark.slow  # in the default suite and CI; out of the quick subset (README)
def test_window_dry_run_plan_fits_420_s_and_covers_every_gpu_test(tmp_path):
    """The command to run first on a lent GPU: its order, its plan (expected seconds per
    step) fits 420 s with the one throughput process left for --continue, which fits its own
    budget; every step's command knows its flags, and every GPU test file pytest collects (as
    the image would, without mlperf_logging) is in its per-file list."""
    run, summary = dry_run("window", tmp_path, BERT_COMMIT="0123abc")
    assert run.returncode == 0, run.stdout + run.stderr
    plan = summary["plan"]
    assert summary["budget_s"] == plan["budget_s"] == gpu_window.WINDOW_BUDGET_S <= 420
    assert plan["this_call_expected_s"] <= 420 - validate_gpu.RESERVE_S
    assert plan["continue_call"]["steps"] == ["throughput"] and plan["continue_call"]["fits"]
    assert "[window] --continue: throughput; expected" in run.stdout
    steps = {s["name"]: s for s in summary["steps"]}
    for step in gpu_window.STEPS:
        assert steps[step.name]["status"] in ("ok", "skipped"), steps[step.name]
    order = [s["name"] for s in summary["steps"]]
    # the dry run checks the carry right after the device step (bert/tools/gpu/carry.py)
    assert order[:6] == ["device", "carry", "build", "learning_proof", "smoke", "sdpa_probe"]
    assert order[-3:] == ["train_compare", "bench_lamb", "throughput"]
    assert steps["carry"]["status"] == "ok", steps["carry"]
    # the attention probe: after the learning proof and every GPU test file, in the first call
    planned = [row["name"] for row in plan["steps"]]
    tests_done = max(planned.index(gpu_window.test_step_name(f)) for f in summary["test_files"])
    assert planned.index("learning_proof") < tests_done < planned.index("attention_probe")
    assert next(r for r in plan["steps"] if r["name"] == "attention_probe")["call"] == "this"
    assert "probe_attention.py --out" in steps["attention_probe"]["planned_command"]
    assert "[window]   attention_probe" in run.stdout
    assert "--device cuda" in steps["learning_proof"]["planned_command"]
    assert "--device cuda" in steps["smoke"]["planned_command"]
    throughput = steps["throughput"]["planned_command"]
    assert ",".join(gpu_window.THROUGHPUT_VARIANTS) in throughput
    assert {"hf_eager", "hf_compile", "flash_varlen+fused"} <= set(gpu_window.THROUGHPUT_VARIANTS)
    # the bench's own dry run resolved every variant as the GPU will, none refused
    listed = summary["throughput_variants"]
    assert list(listed) == list(gpu_window.THROUGHPUT_VARIANTS)
    assert not [name for name, v in listed.items() if "refused" in v]
    assert listed["flash_varlen+fused+fp8+graphs"]["graphs"]
    tests = summary["tests"]
    assert tests["errored"] == 0 and tests["collected"] >= 280
    assert set(tests["per_file"]) <= set(summary["test_files"])
    assert summary["test_files"][:2] == [
        "tests/unit/test_fused_model.py",
        "tests/unit/test_attention.py",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs_window.tar.gz", "summary.json"]
    assert len(gpu_window.RECORD_FILES) + 2 <= validate_gpu.MAX_FILES


def test_window_killed_mid_step_leaves_a_summary_of_the_finished_steps(tmp_path):
    proc = subprocess.Popen(
        [str(HARNESS), "--dry-run", "window"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable},
        start_new_session=True,
    )
    summary_path = tmp_path / "summary.json"
    try:
        for _ in range(1200):  # until three steps are recorded (a fourth is then running)
            if summary_path.is_file() and len(json.loads(summary_path.read_text())["steps"]) >= 3:
                break
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    summary = json.loads(summary_path.read_text())  # parses: written atomically
    names = [s["name"] for s in summary["steps"]]
    assert names[:3] == ["device", "carry", "build"]
    assert len(names) < len(gpu_window.STEPS)
    # a dry run builds nothing: its build step is recorded skipped
    assert all(s["status"] in ("ok", "skipped") for s in summary["steps"])
    assert not list(tmp_path.glob("*.tmp"))


def test_window_continue_runs_only_what_the_first_call_left(tmp_path, monkeypatch):
    """`window --continue SUMMARY`: the steps the first call finished are not run again (but
    the device is read again and the build rerun, a no-op on a warm machine); their records
    are carried over."""
    ran = []

    def fake(name):
        def run(h, step):
            ran.append(name)
            h.step(name, [sys.executable, "-c", "pass"], 30)

        return run

    steps = tuple(
        gpu_window.Step(n, 10, fake(n))
        for n in ("device", "sdpa_probe", "smoke", "build", "throughput")
    )
    monkeypatch.setattr(gpu_window, "STEPS", steps)
    first = tmp_path / "first.json"
    first.write_text(
        json.dumps(
            {
                "commit": "c1",
                "date": "d",
                "smoke": {"full_run": True},
                "steps": [
                    {"name": "device", "status": "ok"},
                    {"name": "sdpa_probe", "status": "ok"},
                    {"name": "smoke", "status": "ok"},
                    {"name": "build", "status": "ok"},
                    {"name": "throughput", "status": "timeout"},
                ],
            }
        )
    )
    monkeypatch.setenv("OUT", str(tmp_path / "second"))
    assert validate_gpu.main(["window", "--dry-run", "--continue", str(first)]) == 0
    assert ran == ["device", "build", "throughput"]
    summary = json.loads((tmp_path / "second" / "summary.json").read_text())
    assert summary["continued_from"]["done"] == ["build", "device", "sdpa_probe", "smoke"]
    assert summary["smoke"] == {"full_run": True}
    assert summary["budget_s"] == gpu_window.CONTINUE_BUDGET_S  # the short second call


def test_window_continue_with_an_unreadable_summary_is_one_error(tmp_path, capsys):
    (tmp_path / "s.json").write_text("{not json")
    with pytest.raises(SystemExit) as stop:
        validate_gpu.main(["window", "--dry-run", "--continue", str(tmp_path / "s.json")])
    assert stop.value.code == 2
    assert capsys.readouterr().err.count("error:") == 1


# ---- the plan: expected durations from the records --------------------------------------------
RECORDS = ROOT / gpu_expected.RECORDS


def recorded_seconds(window: str) -> dict[str, float]:
    """A window's step durations by name, a crashed test file's reruns added to its own."""
    seconds: dict[str, float] = {}
    for step in json.loads((RECORDS / window / "summary.json").read_text())["steps"]:
        if step.get("seconds") is not None:
            name = step["name"].split("_after_crash_")[0]
            seconds[name] = seconds.get(name, 0.0) + step["seconds"]
    return seconds


def test_every_expected_time_is_its_records_number():
    """A measured expectation is the seconds its record holds (a typo or a stale number fails);
    every step has one."""
    from bert.tools.gpu import learning_proof

    for name, expected in gpu_expected.EXPECTED.items():
        if not expected.estimate:
            assert recorded_seconds(expected.record)[name] == expected.seconds, name
    assert {s.name for s in gpu_window.STEPS} - {"gpu_tests"} <= set(gpu_expected.EXPECTED)
    # every GPU test file a window ran is expected at its recorded time; one no window has run
    # yet (a new file) at the small files' estimate
    ran = {name for record in RECORDS.iterdir() for name in recorded_seconds(record.name)}
    for path in gpu_window.gpu_test_files(ROOT):
        expected = gpu_expected.expectation(gpu_window.test_step_name(path))
        if gpu_window.test_step_name(path) in ran:
            assert not expected.estimate, path
        else:
            assert expected.seconds == gpu_expected.UNRECORDED_TEST_FILE_S, path
    # the learning proof's record (2026-11-28b) ran the three runs the proof runs today
    record = json.loads((RECORDS / "2026-11-28b_window" / "learning_proof.json").read_text())
    assert set(record["runs"]) == set(learning_proof.DEFAULT_VARIANTS["cuda"])
    assert not gpu_expected.EXPECTED["learning_proof"].estimate


def test_every_cap_stays_a_margin_above_its_expected_time(monkeypatch):
    units = gpu_window.units(ROOT)
    assert gpu_window.caps_below_margin(units) == []
    # the check can fail: a cap at the expected time is no margin
    monkeypatch.setitem(gpu_expected.EXPECTED, "smoke", gpu_expected.measured(100.0))
    assert gpu_window.caps_below_margin(units) == ["smoke: cap 100 s < 1.25 x expected 100 s"]


def test_continue_plan_does_not_fit_when_its_step_grows(monkeypatch):
    """The plan's arithmetic can fail: a throughput process 100 s longer than estimated no
    longer fits the --continue call's budget."""
    plan = gpu_window.make_plan(gpu_window.units(ROOT), 420, validate_gpu.RESERVE_S)
    assert plan["continue_call"]["fits"]
    longer = gpu_expected.Expectation(gpu_expected.EXPECTED["throughput"].seconds + 100, None, "x")
    monkeypatch.setitem(gpu_expected.EXPECTED, "throughput", longer)
    plan = gpu_window.make_plan(gpu_window.units(ROOT), 420, validate_gpu.RESERVE_S)
    assert not plan["continue_call"]["fits"]


class ReplayHarness:
    """The harness on a simulated clock: each step takes the seconds `durations` gives it, cut
    (as a timeout) by its cap and what is left of the budget."""

    def __init__(self, durations: dict[str, float], tmp_path: Path):
        self.durations, self.clock = durations, 0.0
        self.stage, self.dry_run, self.root, self.done = "window", False, ROOT, set()
        self.budget_s, self.reserve_s = gpu_window.WINDOW_BUDGET_S, validate_gpu.RESERVE_S
        self.summary: dict = {"steps": []}
        self.work = self.out = tmp_path
        self.started: list[tuple[str, float, float]] = []  # name, seconds left, seconds needed

    def remaining(self) -> float:
        return self.budget_s - self.reserve_s - self.clock

    def _record(self, record: dict, code: int) -> int:
        self.summary["steps"].append(record)
        return code

    def write(self) -> None:
        pass

    def run(self, name: str, cap_s: float) -> None:
        left, needed = self.remaining(), self.durations[name]
        self.started.append((name, left, needed))
        limit = min(cap_s, left)
        self.clock += min(needed, limit)
        status = "ok" if needed <= limit else "timeout"
        self._record({"name": name, "status": status, "seconds": min(needed, limit)}, 0)

    def run_gpu_test_file(self, name, path, junit, cap_s, require_kernels) -> dict:
        self.run(name, cap_s)
        return {}


def replayed(h: ReplayHarness, step: gpu_window.Step) -> None:
    h.run(step.name, step.cap_s)


def could_not_finish(h: ReplayHarness) -> list[str]:
    """The invariant: every step started had the time it needed."""
    return [
        f"{name} ({needed:g} s, {left:.1f} s left)"
        for name, left, needed in h.started
        if needed > left
    ]


# The windows' throughput steps before the one-process layout, and what each needs: what it took
# in a window that finished it, else an estimate (each more than the step ran before its kill).
OLD_STEPS = {
    "throughput_eager": gpu_expected.measured(45.0),
    "throughput_fused": gpu_expected.measured(62.1),
    "throughput_compiled": gpu_expected.measured(90.8, "2026-11-26_window"),
    "throughput_sublayers": gpu_expected.measured(39.2, "2026-11-26_window"),
    # never finished: one variant of ours alone, as throughput_sublayers (39.2 s, 2026-11-26)
    "throughput_sharded": gpu_expected.Expectation(39.2, None, "as throughput_sublayers"),
    "tests_test_validate_gpu": gpu_expected.measured(1.9, "2026-11-26b_window"),
}


def replay_recorded_window(
    window: str, tmp_path: Path, monkeypatch, told: dict | None = None
) -> ReplayHarness:
    """The window's own steps in its own order through the planner (run_window), each taking
    its recorded time: a step that did not finish takes what OLD_STEPS knows it needs. The
    planner is told OLD_STEPS too, or `told` where given (a wrong expectation)."""
    truth = {**gpu_expected.EXPECTED, **OLD_STEPS}
    monkeypatch.setattr(gpu_expected, "EXPECTED", {**truth, **(told or {})})
    record = json.loads((RECORDS / window / "summary.json").read_text())
    seconds = recorded_seconds(window)
    names = list(dict.fromkeys(s["name"].split("_after_crash_")[0] for s in record["steps"]))
    durations = {}
    for step in record["steps"]:
        name = step["name"].split("_after_crash_")[0]
        finished = step["status"] in ("ok", "failed") and name in seconds
        durations[name] = seconds[name] if finished else truth[name].seconds
    monkeypatch.setattr(
        gpu_window, "STEPS", tuple(gpu_window.Step(n, 1e6, replayed) for n in names)
    )
    h = ReplayHarness(durations, tmp_path)
    gpu_window.run_window(h, None)
    return h


def skipped(h: ReplayHarness) -> dict[str, str]:
    return {s["name"]: s["reason"] for s in h.summary["steps"] if s["status"] == "skipped"}


@pytest.mark.parametrize(
    "window, would_have_started",
    [
        # throughput_sharded started with 28 s left and was killed at its cap, with nothing
        ("2026-11-28_window", "throughput_sharded"),
        # HF compile's warm-up alone was 52 s; the step started with 65 s left and was killed
        ("2026-11-26b_window", "throughput_compiled"),
    ],
)
def test_replayed_windows_start_nothing_that_cannot_finish(
    tmp_path, monkeypatch, window, would_have_started
):
    h = replay_recorded_window(window, tmp_path, monkeypatch)
    assert could_not_finish(h) == []
    assert skipped(h)[would_have_started].startswith("would not finish (expected ")
    assert would_have_started in h.summary["continue"]["steps"]


def test_the_replay_fails_a_planner_without_the_check(tmp_path, monkeypatch):
    """The replay can fail: without the check, 2026-11-28's throughput_sharded starts with 28 s
    left again; with a wrong expectation (HF compiled in 30 s), 2026-11-26b's compiled run."""
    monkeypatch.setattr(gpu_window, "starts", lambda h, name: True)
    h = replay_recorded_window("2026-11-28_window", tmp_path, monkeypatch)
    assert [v.split()[0] for v in could_not_finish(h)][:1] == ["throughput_sharded"]
    monkeypatch.undo()
    wrong = {"throughput_compiled": gpu_expected.measured(30.0)}
    h = replay_recorded_window("2026-11-26b_window", tmp_path, monkeypatch, told=wrong)
    assert [v.split()[0] for v in could_not_finish(h)] == ["throughput_compiled"]


def test_the_window_replayed_on_its_newest_record(tmp_path, monkeypatch):
    """Today's steps, each taking what 2026-11-28 recorded (the steps no window has run, their
    estimates): the first call runs the learning proof and every GPU test file, and the plan
    for --continue holds what is left (the throughput process among it), within its budget."""
    durations = {
        # a test file no window has run yet takes its estimate
        **{n: gpu_expected.expectation(n).seconds for n, _ in gpu_window.units(ROOT)},
        **{n: e.seconds for n, e in gpu_expected.EXPECTED.items()},
        **recorded_seconds(gpu_expected.NEWEST),
    }
    steps = tuple(
        s if s.name == "gpu_tests" else gpu_window.Step(s.name, s.cap_s, replayed)
        for s in gpu_window.STEPS
    )
    monkeypatch.setattr(gpu_window, "STEPS", steps)
    h = ReplayHarness(durations, tmp_path)
    gpu_window.run_window(h, None)
    assert could_not_finish(h) == []
    started = [n for n, _, _ in h.started]
    # the first things run in the first call: the learning proof and every GPU test file
    first = ["device", "build", "learning_proof", "smoke", "sdpa_probe"]
    tests = [gpu_window.test_step_name(p) for p in gpu_window.gpu_test_files(ROOT)]
    assert started[: len(first) + len(tests) + 1] == first + tests + ["attention_probe"]
    # what did not start is the --continue call's, the throughput process among it, and fits
    assert "throughput" in skipped(h)
    assert h.summary["continue"]["steps"] == list(skipped(h)) and h.summary["continue"]["fits"]
    assert h.summary["plan"]["continue_call"] == h.summary["continue"]


def test_a_timed_out_step_kills_its_whole_process_group(tmp_path):
    """A step's children (pytest workers, compilers) die with it: nothing outlives its cap."""
    marker = tmp_path / "child.pid"
    code = (
        f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', "
        f"'import time; time.sleep(60)']); open({str(marker)!r}, 'w').write(str(p.pid)); "
        f"time.sleep(60)"
    )
    with open(tmp_path / "log", "w") as log:
        assert run_capped([sys.executable, "-c", code], dict(os.environ), log, 3) == 124
    child = int(marker.read_text())
    time.sleep(0.2)
    assert not alive(child)


def alive(pid: int) -> bool:
    """Running (a killed child whose reaper has not collected it yet is a zombie: dead)."""
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in state


def test_gpu_test_files_are_found_by_their_code_not_their_strings():
    """The 2026-11-26 window ran this file as a GPU test file (its fixture strings hold
    `pytest.mark.gpu`), and pytest, with nothing to select, failed the step."""
    assert gpu_window.has_gpu_tests("import pytest\n\npytestmark = pytest.mark.gpu\n")
    assert gpu_window.has_gpu_tests("@pytest.mark.gpu\ndef test_a(): pass\n")
    assert gpu_window.has_gpu_tests("from gpu_gate import require_cuda\n")
    assert not gpu_window.has_gpu_tests(f"FIXTURE = {CRASHING_TESTS!r}\ndef test_a(): pass\n")
    files = gpu_window.gpu_test_files(ROOT)
    assert "tests/tools/test_validate_gpu.py" not in files
    assert {"tests/kernels/test_dense.py", "tests/unit/test_attention.py"} <= set(files)


def test_a_throughput_variant_the_bench_would_refuse_fails_the_dry_run(tmp_path, monkeypatch):
    """CUDA graphs cannot run with the sharded optimizer: a window list naming that set would
    spend GPU time on nothing, so the dry run (and CI) fails on it, naming the reason."""
    variants = ("fastest", "flash_varlen+fusedlamb+graphs")
    monkeypatch.setattr(gpu_window, "THROUGHPUT_VARIANTS", variants)
    harness = validate_gpu.Harness("window", tmp_path, dry_run=True, budget_s=300)
    gpu_window.throughput(harness, gpu_window.Step("throughput", 120, gpu_window.throughput))
    step = harness.summary["steps"][-1]
    assert step["status"] == "failed", step
    assert "flash_varlen+fusedlamb+graphs" in step["reason"]
    assert "optim.sharded=true" in step["reason"]


def test_the_throughput_estimate_counts_the_graphed_variants():
    graphed = [v for v in gpu_window.THROUGHPUT_VARIANTS if "+graphs" in v]
    assert len(graphed) == gpu_expected.GRAPHED_VARIANTS
    rounds = gpu_expected.THROUGHPUT_PARTS_S[
        f"2 rounds of 10 steps of the {len(gpu_window.THROUGHPUT_VARIANTS)} variants"
    ]
    assert rounds > 0
