"""MLPerf BERT learning-rate schedule: linear warmup, then polynomial decay to 0.

Step convention (used everywhere in this project): `step` is the number of optimizer steps
already taken, 0-based. The update that turns step k into step k+1 uses `lr_at(k, ...)`, as the
reference reads its global step before incrementing it. So with no warmup the very first update
uses the full base lr, and the update at step `total_steps - 1` uses base_lr / total_steps.
"""

from __future__ import annotations

from typing import Any, Union

import torch
from torch import Tensor

Step = Union[int, Tensor]


def lr_at(
    step: Step,
    base_lr: float,
    total_steps: int,
    warmup_steps: int,
    start_warmup_step: int = 0,
    power: float = 1.0,
) -> Union[float, Tensor]:
    """Learning rate for the update taken at 0-based `step` (REFERENCE.md section 1).

    warmup (warmup_steps > 0 and step < start_warmup_step + warmup_steps):
        base_lr * max(step - start_warmup_step, 0) / warmup_steps
    otherwise:
        base_lr * max(1 - step / total_steps, 0) ** power

    `step` may be a Python int (returns a float) or an integer/float tensor of any shape on any
    device (returns an fp32 tensor of the same shape on that device, without a host sync).
    """
    if total_steps <= 0:
        raise ValueError(f"total_steps must be > 0, got {total_steps}")
    if isinstance(step, Tensor):
        return _lr_tensor(step, base_lr, total_steps, warmup_steps, start_warmup_step, power)
    if warmup_steps > 0 and step < start_warmup_step + warmup_steps:
        return base_lr * max(step - start_warmup_step, 0) / warmup_steps
    return base_lr * max(1.0 - step / total_steps, 0.0) ** power


def _lr_tensor(
    step: Tensor,
    base_lr: float,
    total_steps: int,
    warmup_steps: int,
    start_warmup_step: int,
    power: float,
) -> Tensor:
    """Tensor twin of `lr_at`: both branches computed, picked with where() (no sync)."""
    s = step.to(torch.float32)
    # (total - s) / total rather than 1 - s / total: the subtraction of whole numbers is exact
    # in fp32, which keeps full relative precision near the end of the decay.
    decay = base_lr * ((total_steps - s).clamp_min(0.0) / total_steps) ** power
    if warmup_steps <= 0:
        return decay
    warm = base_lr * (s - start_warmup_step).clamp_min(0.0) / warmup_steps
    return torch.where(s < start_warmup_step + warmup_steps, warm, decay)


class PolyWarmupScheduler:
    """Sets each param group's lr from `lr_at` once per optimizer step.

    Usage: build it after the optimizer (this sets the lr for step 0), then call
    `optimizer.step(); scheduler.step()` each iteration. `steps_taken` counts optimizer steps
    already taken, so the next update uses `lr_at(steps_taken)`.

    Each group's own initial lr is its base lr (stored as `initial_lr` in the group), so groups
    with different lrs keep their ratio. A group whose lr is a tensor gets the new value written
    in place (`fill_`, an async device write, no sync), so an optimizer holding that tensor sees it.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        total_steps: int,
        warmup_steps: int = 0,
        start_warmup_step: int = 0,
        power: float = 1.0,
        steps_taken: int = 0,
    ):
        if total_steps <= 0 or warmup_steps < 0:
            raise ValueError(
                f"bad schedule: total_steps={total_steps}, warmup_steps={warmup_steps}"
            )
        self.optimizer = optimizer
        self.total_steps = total_steps
        self.warmup_steps = warmup_steps
        self.start_warmup_step = start_warmup_step
        self.power = power
        self.steps_taken = steps_taken
        for group in optimizer.param_groups:
            # float() of a device tensor syncs once here, at construction only.
            group.setdefault("initial_lr", float(group["lr"]))
        self._apply()

    @property
    def base_lrs(self) -> list[float]:
        return [group["initial_lr"] for group in self.optimizer.param_groups]

    def step(self) -> None:
        """Record one more optimizer step and set the lr for the next one."""
        self.steps_taken += 1
        self._apply()

    def get_last_lr(self) -> list[float]:
        """The lr each group will use for the next update (host floats; no device read)."""
        return [self._lr(base) for base in self.base_lrs]

    def _lr(self, base_lr: float) -> float:
        return lr_at(
            self.steps_taken,
            base_lr,
            self.total_steps,
            self.warmup_steps,
            self.start_warmup_step,
            self.power,
        )

    def _apply(self) -> None:
        for group in self.optimizer.param_groups:
            lr = self._lr(group["initial_lr"])
            if isinstance(group["lr"], Tensor):
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr

    def state_dict(self) -> dict[str, Any]:
        return {
            "steps_taken": self.steps_taken,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "start_warmup_step": self.start_warmup_step,
            "power": self.power,
            "base_lrs": self.base_lrs,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores the counter and schedule, and sets the lr for the restored step."""
        self.steps_taken = state["steps_taken"]
        self.total_steps = state["total_steps"]
        self.warmup_steps = state["warmup_steps"]
        self.start_warmup_step = state["start_warmup_step"]
        self.power = state["power"]
        for group, base in zip(self.optimizer.param_groups, state["base_lrs"]):
            group["initial_lr"] = base
        self._apply()
