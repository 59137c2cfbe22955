"""The trainer's optimizer: one registry keyed by `optim.name`, two data-parallel wrappers.

`OPTIMIZERS[name]` says what a name means: how to build it replicated (a torch.optim
optimizer under DDP, or None where only the sharded path exists), which update the sharded
optimizer runs (LAMB's trust ratio or AdamW) and whether MLPerf's closed division allows it.
Its records are in specs.py, which needs no torch (the config reads them); adding an optimizer
is an entry there, with its functions here or in shard_update.py.

`build_optimizer` wraps it for data parallelism, by `optim.sharded`:
- `Replicated` (false): DDP all-reduces gradients, every rank runs the whole optimizer; fp16
  uses torch's GradScaler (one host read of its inf flag per step). The reference.
- `Sharded` (true): `ShardedOptimizer`: flat buffers, bucketed reduce-scatter overlapped with
  backward, fp32 master weights and moments sharded over the ranks (ZeRO-2), LR schedule and
  fp16 loss scaling on the device (no host sync in the step). Tested against LAMB on 1, 2 and 4
  gloo ranks. With optim.fused_kernel=true its norms and update run as the fused kernels of
  kernels/lamb.py (their GPU status: `ShardMath.fused_gpu_validated`).

Both expose: `model` (what to call forward on), `no_sync()` (gradient accumulation),
`backward(loss)`, `step()` (update, then zero the gradients), `lr()` (host float: the lr of the
next update, for display), `skipped_steps()` (fp16 overflows so far), `grad_norm()` and
`loss_scale()` (the last step's, for the metrics record), `state_dict()`/
`load_state_dict()` (optimizer, schedule and loss scale, for --resume; call on every rank).

A step skipped for fp16 overflow is, for the optimizer, as if it never happened: no parameter
or moment changes, and neither the lr schedule, nor the bias-correction step, nor the
optimizer's step count advances; only the loss scale backs off and the skip is counted. So the
next real update uses the lr and bias correction of the step number that was skipped. The
trainer's step and sample counters still advance (the batch was consumed: MLPerf counts its
samples). Both wrappers follow this rule (tests/unit/test_fp16_skip.py forces an overflow in each).
`lr()` of the sharded optimizer reads its device step count: a host sync, so the trainer calls
it only when a progress line is due.
"""

from __future__ import annotations

import contextlib
import functools
from typing import TYPE_CHECKING

import torch
from torch.nn.parallel import DistributedDataParallel

import kernels
from bert.core.lazy import load
from bert.optim.lamb import LAMB
from bert.optim.loss_scale import DynamicLossScaler
from bert.optim.params import param_groups
from bert.optim.schedule import PolyWarmupScheduler, lr_at
from bert.optim.sharded import ShardedOptimizer

# the records' names, where the trainer and tests have always found them
from bert.optim.specs import OPTIMIZERS, OptimizerSpec, ShardMath  # noqa: F401

if TYPE_CHECKING:
    from bert.optim.config import OptimConfig, ScheduleConfig
    from bert.train.distributed import DistContext


def lamb_hparams(o: "OptimConfig") -> dict:
    """The section's hyperparameters as LAMB and ShardedOptimizer both take them."""
    return dict(
        lr=o.lr,
        betas=(o.beta1, o.beta2),
        eps=o.eps,
        weight_decay=o.weight_decay,
        max_grad_norm=o.max_grad_norm,
    )


def lamb_optimizer(groups: list[dict], o: "OptimConfig") -> torch.optim.Optimizer:
    return LAMB(groups, **lamb_hparams(o))


