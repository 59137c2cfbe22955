"""What data/order/curriculum.py adds for training: exp3s's visit_gain reward, update_step, the
curriculum a config asks for, and the MLPerf division rule (the pipeline that uses them is
tested in tests/integration/test_bucketing_pipeline.py)."""

from __future__ import annotations

import numpy as np
import pytest

from bert.config import load_config
from data.order import curricula
from data.order import exp3s


def test_visit_gain_rewards_the_drop_since_the_bucket_was_last_trained():
    bandit = exp3s.Exp3SCurriculum(3, seed=4, eta=0.5, gamma=0.2, alpha=0.01, reward="visit_gain")
    assert not bandit.needs_loss_after
    scaler, w, last = exp3s.QuantileRewardScaler(), np.zeros(3), {}
    for step in range(40):
        probs = exp3s.exp3s_probabilities(w, 0.2)
        arm = bandit.next_bucket(step)
        loss = 6.0 - 0.05 * step + 0.3 * arm
        bandit.update_step(step, loss)
        if arm in last:  # a bucket's first batch: no gain, weights unchanged
            w = exp3s.exp3s_update(w, arm, scaler.scale(last[arm] - loss), probs[arm], 0.5, 0.01)
        last[arm] = loss
        np.testing.assert_allclose(bandit.weights, w, rtol=0, atol=1e-12)
    assert bandit.updates == 40 - len(last)


def test_visit_gain_state_round_trip():
    a = curricula.make_curriculum("exp3s", 3, seed=1, reward="visit_gain")
    for step in range(10):
        a.update_step(step, 5.0 - 0.1 * a.next_bucket(step) - 0.01 * step)
    b = curricula.make_curriculum("exp3s", 3, seed=1, reward="visit_gain")
    b.load_state_dict(a.state_dict())
    assert b.last_loss == a.last_loss and b.fingerprint() == a.fingerprint()
    with pytest.raises(ValueError, match="reward='gain'"):
        curricula.make_curriculum("exp3s", 3, seed=1, reward="gain")


def test_update_step_uses_the_recorded_draw():
    lc = curricula.make_curriculum("loss_controlled", 2, seed=0, targets=1.0, window=1)
    for step in range(3):
        lc.next_bucket(step)  # prefetched: three draws before any loss
    lc.update_step(1, 0.5)  # out of order: step 1's draw, bucket 0, below target
    assert [i[0] for i in lc.pending.items] == [0, 2] and lc.current_bucket == 1
    with pytest.raises(ValueError, match=r"update_step\(7\) without a pending draw"):
        lc.update_step(7, 0.5)
    fixed = curricula.make_curriculum("random", 2, seed=0)
    fixed.update_step(0, 1.0)  # a fixed order: no-op


def test_curriculum_from_config():
    def build(name, *overrides):
        d = load_config(
            None,
            [
                f"data.curriculum.name={name}",
                "data.curriculum.bucket_boundaries=32,64,128",
                *overrides,
                "data.max_seq_length=128",
                "model.max_position_embeddings=128",
                "submission.division=open",
            ],
        ).data
        return curricula.curriculum_from_config(d.curriculum, [0.5, 0.25, 0.25], seed=3)

    ordered = build("increasing", "data.curriculum.round_batches=8")
    assert ordered.visits.tolist() == [4, 2, 2] and ordered.seed == 3
    lc = build(
        "loss_controlled",
        "data.curriculum.loss_targets=5,4,3",
        "data.curriculum.loss_window=4",
        "data.curriculum.max_batches=9",
    )
    assert lc.targets.tolist() == [5, 4, 3] and lc.window == 4 and lc.max_batches == 9
    assert build("loss_controlled", "data.curriculum.max_batches=0").max_batches is None
    bandit = build("exp3s", "data.curriculum.alpha=1/t", "data.curriculum.eta=0.3")
    assert (bandit.alpha, bandit.eta, bandit.reward) == ("1/t", 0.3, "visit_gain")


@pytest.mark.parametrize("name", curricula.CURRICULA)
def test_every_curriculum_is_open_division(name):
    assert curricula.division_error(name, "open") is None
    assert "submission.division=open" in curricula.division_error(name, "closed")
    assert curricula.division_error("none", "closed") is None
