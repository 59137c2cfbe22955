"""The GPU window's end-to-end smoke (bert/tools/gpu/smoke_train.py) on the CPU: the same four
runs and checks as on CUDA, with a tiny model; only the shape and the device differ. Each
check is shown to fail on a wrong input: a run that learned nothing, a resume that lost the
optimizer moments, the data position or the RNG, hand-made loss curves, a skipped overflow
that is not, a log missing a key."""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from bert.tools.gpu import smoke_train  # noqa: E402

from bert.optim.sharded import STATE_KEYS, ShardedOptimizer  # noqa: E402
from bert.train import train_state  # noqa: E402

CHECKS = {
    "full_run",
    "full_run_learned",
    "no_sync_in_step",
    "compliance_but_target",
    "resume_same_losses",
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
    assert resume["evals"] == resume["uninterrupted"] and len(resume["evals"]) == 1
    losses = record["checks"]["resume_same_losses"]["detail"]
    assert len(losses["gaps"]) == smoke_train.RESUME_LOSS_STEPS and losses["max_gap"] == 0.0
    learned = record["checks"]["full_run_learned"]["detail"]
    assert learned["last_eval"] >= smoke_train.LEARNED_FLOOR > 40 * learned["chance"]
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


# ---- the resume check ------------------------------------------------------------------------
CURVE = {11: 6.8, 12: 6.3, 13: 5.9, 14: 5.6}


def test_loss_gaps_pass_on_equal_curves():
    verdict = smoke_train.loss_gaps(dict(CURVE), CURVE, list(CURVE), 0.0)
    assert verdict["passed"] and verdict["max_gap"] == 0.0 and not verdict["failures"]


def test_loss_gaps_fail_on_one_step_past_the_bound():
    bound = smoke_train.RESUME_LOSS_BOUND["cuda"]
    within = {**CURVE, 13: CURVE[13] * (1 + bound / 2)}
    assert smoke_train.loss_gaps(within, CURVE, list(CURVE), bound)["passed"]
    past = {**CURVE, 13: CURVE[13] * (1 + 2 * bound)}
    verdict = smoke_train.loss_gaps(past, CURVE, list(CURVE), bound)
    assert not verdict["passed"] and len(verdict["failures"]) == 1
    assert verdict["failures"][0].startswith("step 13:")
    # bitwise on the CPU: the smallest difference fails
    nudged = {**CURVE, 12: math.nextafter(CURVE[12], 0.0)}
    assert not smoke_train.loss_gaps(nudged, CURVE, list(CURVE), 0.0)["passed"]


def test_loss_gaps_fail_on_missing_or_nonfinite_steps():
    missing = {s: v for s, v in CURVE.items() if s != 14}
    verdict = smoke_train.loss_gaps(missing, CURVE, list(CURVE), 0.01)
    assert not verdict["passed"] and verdict["failures"] == ["step 14: no loss in the resumed run"]
    verdict = smoke_train.loss_gaps(CURVE, missing, list(CURVE), 0.01)
    assert verdict["failures"] == ["step 14: no loss in the uninterrupted run"]
    assert not smoke_train.loss_gaps({}, {}, list(CURVE), 0.01)["passed"]
    for bad in (math.nan, math.inf):
        verdict = smoke_train.loss_gaps({**CURVE, 11: bad}, CURVE, list(CURVE), 0.01)
        assert not verdict["passed"]


def test_learned_fails_at_chance():
    """Evals of a model that learned nothing (the 2026-11-28 window's) fail the floor."""
    assert not smoke_train.learned([0.0, 0.0])[0]
    assert not smoke_train.learned([0.2, smoke_train.CHANCE])[0]
    assert not smoke_train.learned([])[0] and not smoke_train.learned([math.nan])[0]
    assert smoke_train.learned([0.0, smoke_train.LEARNED_FLOOR])[0]


@pytest.fixture(scope="module")
def halves(tmp_path_factory):
    """The uninterrupted run, whose checkpoint at its first block's end each test below
    resumes from in a fresh folder. test_smoke_passes_on_the_cpu is the control: the same
    resume, done right, passes bitwise."""
    root = tmp_path_factory.mktemp("halves")
    smoke = smoke_train.Smoke("cpu", root / "smoke.json", root / "work")
    return smoke, smoke.full()


def lose_moments(monkeypatch):
    """The optimizer's moments lost (weights, step count and schedule restored)."""
    load = ShardedOptimizer.load_state_dict

    def without_moments(self, state_dict):
        load(self, state_dict)
        for shard in self._shards.values():
            for key in STATE_KEYS[1:]:  # exp_avg, exp_avg_sq
                getattr(shard, key).zero_()

    monkeypatch.setattr(ShardedOptimizer, "load_state_dict", without_moments)


def lose_data_position(monkeypatch):
    """The data pipeline starts over instead of where the first half stopped."""
    monkeypatch.setattr(
        train_state.TrainState, "attach_pipeline", lambda self, p: setattr(self, "pipeline", p)
    )


def lose_rng(monkeypatch):
    """The RNG (dropout masks) left as the new process seeded it."""
    monkeypatch.setattr(train_state, "set_rng_state", lambda *args: None)


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault, first_wrong_step, past_cuda_bound",
    [(lose_moments, 12, True), (lose_data_position, 11, True), (lose_rng, 11, False)],
    ids=["moments", "data_position", "rng"],
)
def test_wrong_resume_fails(halves, monkeypatch, fault, first_wrong_step, past_cuda_bound):
    """Each lost piece of state fails resume_same_losses on the CPU (bitwise). Lost moments
    show from the second step after the resume only: the first step's loss is computed
    before the optimizer runs. Lost moments and a lost data position also fail CUDA's bound;
    other dropout masks move the loss by less (0.04-0.44% here): only the CPU's bitwise check
    tells them from rounding (smoke_train.RESUME_LOSS_BOUND)."""
    smoke, reference = halves
    shutil.rmtree(smoke.work / "resume", ignore_errors=True)
    fault(monkeypatch)
    smoke.second_half(reference)
    check = smoke.record["checks"]["resume_same_losses"]
    assert not check["passed"] and check["detail"]["resumed"]["error"] is None
    gaps = check["detail"]["gaps"]
    block = smoke_train.STEPS_PER_BLOCK["cpu"]
    assert all(gaps[s] == 0.0 for s in range(block + 1, first_wrong_step))
    assert gaps[first_wrong_step] > 0.0
    resumed = smoke_train.train_losses(smoke.work / "resume", smoke_train.resumed_log_name(block))
    cuda = smoke_train.RESUME_LOSS_BOUND["cuda"]
    verdict = smoke_train.loss_gaps(resumed, reference["losses"], check["detail"]["steps"], cuda)
    assert verdict["passed"] is not past_cuda_bound, verdict