class Replicated:
    def __init__(
        self,
        model: torch.nn.Module,
        o: "OptimConfig",
        s: "ScheduleConfig",
        fp16: bool,
        ctx: "DistContext",
    ):
        self.model = model
        if ctx.is_distributed:
            device_ids = [ctx.local_rank] if ctx.device.type == "cuda" else None
            self.model = DistributedDataParallel(model, device_ids=device_ids)
        self.optimizer = load(OPTIMIZERS[o.name].replicated)(param_groups(model, o.weight_decay), o)
        self.scheduler = PolyWarmupScheduler(
            self.optimizer, s.total_steps, s.warmup_steps, s.start_warmup_step, s.power
        )
        self.grad_scaler = torch.amp.GradScaler(ctx.device.type, enabled=fp16)
        # GradScaler skips optimizer.step() on an overflow; a post-step hook, which runs only
        # when the step ran, tells the two apart without reading anything more from the device.
        self._updated = False
        self.optimizer.register_step_post_hook(self._mark_updated)
        self.skipped = 0  # host count: GradScaler already read the inf flag on the host
        self._free_grads = True  # zero_grad frees them, unless keep_gradients()

    def keep_gradients(self) -> None:
        """Allocate every gradient now and from here on zero it in place, never free it: a
        captured CUDA graph accumulates into their fixed addresses (bert/train/graphs/)."""
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
        self._free_grads = False

    def _mark_updated(self, *_hook_args) -> None:
        self._updated = True

    def no_sync(self):
        if isinstance(self.model, DistributedDataParallel):
            return self.model.no_sync()
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        self.grad_scaler.scale(loss).backward()

    def step(self) -> None:
        self._updated = False
        self.grad_scaler.step(self.optimizer)  # fp16: reads the inf flag on the host
        self.grad_scaler.update()
        self.optimizer.zero_grad(set_to_none=self._free_grads)
        if self._updated:
            self.scheduler.step()  # a skipped step leaves the schedule where it was
        else:
            self.skipped += 1

    def lr(self) -> float:
        return self.scheduler.get_last_lr()[0]

    def skipped_steps(self) -> int:
        return self.skipped

    def grad_norm(self) -> float | None:
        """Host sync: the last step's global gradient norm (LAMB's; None for another class)."""
        norm = self.grad_norm_tensor()
        return None if norm is None else float(norm)

    def grad_norm_tensor(self) -> torch.Tensor | None:
        """The last step's global gradient norm on the device (no sync); None for an
        optimizer class that keeps none."""
        return getattr(self.optimizer, "last_grad_norm", None)

    def loss_scale(self) -> float | None:
        """Host sync: fp16's loss scale (None without fp16)."""
        return float(self.grad_scaler.get_scale()) if self.grad_scaler.is_enabled() else None

    def state_dict(self) -> dict:
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "grad_scaler": self.grad_scaler.state_dict(),
            "skipped_steps": self.skipped,
        }

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.grad_scaler.load_state_dict(state["grad_scaler"])
        self.skipped = int(state["skipped_steps"])


class Sharded:
    def __init__(
        self,
        model: torch.nn.Module,
        o: "OptimConfig",
        s: "ScheduleConfig",
        fp16: bool,
        ctx: "DistContext",
    ):
        self.model = model  # no DDP: the optimizer's hooks reduce the gradients
        spec = OPTIMIZERS[o.name].sharded
        self.loss_scaler = DynamicLossScaler(device=ctx.device) if fp16 else None
        self._schedule = functools.partial(
            lr_at,
            total_steps=s.total_steps,
            warmup_steps=s.warmup_steps,
            start_warmup_step=s.start_warmup_step,
            power=s.power,
        )
        self.optimizer = ShardedOptimizer(
            param_groups(model, o.weight_decay),
            **lamb_hparams(o),
            bucket_cap_mb=o.bucket_cap_mb,
            clip_mode=o.clip_mode,
            trust_ratio=spec.weight_norms,
            loss_scaler=self.loss_scaler,
            lr_schedule=self._schedule,
            **shard_math(spec, o.fused_kernel, ctx.device),
        )
        self.base_lr = o.lr

    def no_sync(self):
        return self.optimizer.no_sync()

    def backward(self, loss: torch.Tensor) -> None:
        if self.loss_scaler is not None:
            loss = self.loss_scaler.scale_loss(loss)
        loss.backward()

    def step(self) -> None:
        self.optimizer.step()  # an overflow is masked on the device: step_count stays
        self.optimizer.zero_grad()

    def lr(self) -> float:
        """Host sync (reads the device step count): call at log points only."""
        return float(self._schedule(self.optimizer.step_count, self.base_lr))

    def skipped_steps(self) -> int:
        """Host sync: call at log points only."""
        return int(self.optimizer.skipped_steps)

    def grad_norm(self) -> float:
        """Host sync: the last step's global gradient norm (unscaled, before clipping)."""
        return float(self.optimizer.last_grad_norm)

    def grad_norm_tensor(self) -> torch.Tensor:
        """The last step's global gradient norm on the device (no sync)."""
        return self.optimizer.last_grad_norm

    def loss_scale(self) -> float | None:
        """Host sync: fp16's loss scale (None without fp16)."""
        return None if self.loss_scaler is None else float(self.loss_scaler.scale)

    def state_dict(self) -> dict:
        """Collective (the shards are gathered): call it on every rank."""
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Also sets the model's parameters from the saved fp32 master weights."""
        self.optimizer.load_state_dict(state["optimizer"])


def shard_math(spec: ShardMath, fused: bool, device: torch.device) -> dict:
    """ShardedOptimizer's `sums_fn`/`update_fn` from the optimizer's record: its fused kernels
    (optim.fused_kernel) or its reference math."""
    if not fused:
        return {"sums_fn": load(spec.sums), "update_fn": load(spec.update)}
    if device.type == "cuda":
        kernels.require(spec.fused_op)  # fails here, with the build hint, not at the first step
    return {"sums_fn": load(spec.fused[0]), "update_fn": load(spec.fused[1])}


def build_optimizer(
    model: torch.nn.Module,
    optim: "OptimConfig",
    schedule: "ScheduleConfig",
    fp16: bool,
    ctx: "DistContext",
):
    """The configured optimizer around `model` (already on its device, weights loaded).

    fp16: the run's precision is fp16, so the loss is scaled."""
    return (Sharded if optim.sharded else Replicated)(model, optim, schedule, fp16, ctx)
