"""Dynamic loss scaling for fp16, kept entirely on the device.

torch.amp.GradScaler decides on the host whether to skip a step, which costs one device->host
sync per step. Here the overflow flag stays a device tensor: the optimizer masks its update with
it (torch.where / multiply by 0, never a Python branch), and `update()` moves the scale with
where() as well. bf16 and fp32 need no loss scaling: build no scaler for them.

Policy (as GradScaler and apex): on an overflow step, skip the update, halve the scale and count
the skip; after `growth_interval` consecutive good steps, double the scale.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor


class DynamicLossScaler:
    """Loss scale, good-step streak and skipped-step count as 0-dim device tensors.

    Usage per step: `scaler.scale_loss(loss).backward()`; the optimizer reads `inv_scale()`,
    derives `found_inf` (a 0-dim bool tensor) and calls `update(found_inf)`. Read
    `skipped_steps()` (a host sync) only at log points.
    """

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        min_scale: float = 1.0,
        device: Optional[torch.device] = None,
    ):
        if not (growth_factor > 1.0 and 0.0 < backoff_factor < 1.0 and growth_interval > 0):
            raise ValueError(
                f"bad loss-scale policy: growth_factor={growth_factor}, "
                f"backoff_factor={backoff_factor}, growth_interval={growth_interval}"
            )
        self.growth_factor, self.backoff_factor = growth_factor, backoff_factor
        self.growth_interval, self.min_scale = growth_interval, min_scale
        self.scale = torch.full((), init_scale, dtype=torch.float32, device=device)
        self.good_steps = torch.zeros((), dtype=torch.int64, device=device)
        self.skipped = torch.zeros((), dtype=torch.int64, device=device)

    def scale_loss(self, loss: Tensor) -> Tensor:
        return loss * self.scale

    def inv_scale(self) -> Tensor:
        """1 / scale, () fp32 on the device."""
        return self.scale.reciprocal()

    @torch.no_grad()
    def update(self, found_inf: Tensor) -> None:
        """Back off on overflow, grow after a streak of good steps (device ops only).

        found_inf: () bool, True when this step's gradients held an inf or nan.
        """
        streak = torch.where(found_inf, torch.zeros_like(self.good_steps), self.good_steps + 1)
        grow = streak >= self.growth_interval
        factor = torch.where(
            found_inf, self.backoff_factor, torch.where(grow, self.growth_factor, 1.0)
        )
        self.scale.copy_((self.scale * factor).clamp_min(self.min_scale))
        self.good_steps.copy_(torch.where(grow, torch.zeros_like(streak), streak))
        self.skipped.add_(found_inf.to(self.skipped.dtype))

    def skipped_steps(self) -> int:
        """Steps skipped so far. Host sync: call at log points only."""
        return int(self.skipped.item())

    def state_dict(self) -> dict[str, Any]:
        return {
            "scale": self.scale.clone(),
            "good_steps": self.good_steps.clone(),
            "skipped": self.skipped.clone(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("scale", "good_steps", "skipped"):
            getattr(self, key).copy_(torch.as_tensor(state[key]))
