"""MLPerf LR schedule (REFERENCE.md section 1) and PolyWarmupScheduler.

Convention: `step` = optimizer steps already taken (0-based); update k uses lr_at(k).
"""

from __future__ import annotations

import pytest
import torch

from bert.optim import LAMB, PolyWarmupScheduler, lr_at


def test_no_warmup_starts_at_full_lr():
    assert lr_at(0, 1.0, 100, 0) == 1.0


def test_warmup_is_linear_from_zero():
    assert lr_at(0, 1.0, 100, 10) == 0.0
    assert lr_at(5, 1.0, 100, 10) == pytest.approx(0.5)
    assert lr_at(9, 1.0, 100, 10) == pytest.approx(0.9)


def test_decay_after_warmup_uses_the_raw_step():
    # The poly decay is a function of the global step, not of steps since warmup ended.
    assert lr_at(10, 1.0, 100, 10) == pytest.approx(0.9)
    assert lr_at(50, 2.0, 100, 10) == pytest.approx(1.0)


def test_start_warmup_step_shifts_warmup_and_clamps_before_it():
    assert lr_at(3, 1.0, 100, 10, start_warmup_step=5) == 0.0  # before start: clamped at 0
    assert lr_at(5, 1.0, 100, 10, start_warmup_step=5) == 0.0
    assert lr_at(10, 1.0, 100, 10, start_warmup_step=5) == pytest.approx(0.5)
    assert lr_at(15, 1.0, 100, 10, start_warmup_step=5) == pytest.approx(0.85)  # decay
    # A negative start (allowed by the rules) means warmup is already part done at step 0.
    assert lr_at(0, 1.0, 100, 10, start_warmup_step=-5) == pytest.approx(0.5)


def test_endpoints_and_clamp_after_total():
    assert lr_at(99, 1.0, 100, 0) == pytest.approx(0.01)
    assert lr_at(100, 1.0, 100, 0) == 0.0
    assert lr_at(150, 1.0, 100, 0) == 0.0


def test_power():
    assert lr_at(50, 1.0, 100, 0, power=2.0) == pytest.approx(0.25)
    assert lr_at(50, 1.0, 100, 0, power=0.5) == pytest.approx(0.5**0.5)


def test_rejects_bad_total():
    with pytest.raises(ValueError):
        lr_at(0, 1.0, 0, 0)


@pytest.mark.parametrize(
    "warmup,start,power", [(0, 0, 1.0), (10, 0, 1.0), (10, 5, 1.0), (7, -3, 2.0)]
)
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32])
def test_tensor_step_matches_int_step(warmup, start, power, dtype):
    steps = list(range(0, 130))
    expected = torch.tensor([lr_at(s, 3e-3, 100, warmup, start, power) for s in steps])
    got = lr_at(torch.tensor(steps, dtype=dtype), 3e-3, 100, warmup, start, power)
    assert got.dtype == torch.float32 and got.shape == (len(steps),)
    torch.testing.assert_close(got, expected.float(), rtol=1e-6, atol=1e-12)
    zero_dim = lr_at(torch.tensor(17, dtype=dtype), 3e-3, 100, warmup, start, power)
    assert zero_dim.dim() == 0
    assert float(zero_dim) == pytest.approx(lr_at(17, 3e-3, 100, warmup, start, power), rel=1e-6)


def test_mlperf_a100_config():
    """REFERENCE.md section 3, A100 column: peak 4.25e-4, 6700 steps, no warmup."""
    base, total = 4.25e-4, 6700
    assert lr_at(0, base, total, 0) == base
    assert lr_at(3350, base, total, 0) == pytest.approx(2.125e-4)
    assert lr_at(6699, base, total, 0) == pytest.approx(base / total)
    assert lr_at(6700, base, total, 0) == 0.0
    t = lr_at(torch.tensor([0, 1000, 6700]), base, total, 0)
    torch.testing.assert_close(t, torch.tensor([base, base * (1 - 1000 / total), 0.0]))


def make_opt(lr, n_groups=2):
    params = [torch.nn.Parameter(torch.randn(3)) for _ in range(n_groups)]
    groups = [{"params": [p]} for p in params]
    return LAMB(groups, lr=lr)


def test_scheduler_sets_lr_for_steps_taken():
    opt = make_opt(1e-3)
    sched = PolyWarmupScheduler(opt, total_steps=10, warmup_steps=4)
    assert opt.param_groups[0]["lr"] == 0.0  # step 0 of warmup, set at construction
    for k in range(1, 12):
        sched.step()
        assert sched.steps_taken == k
        for group in opt.param_groups:
            assert group["lr"] == pytest.approx(lr_at(k, 1e-3, 10, 4))
    assert sched.get_last_lr() == [0.0, 0.0]


def test_scheduler_keeps_per_group_base_lr():
    p, q = torch.nn.Parameter(torch.randn(2)), torch.nn.Parameter(torch.randn(2))
    opt = LAMB([{"params": [p]}, {"params": [q], "lr": 2e-3}], lr=1e-3)
    sched = PolyWarmupScheduler(opt, total_steps=10)
    sched.step()
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.9e-3, 1.8e-3])


def test_scheduler_writes_tensor_lr_in_place():
    lr = torch.tensor(1e-3)
    opt = make_opt(lr, n_groups=1)
    sched = PolyWarmupScheduler(opt, total_steps=10)
    sched.step()
    sched.step()
    assert opt.param_groups[0]["lr"] is lr
    assert float(lr) == pytest.approx(0.8e-3)


def test_scheduler_state_dict_round_trip():
    opt = make_opt(1e-3)
    sched = PolyWarmupScheduler(opt, total_steps=100, warmup_steps=10, start_warmup_step=2)
    for _ in range(7):
        sched.step()
    state = sched.state_dict()

    opt2 = make_opt(5.0)  # a different lr: the base must come from the checkpoint
    sched2 = PolyWarmupScheduler(opt2, total_steps=1)
    sched2.load_state_dict(state)
    assert sched2.steps_taken == 7
    assert [g["lr"] for g in opt2.param_groups] == [g["lr"] for g in opt.param_groups]
    sched.step()
    sched2.step()
    assert [g["lr"] for g in opt2.param_groups] == [g["lr"] for g in opt.param_groups]
