"""One rule for a step skipped for fp16 overflow, in both optimizer wrappers (registry.py doc).

For the optimizer the skipped step never happened: no parameter or moment changes, and the lr
schedule, the bias-correction step and the step count stay where they were; only the loss scale
backs off and the skip is counted. Forced here on CPU (fp16 autocast, torch's GradScaler for
`Replicated`, the device `DynamicLossScaler` for `Sharded`) by a gradient hook that turns one
parameter's gradient to inf at one step.
"""

from __future__ import annotations

import pytest
import torch

from bert.optim.config import OptimConfig, ScheduleConfig
from bert.optim.registry import Replicated, Sharded
from bert.optim.schedule import lr_at
from bert.train.distributed import DistContext
from bert.train.progress import Progress

CPU = DistContext(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
# Warmup then decay, so every step number has its own lr.
SCHEDULE = ScheduleConfig(total_steps=12, warmup_steps=3)
OPTIM = OptimConfig(lr=1e-2)
STEPS, SKIP_AT = 6, 2  # 0-based step whose gradient overflows
WRAPPERS = {"replicated": Replicated, "sharded": Sharded}


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = torch.nn.Linear(8, 16)
        self.LayerNorm = torch.nn.LayerNorm(16)  # no weight decay, as in BERT
        self.out = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.LayerNorm(self.dense(x))))


