"""Tests for data/order/curriculum.py and scripts/curriculum_experiment.py (CPU, a few seconds)."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from data.order import curricula
from data.order import curriculum as cur
from data.order import exp3s

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "curriculum_experiment.py"


def fake_losses(step: int, bucket: int) -> tuple[float, float]:
    """Deterministic (loss_before, loss_after) for a step: decays with the step, varies by
    bucket, and the gain differs per bucket, so the bandit has something to learn."""
    before = 7.0 * math.exp(-step / 60.0) + 0.1 * bucket + 0.05 * math.sin(step)
    return before, before - 0.01 * (1 + bucket % 3) * (1 + math.cos(step))


def run(curriculum, steps: range, lag: int = 0) -> list[int]:
    """Drive a curriculum like a pipeline that prefetches `lag` steps ahead."""
    buckets = {}
    for step in steps:
        buckets[step] = curriculum.next_bucket(step)
        done = step - lag
        if done >= steps.start:
            curriculum.update(buckets[done], *fake_losses(done, buckets[done]))
    return [buckets[s] for s in steps]


# ------------------------------------------------------------------------- Exp3.S by hand

# K = 3 arms, gamma = 0.2, alpha = 0.01, eta = 0.5; rewards already mapped to [-1, 1].
#
# Step 1: w = (0, 0, 0), so pi = 0.8 * 1/3 + 0.2/3 = 1/3 for every arm (eq. 1).
#   Arm 0 is drawn and earns r = +1: r~_0 = 1 / (1/3) = 3 (eq. 3), v = w + eta r~ = (1.5, 0, 0).
#   e^v = (e^1.5, 1, 1) = (4.4816890703380645, 1, 1). Eq. (2):
#   w_0 = ln(0.99 * 4.4816890703380645 + 0.01/2 * (1 + 1))      = ln(4.446872179634684)
#       = 1.4922009680605304
#   w_1 = ln(0.99 * 1 + 0.005 * (4.4816890703380645 + 1))       = ln(1.0174084453516903)
#       = 0.01725865428783131 = w_2
#   (the sharing conserves sum e^w = e^1.5 + 2 = 6.4816890703380645)
#   pi_0 = 0.8 * 4.446872179634684 / 6.4816890703380645 + 0.2/3 = 0.615520168447214
#   pi_1 = pi_2 = 0.8 * 1.0174084453516903 / 6.4816890703380645 + 0.2/3 = 0.192239915776393
#
# Step 2: arm 2 drawn (prob 0.192239915776393), r = -0.5:
#   r~_2 = -0.5 / 0.192239915776393 = -2.600916..., v_2 = 0.0172586... - 1.300458... = -1.283199...
#   w = (1.4836198373787575, 0.03038803819455915, -1.1983254309541604)
#   pi = (0.6809911763830053, 0.21030398600188183, 0.1087048376151129)
#
# Step 3: arm 1 drawn (prob 0.21030398600188183), r = +0.25:
#   r~_1 = 0.25 / 0.2103... = 1.18875..., v_1 = 0.0303880... + 0.594376... = 0.624764...
#   w = (1.4760516566757156, 0.6273722405253606, -1.1084643475007616)
#   pi = (0.5987894837776564, 0.29440445267936133, 0.1068060635429823)
HAND_STEPS = [  # (arm, reward, pi before the draw, w after the update)
    (0, 1.0, (1 / 3, 1 / 3, 1 / 3), (1.4922009680605304, 0.01725865428783131, 0.01725865428783131)),
    (
        2,
        -0.5,
        (0.615520168447214, 0.192239915776393, 0.192239915776393),
        (1.4836198373787575, 0.03038803819455915, -1.1983254309541604),
    ),
    (
        1,
        0.25,
        (0.6809911763830053, 0.21030398600188183, 0.1087048376151129),
        (1.4760516566757156, 0.6273722405253606, -1.1084643475007616),
    ),
]
HAND_FINAL_PI = (0.5987894837776564, 0.29440445267936133, 0.1068060635429823)


def test_exp3s_pure_functions_match_hand_computation():
    w = np.zeros(3)
    for arm, reward, pi, w_after in HAND_STEPS:
        probs = exp3s.exp3s_probabilities(w, gamma=0.2)
        np.testing.assert_allclose(probs, pi, rtol=0, atol=1e-12)
        w = exp3s.exp3s_update(w, arm, reward, probs[arm], eta=0.5, alpha=0.01)
        np.testing.assert_allclose(w, w_after, rtol=0, atol=1e-12)
    np.testing.assert_allclose(exp3s.exp3s_probabilities(w, 0.2), HAND_FINAL_PI, rtol=0, atol=1e-12)


def test_exp3s_class_matches_hand_computation():
    bandit = exp3s.Exp3SCurriculum(3, seed=0, eta=0.5, gamma=0.2, alpha=0.01)
    for arm, reward, pi, w_after in HAND_STEPS:
        np.testing.assert_allclose(bandit.probabilities(), pi, rtol=0, atol=1e-12)
        bandit.apply_reward(arm, reward, bandit.probabilities()[arm])
        np.testing.assert_allclose(bandit.weights, w_after, rtol=0, atol=1e-12)
    np.testing.assert_allclose(bandit.probabilities(), HAND_FINAL_PI, rtol=0, atol=1e-12)


def test_exp3s_probabilities_sum_to_one_with_exploration_floor():
    rng = np.random.default_rng(3)
    w = rng.normal(size=5)
    for _ in range(50):
        probs = exp3s.exp3s_probabilities(w, gamma=0.1)
        assert probs.sum() == pytest.approx(1.0, abs=1e-12)
        assert probs.min() >= 0.1 / 5 - 1e-15
        arm = int(rng.integers(5))
        w = exp3s.exp3s_update(w, arm, rng.uniform(-1, 1), probs[arm], eta=0.3, alpha=0.05)
    # huge weights stay finite: the max is factored out
    big = exp3s.exp3s_probabilities(np.array([1000.0, 999.0, -1000.0]), gamma=0.0)
    assert np.isfinite(big).all() and big[2] == 0.0


def test_exp3s_sum_of_exp_weights_is_that_of_v():
    w = np.array([0.3, -0.2, 1.1, 0.0])
    new = exp3s.exp3s_update(w, 2, 0.7, 0.25, eta=0.5, alpha=0.2)
    v = w.copy()
    v[2] += 0.5 * 0.7 / 0.25
    assert np.exp(new).sum() == pytest.approx(np.exp(v).sum(), rel=1e-13)


def test_exp3s_alpha_one_over_t():
    # alpha_t = 1/t with w_1 the initial weights: the first update uses 1/2, the second 1/3.
    bandit = exp3s.Exp3SCurriculum(3, seed=0, eta=0.5, gamma=0.2, alpha="1/t")
    expected = np.zeros(3)
    for t, (arm, reward) in enumerate([(0, 1.0), (1, -1.0)], start=2):
        prob = bandit.probabilities()[arm]
        expected = exp3s.exp3s_update(expected, arm, reward, prob, 0.5, 1.0 / t)
        bandit.apply_reward(arm, reward, prob)
        np.testing.assert_allclose(bandit.weights, expected, rtol=0, atol=1e-15)
    # at alpha = 1/2 with K=3 the arm's own term and the mean of the others weigh alike
    assert bandit.updates == 2


# ------------------------------------------------------------------------- reward mapping


def test_map_reward_equation_4():
    assert exp3s.map_reward(-5.0, 0.0, 2.0) == -1.0
    assert exp3s.map_reward(5.0, 0.0, 2.0) == 1.0
    assert exp3s.map_reward(0.0, 0.0, 2.0) == -1.0  # at q_lo: 2*0/2 - 1
    assert exp3s.map_reward(2.0, 0.0, 2.0) == 1.0
    assert exp3s.map_reward(0.5, 0.0, 2.0) == pytest.approx(-0.5, abs=1e-15)
    assert exp3s.map_reward(1.0, 1.0, 1.0) == 0.0  # degenerate quantiles


def test_quantile_scaler_by_hand():
    s = exp3s.QuantileRewardScaler(window=1000, low=0.2, high=0.8)
    # history [0]: q = (0, 0): degenerate, the reward equals both -> 0
    assert s.scale(0.0) == 0.0
    # history [0, 1]: q20 = 0.2, q80 = 0.8 (linear); 1 > 0.8 -> +1
    assert s.scale(1.0) == 1.0
    # history [0, 1, 2]: q20 = 0.4, q80 = 1.6; 2 > 1.6 -> +1
    assert s.scale(2.0) == 1.0
    # history sorted [-1, 0, 1, 2]: q20 = -0.4, q80 = 1.4; -1 < -0.4 -> -1
    assert s.scale(-1.0) == -1.0
    # history sorted [-1, 0, 0.5, 1, 2]: q20 = -0.2, q80 = 1.2; 2*(0.5+0.2)/1.4 - 1 = 0
    assert s.scale(0.5) == pytest.approx(0.0, abs=1e-15)
    # history [..., 0.8]: sorted [-1, 0, 0.5, 0.8, 1, 2]: q20 = 0 (pos 1), q80 = 1 (pos 4)
    assert s.scale(0.8) == pytest.approx(2 * 0.8 / 1.0 - 1, abs=1e-15)


def test_quantile_scaler_window_forgets_old_rewards():
    s = exp3s.QuantileRewardScaler(window=3)
    for raw in (100.0, -100.0, 0.0, 1.0, 2.0):
        r = s.scale(raw)
        assert -1.0 <= r <= 1.0
    assert list(s.history) == [0.0, 1.0, 2.0]
    # [1, 2, 1.5] -> q20 = 1.2, q80 = 1.8: 1.5 maps to 0, unaffected by the forgotten +-100
    assert s.scale(1.5) == pytest.approx(0.0, abs=1e-12)


def test_exp3s_update_maps_the_loss_gain_and_uses_the_draw_probability():
    bandit = exp3s.Exp3SCurriculum(4, seed=5, eta=0.2, gamma=0.1, alpha=0.01)
    scaler = exp3s.QuantileRewardScaler()
    w = np.zeros(4)
    for step in range(30):
        probs = exp3s.exp3s_probabilities(w, 0.1)
        arm = bandit.next_bucket(step)
        before, after = fake_losses(step, arm)
        bandit.update(arm, before, after)
        w = exp3s.exp3s_update(w, arm, scaler.scale(before - after), probs[arm], 0.2, 0.01)
        np.testing.assert_allclose(bandit.weights, w, rtol=0, atol=1e-12)


def test_exp3s_draws_follow_pi_and_are_seeded_by_step():
    def draws(seed: int) -> list[int]:
        bandit = exp3s.Exp3SCurriculum(3, seed=seed, gamma=1.0)  # gamma 1: pi uniform
        arms = []
        for step in range(3000):
            arms.append(bandit.next_bucket(step))
            bandit.update(arms[-1], 1.0, 0.9)
        return arms

    arms = draws(11)
    assert np.bincount(arms, minlength=3).min() > 900  # about 1000 each
    assert draws(11) == arms
    assert draws(12) != arms


def test_exp3s_update_errors():
    bandit = exp3s.Exp3SCurriculum(3, seed=0)
    with pytest.raises(ValueError, match="without a pending"):
        bandit.update(0, 1.0, 0.5)
    arm = bandit.next_bucket(0)
    with pytest.raises(ValueError, match="needs loss_after"):
        bandit.update(arm, 1.0)
    with pytest.raises(ValueError, match="drew bucket"):
        bandit.update((arm + 1) % 3, 1.0, 0.5)
    assert bandit.next_bucket(0) == arm  # asking again for a drawn step returns the same arm
    bandit.update(arm, 1.0, 0.5, step=0)
    bandit.next_bucket(2)
    with pytest.raises(ValueError, match="increasing order"):
        bandit.next_bucket(1)


def test_draws_without_updates_are_refused():
    lc = curricula.make_curriculum("loss_controlled", 2, seed=0)
    with pytest.raises(ValueError, match="without update"):
        for step in range(1000):
            lc.next_bucket(step)


# ------------------------------------------------------------------------- fixed orders


def test_increasing_decreasing_with_fixed_batches_per_visit():
    inc = curricula.make_curriculum("increasing", 3, seed=0, batches_per_visit=2)
    assert [inc.next_bucket(s) for s in range(8)] == [0, 0, 1, 1, 2, 2, 0, 0]
    dec = curricula.make_curriculum("decreasing", 3, seed=0, batches_per_visit=[1, 0, 2])
    assert [dec.next_bucket(s) for s in range(7)] == [2, 2, 0, 2, 2, 0, 2]


def test_random_order_is_a_fresh_permutation_each_round():
    rnd = curricula.make_curriculum("random", 5, seed=3, batches_per_visit=2)
    seq = [rnd.next_bucket(s) for s in range(10 * 20)]
    rounds = [seq[i : i + 10] for i in range(0, len(seq), 10)]
    orders = set()
    for r, steps in enumerate(rounds):
        assert steps[0::2] == steps[1::2]  # two consecutive batches per visit
        assert sorted(steps[0::2]) == list(range(5))  # every bucket once per round
        assert steps[0::2] == rnd.round_order(r).tolist()
        orders.add(tuple(steps[0::2]))
    assert len(orders) > 10
    again = curricula.make_curriculum("random", 5, seed=3, batches_per_visit=2)
    assert [again.next_bucket(s) for s in range(200)] == seq
    assert [
        curricula.make_curriculum("random", 5, seed=4, batches_per_visit=2).next_bucket(s)
        for s in range(200)
    ] != seq


def test_shuffled_rounds_are_permutations_of_the_visits():
    sh = curricula.make_curriculum("shuffled", 4, seed=2, batches_per_visit=[3, 1, 0, 2])
    seq = [sh.next_bucket(s) for s in range(6 * 30)]
    rounds = {tuple(seq[i : i + 6]) for i in range(0, len(seq), 6)}
    for r in rounds:
        assert sorted(r) == [0, 0, 0, 1, 3, 3]
    assert len(rounds) > 10  # the order changes from round to round
    # random access gives the same bucket as sequential access (the cache is per round)
    assert [sh.next_bucket(s) for s in (100, 3, 179, 0)] == [seq[100], seq[3], seq[179], seq[0]]


def test_proportional_visits():
    assert cur.proportional_visits([100, 300, 600], 10) == [1, 3, 6]
    visits = cur.proportional_visits([1, 1000, 10, 0, 5000], 50)
    assert sum(visits) == 50 and visits[3] == 0 and min(visits[:3]) >= 1
    assert visits[4] > visits[1] > visits[2]
    with pytest.raises(ValueError, match="non-empty buckets"):
        cur.proportional_visits([5, 5, 5], 2)


# ------------------------------------------------------------------------- loss-controlled


def test_loss_controlled_moves_on_when_loss_below_target():
    lc = curricula.make_curriculum("loss_controlled", 3, seed=0, targets=[2.0, 1.0, 0.5], window=2)
    seq = []
    losses = iter(
        [
            3.0,
            2.5,
            1.9,
            1.8,  # bucket 0: mean(1.9, 1.8) < 2 after 4 batches
            1.5,
            0.9,
            0.8,  # bucket 1: mean(0.9, 0.8) < 1 after 3
            0.4,
            0.4,  # bucket 2: mean(0.4, 0.4) < 0.5 after 2
            0.1,
        ]
    )  # round 1, bucket 0
    for step in range(10):
        b = lc.next_bucket(step)
        seq.append(b)
        lc.update(b, next(losses))
    assert seq == [0, 0, 0, 0, 1, 1, 1, 2, 2, 0]
    assert lc.visit_log == [[0, 4], [1, 3], [2, 2]]
    assert lc.round == 1


def test_loss_controlled_min_and_max_batches():
    lc = curricula.make_curriculum(
        "loss_controlled", 2, seed=0, targets=1.0, window=1, min_batches=3, max_batches=5
    )
    seq = []
    for step in range(13):
        b = lc.next_bucket(step)
        seq.append(b)
        lc.update(b, 0.0 if b == 0 else 9.0)  # bucket 0 always below, bucket 1 never
    assert seq == [0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1]


def test_loss_controlled_ignores_late_updates_of_the_previous_bucket():
    lc = curricula.make_curriculum("loss_controlled", 2, seed=0, targets=1.0, window=1)
    assert lc.next_bucket(0) == 0
    assert lc.next_bucket(1) == 0  # prefetched before update(0)
    lc.update(0, 0.5)  # below target: move on to bucket 1
    lc.update(0, 0.5)  # the prefetched step's update: bucket 0 is no longer current
    assert lc.next_bucket(2) == 1 and lc.visit_batches == 0


# ------------------------------------------------------------------------- all curricula

OPTS = {
    "increasing": {"batches_per_visit": [2, 1, 3, 1]},
    "decreasing": {"batches_per_visit": 2},
    "random": {"batches_per_visit": 3},
    "shuffled": {"batches_per_visit": [3, 1, 2, 2]},
    "loss_controlled": {"targets": [5.0, 3.0, 2.0, 1.0], "window": 3, "max_batches": 20},
    "exp3s": {"eta": 0.3, "gamma": 0.2},
}


@pytest.mark.parametrize("name", curricula.CURRICULA)
@pytest.mark.parametrize("lag", [0, 2])
def test_every_curriculum_visits_every_bucket_and_is_deterministic(name, lag):
    seq = run(curricula.make_curriculum(name, 4, seed=9, **OPTS[name]), range(200), lag)
    assert set(seq) == {0, 1, 2, 3}
    assert run(curricula.make_curriculum(name, 4, seed=9, **OPTS[name]), range(200), lag) == seq


@pytest.mark.parametrize("name", curricula.CURRICULA)
@pytest.mark.parametrize("lag", [0, 2])
def test_state_dict_resume_gives_the_identical_continuation(name, lag):
    first = curricula.make_curriculum(name, 4, seed=9, **OPTS[name])
    head = run(first, range(77), lag)
    # a checkpoint after update(76 - lag): the prefetched draws are part of the state
    state = json.loads(json.dumps(first.state_dict()))  # survives a JSON checkpoint
    tail_a = _continue(first, 77, 150, lag)
    resumed = curricula.make_curriculum(name, 4, seed=9, **OPTS[name])
    resumed.load_state_dict(state)
    tail_b = _continue(resumed, 77, 150, lag)
    assert tail_a == tail_b
    assert resumed.fingerprint() == first.fingerprint()
    assert len(head) == 77


def _continue(curriculum, start: int, stop: int, lag: int) -> list[int]:
    """Continue `run` from `start`, whose draws of start-lag..start-1 are pending."""
    buckets = {}
    for s in range(max(0, start - lag), start):
        buckets[s] = curriculum.next_bucket(s)  # recorded: returns the pending draw
    for step in range(start, stop):
        buckets[step] = curriculum.next_bucket(step)
        done = step - lag
        curriculum.update(buckets[done], *fake_losses(done, buckets[done]))
    return [buckets[s] for s in range(start, stop)]


def test_load_state_dict_rejects_another_configuration():
    a = curricula.make_curriculum("exp3s", 4, seed=1)
    with pytest.raises(ValueError, match="config"):
        curricula.make_curriculum("exp3s", 4, seed=2).load_state_dict(a.state_dict())
    with pytest.raises(ValueError, match="cannot be loaded"):
        curricula.make_curriculum("random", 4, seed=1).load_state_dict(a.state_dict())


def test_fingerprint_tracks_agreement():
    a = curricula.make_curriculum("exp3s", 4, seed=1)
    b = curricula.make_curriculum("exp3s", 4, seed=1)
    run(a, range(20))
    run(b, range(20))
    assert a.fingerprint() == b.fingerprint()
    arm = b.next_bucket(20)
    b.update(arm, 1.0, 0.0)  # b sees a loss a never saw
    arm_a = a.next_bucket(20)
    a.update(arm_a, 1.0, 0.9)
    assert a.fingerprint() != b.fingerprint()


def test_factory_errors_and_describe():
    with pytest.raises(ValueError, match="unknown curriculum 'sorted'"):
        curricula.make_curriculum("sorted", 4, seed=0)
    with pytest.raises(ValueError, match="curriculum 'exp3s'"):
        curricula.make_curriculum("exp3s", 4, seed=0, batches_per_visit=3)
    for name in curricula.CURRICULA:
        text = curricula.make_curriculum(name, 4, seed=0, **OPTS[name]).describe()
        assert text.startswith(name) and "\n" not in text
    assert curricula.make_curriculum("exp3s", 4, seed=0).needs_loss_after
    assert not curricula.make_curriculum("random", 4, seed=0).uses_losses


# ------------------------------------------------------------------------- the experiment script


def test_experiment_plot_without_matplotlib_fails_before_training(tmp_path):
    if importlib.util.find_spec("matplotlib") is not None:
        pytest.skip("matplotlib is installed: the missing-matplotlib path cannot be exercised")
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--plot", str(tmp_path / "p.png"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "pip install 'open-bert-mlperf[plot]'" in proc.stderr
    assert not out.exists()


@pytest.mark.slow  # in the default suite and CI; out of the quick subset (README)
def test_experiment_smoke(tmp_path):
    out = tmp_path / "r.json"
    # a few steps of three runs: the single-bucket baseline, a loss-driven curriculum and the
    # bandit (rewarded by visit_gain: no second forward pass)
    cmd = [
        sys.executable,
        str(SCRIPT),
        "--steps",
        "4",
        "--eval-every",
        "2",
        "--eval-samples",
        "32",
        "--batch-size",
        "8",
        "--samples-per-shard",
        "128",
        "--num-shards",
        "2",
        "--round-batches",
        "8",
        "--boundaries",
        "32,64,128",
        "--curricula",
        "baseline,loss_controlled,exp3s",
        "--out",
        str(out),
        "--data-dir",
        str(tmp_path / "data"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert {"machine", "date", "commit", "command", "config", "runs"} <= set(result)
    assert set(result["runs"]) == {"baseline", "loss_controlled", "exp3s"}
    for run_ in result["runs"].values():
        assert [p["samples"] for p in run_["evals"]] == [16, 32]
        assert all(0.0 <= p["mlm_accuracy"] <= 1.0 for p in run_["evals"])
        assert sum(run_["batches_per_bucket"]) == 4
        assert run_["seconds"] > 0
    assert len(result["runs"]["baseline"]["batches_per_bucket"]) == 1
