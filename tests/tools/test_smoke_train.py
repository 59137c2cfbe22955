"""The GPU window's end-to-end smoke (bert/tools/gpu/smoke_train.py) on the CPU: the same four
runs and checks as on CUDA, with the default run's tiny model; only the device differs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from bert.tools.gpu import smoke_train  # noqa: E402

CHECKS = {
    "full_run",
    "no_sync_in_step",
    "compliance_but_target",
    "resume_same_evals",
    "fp16_overflow_skipped",
}


@pytest.mark.slow
def test_smoke_passes_on_the_cpu(tmp_path):
    out = tmp_path / "smoke.json"
    assert (
        smoke_train.main(["--device", "cpu", "--out", str(out), "--work", str(tmp_path / "work")])
        == 0
    )
    record = json.loads(out.read_text())
    assert set(record["checks"]) == CHECKS and record["failed_checks"] == []
    resume = record["checks"]["resume_same_evals"]["detail"]
    assert resume["evals"] == resume["uninterrupted"] and len(resume["evals"]) == 2
    assert record["checks"]["fp16_overflow_skipped"]["detail"]["skipped_steps"] == 1
    assert record["commit"] and record["date"]


def test_smoke_fails_when_no_step_is_skipped(tmp_path, monkeypatch):
    """The fp16 check can fail: an overflow forced past the run's last step skips nothing."""
    monkeypatch.setattr(smoke_train, "FORCED_OVERFLOW_STEP", 99)
    smoke = smoke_train.Smoke("cpu", tmp_path / "smoke.json", tmp_path / "work")
    smoke.fp16()
    check = smoke.record["checks"]["fp16_overflow_skipped"]
    assert not check["passed"] and check["detail"]["skipped_steps"] == 0


def test_compliance_other_than_the_target_fails(tmp_path):
    """A log missing a required key fails even though only the target rule is forgiven."""
    log = tmp_path / "mlperf.log"
    log.write_text(
        ':::MLLOG {"key": "run_start", "value": null, "time_ms": 1, '
        '"namespace": "", "event_type": "INTERVAL_START", "metadata": {}}\n'
    )
    found = smoke_train.compliance(log)
    assert not found["passed"]