def batches(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(1)
    return [
        (torch.randn(32, 8, generator=gen), torch.randint(0, 4, (32,), generator=gen))
        for _ in range(n)
    ]


class Run:
    """A wrapper around a fresh Tiny model, trained step by step under fp16 autocast."""

    def __init__(self, kind: str):
        torch.manual_seed(0)
        self.optim = WRAPPERS[kind](Tiny(), OPTIM, SCHEDULE, True, CPU)
        self.overflow = False
        self.optim.model.dense.weight.register_hook(self._maybe_overflow)
        self.lrs: list[float] = []  # lr() after each step: the lr of the next real update

    def _maybe_overflow(self, grad: torch.Tensor) -> torch.Tensor:
        return torch.full_like(grad, float("inf")) if self.overflow else grad

    def step(self, batch, overflow: bool = False) -> None:
        self.overflow = overflow
        x, y = batch
        with torch.autocast("cpu", dtype=torch.float16):
            logits = self.optim.model(x)
        self.optim.backward(torch.nn.functional.cross_entropy(logits.float(), y))
        self.optim.step()
        self.lrs.append(self.optim.lr())

    def params(self) -> dict[str, torch.Tensor]:
        return {n: p.detach().clone() for n, p in self.optim.model.named_parameters()}

    def moments(self) -> list[torch.Tensor]:
        """exp_avg and exp_avg_sq of every parameter, in a fixed order."""
        if isinstance(self.optim, Sharded):
            state = self.optim.optimizer.state_dict()["state"]
            return [state[i][k] for i in sorted(state) for k in ("exp_avg", "exp_avg_sq")]
        opt = self.optim.optimizer
        return [
            opt.state[p][k].clone()
            for g in opt.param_groups
            for p in g["params"]
            for k in ("exp_avg", "exp_avg_sq")
        ]

    def updates_applied(self) -> set[int]:
        """The step count(s) the bias correction uses next (one per parameter for LAMB)."""
        if isinstance(self.optim, Sharded):
            return {int(self.optim.optimizer.step_count)}
        opt = self.optim.optimizer
        return {opt.state[p]["step"] for g in opt.param_groups for p in g["params"]}

    def loss_scale(self) -> float:
        if isinstance(self.optim, Sharded):
            return float(self.optim.loss_scaler.scale)
        return self.optim.grad_scaler.get_scale()


def with_skip(kind: str) -> tuple[Run, dict, list]:
    """STEPS steps, the one at SKIP_AT overflowing; also the params and moments around it."""
    run, data = Run(kind), batches(STEPS)
    around = {}
    for k, batch in enumerate(data):
        if k == SKIP_AT:
            around["before"] = (run.params(), run.moments(), run.updates_applied(), run.lrs[-1])
        run.step(batch, overflow=k == SKIP_AT)
        if k == SKIP_AT:
            around["after"] = (run.params(), run.moments(), run.updates_applied(), run.lrs[-1])
    return run, around, data


def expected_lrs() -> list[float]:
    """lr() after each step: the schedule at the number of real updates so far."""
    updates = [k + 1 - (k >= SKIP_AT) for k in range(STEPS)]
    return [lr_at(u, OPTIM.lr, SCHEDULE.total_steps, SCHEDULE.warmup_steps) for u in updates]


@pytest.mark.parametrize("kind", WRAPPERS)
def test_the_skipped_step_changes_nothing_but_the_loss_scale(kind):
    run, around, _ = with_skip(kind)
    params, moments, applied, lr = around["before"]
    params_after, moments_after, applied_after, lr_after = around["after"]
    assert all(torch.equal(params[n], params_after[n]) for n in params)
    assert all(torch.equal(a, b) for a, b in zip(moments, moments_after))
    assert applied_after == applied == {SKIP_AT}  # bias correction and step count held
    assert lr_after == lr  # the schedule held: the next update uses the skipped step's lr
    assert run.optim.skipped_steps() == 1
    assert run.loss_scale() == 2.0**15  # backed off once from 2**16 (both scalers' default)


@pytest.mark.parametrize("kind", WRAPPERS)
def test_a_run_with_a_skip_equals_the_run_without_that_batch(kind):
    """The updates after the skip use the lr and bias correction of the step number that was
    skipped: the weights equal those of STEPS-1 steps on the other batches (loss scales are
    powers of two, so the halved scale changes no gradient bit)."""
    skipped, _, data = with_skip(kind)
    clean = Run(kind)
    for k, batch in enumerate(data):
        if k != SKIP_AT:
            clean.step(batch)
    assert skipped.updates_applied() == clean.updates_applied() == {STEPS - 1}
    torch.testing.assert_close(skipped.params(), clean.params(), rtol=0, atol=0)
    torch.testing.assert_close(skipped.moments(), clean.moments(), rtol=0, atol=0)
    assert skipped.lrs[-1] == pytest.approx(clean.lrs[-1], rel=1e-6)
    assert clean.optim.skipped_steps() == 0


def test_both_optimizers_follow_one_lr_sequence():
    sequences = {kind: with_skip(kind)[0].lrs for kind in WRAPPERS}
    for kind, lrs in sequences.items():
        assert lrs == pytest.approx(expected_lrs(), rel=1e-6), kind


@pytest.mark.parametrize("kind", WRAPPERS)
def test_state_dict_keeps_the_skip_count(kind):
    run, _, _ = with_skip(kind)
    fresh = Run(kind)
    fresh.optim.load_state_dict(run.optim.state_dict())
    assert fresh.optim.skipped_steps() == 1
    assert fresh.optim.lr() == run.optim.lr()
    assert fresh.updates_applied() == run.updates_applied()


def test_progress_reads_the_lr_only_for_a_line(capsys):
    """The sharded lr() reads the device step count (a sync): never inside a step."""
    calls = []

    def lr() -> float:
        calls.append(1)
        return 1e-3

    from bert.obs.logs import setup_logging

    setup_logging(0)  # the lines go through the run's logger (set up by the trainer)
    progress = Progress(enabled=True, interval_s=3600.0)
    progress.start(total_samples=100, total_steps=10)
    progress.step(1, 10, torch.tensor(2.0), lr)
    assert calls == [] and capsys.readouterr().out == ""
    progress.interval_s = 0.0
    progress.step(2, 20, torch.tensor(2.0), lr)
    assert calls == [1] and "lr 1.000e-03" in capsys.readouterr().out
