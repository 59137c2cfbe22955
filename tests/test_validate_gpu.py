"""The GPU harness (scripts/bench/validate_gpu.sh) on a CPU machine: its dry run, which CI runs so
the harness cannot rot between GPU windows, and the pieces a GPU run depends on."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from scripts import script_utils  # noqa: E402
from scripts.bench import gpu_report, validate_gpu  # noqa: E402

HARNESS = ROOT / "scripts" / "bench" / "validate_gpu.sh"


def dry_run(stage: str, out: Path, **env) -> tuple[subprocess.CompletedProcess, dict]:
    run = subprocess.run([str(HARNESS), "--dry-run", stage], cwd=ROOT, capture_output=True,
                         text=True, env={**os.environ, "OUT": str(out), "PYTHON": sys.executable,
                                         **env}, timeout=600)
    summary = out / "summary.json"
    return run, json.loads(summary.read_text()) if summary.is_file() else {}


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
    for name in ("tests/kernels/test_dense.py", "tests/test_fused_model.py",
                 "tests/test_sync_free.py", "tests/test_attention.py"):
        assert tests["per_file"][name]["collected"] > 0
    steps = {s["name"]: s for s in summary["steps"]}
    assert steps["build"]["status"] == "skipped"
    # Each microbenchmark's planned command (flags included) is checked against its --help.
    for script, _, compiled in validate_gpu.MICROBENCH:
        assert steps[script]["status"] == "ok"
        assert "--no-compile" in steps[script]["planned_command"]
        if compiled:
            assert steps[f"{script}_compiled"]["status"] == "ok"


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
    monkeypatch.setitem(validate_gpu.THROUGHPUT, "throughput",
                        [("renamed", ["--fastest", "flash_varlen", "--no-such-flag"], 60)])
    monkeypatch.setenv("OUT", str(tmp_path))
    assert validate_gpu.main(["throughput", "--dry-run"]) == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["failed_steps"] == ["renamed"]
    assert "--no-such-flag" in summary["steps"][-1]["reason"]


def test_commit_never_unknown_without_git(tmp_path, monkeypatch):
    """The GPU machine's copy has no .git: $BERT_COMMIT, else the stamp prepare_gpu_carry.sh
    writes; with neither, the harness refuses to run."""
    monkeypatch.setattr(script_utils, "ROOT", tmp_path)  # not a git checkout
    monkeypatch.delenv("BERT_COMMIT", raising=False)
    monkeypatch.delenv("OUT", raising=False)
    assert script_utils.git_commit() == "unknown"
    monkeypatch.setattr(validate_gpu, "git_commit", script_utils.git_commit)
    assert validate_gpu.main(["kernels", "--dry-run", "--out", str(tmp_path / "o")]) == 2
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
    required = subprocess.run(args, cwd=ROOT, capture_output=True, text=True,
                              env={**env, "BERT_REQUIRE_GPU": "1", "BERT_REQUIRE_KERNELS": "1"})
    assert required.returncode != 0
    assert "error" in required.stdout.splitlines()[-1] and "skipped" not in required.stdout


def test_a_hung_step_costs_its_timeout_and_later_steps_are_skipped(tmp_path):
    harness = validate_gpu.Harness("kernels", tmp_path, dry_run=True,
                                   budget_s=validate_gpu.RESERVE_S + 8)
    assert harness.step("hang", [sys.executable, "-c", "import time; time.sleep(60)"], 2) == 124
    while harness.remaining() >= 5:  # wait out the rest of the budget
        pass
    assert harness.step("late", [sys.executable, "-c", "pass"], 60) == 124
    assert harness.finish() == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [(s["name"], s["status"]) for s in summary["steps"]] == [("hang", "timeout"),
                                                                    ("late", "skipped")]
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
    assert (counts["collected"], counts["passed"], counts["failed"], counts["skipped"],
            counts["errored"]) == (4, 1, 1, 1, 1)
    assert counts["per_file"]["tests/kernels/test_dense.py"] == {
        "passed": 1, "failed": 1, "skipped": 0, "errored": 0}
    assert gpu_report.junit_counts(tmp_path / "missing.xml")["collected"] == 0


def test_speedups_and_targets():
    rows = gpu_report.speedups({"results": [
        {"tokens": 4096, "dtype": "bf16", "torch_eager_ms": 2.0, "torch_compile_ms": 1.0,
         "fused_ms": 0.5, "fused_gbps": 900.0, "target_met": True}]})
    assert rows == [{"tokens": 4096, "dtype": "bf16", "fused_vs_torch_eager": 4.0,
                     "fused_vs_torch_compile": 2.0}]
    measured = {"run": {"variants": {"fastest": {"samples_per_s": 1200.0, "mfu": 0.5}},
                        "ratios": {"fastest/hf_eager": 3.5, "fastest/hf_compile": 1.5}}}
    targets = gpu_report.targets(measured)
    assert targets["fastest_samples_per_s"] == {"target": 1000.0, "measured": 1200.0, "met": True}
    assert targets["fastest/hf_compile"]["met"] is False
    assert gpu_report.targets({})["fastest/hf_eager"]["met"] is None
