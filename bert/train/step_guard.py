"""What the trainer checks between two optimizer steps: a stop signal, and a diverged loss.

    guard = StepGuard(ctx, max_nonfinite_steps)
    stop = guard.after_step(step, step_loss, grad_norm)  # None, or the signal to stop on
    guard.finish()                             # at the end of the loop (no collective left open)

- Stop signals (bert/train/stop_signals.py): a signal may reach the ranks at different steps,
  and a rank that stopped alone would leave the others in a collective. So each step every
  rank all-reduces (MAX) its flags on a gloo group of its own, asynchronously, and acts on the
  previous step's result: every rank stops after the same step, one step after the first rank
  saw the signal, and the loop never waits on it.
- Divergence: `max_nonfinite_steps` consecutive steps with a non-finite loss or gradient norm
  stop the run with a JobError naming the step (0: never). The gradient norm catches the step
  whose update poisons the weights, before the loss shows it a step later. The count lives on
  the device; on CUDA it is copied to pinned host memory without blocking and read once the
  copy is done, so the step never syncs
  (the decision may come a step or two late). fp16 steps that overflowed are skipped by the
  loss scaler, with a finite loss: they do not count, and in fp16 the gradient norm is not
  checked (an overflow's is inf by design; `check_grad_norm=False`).
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

from bert.core.errors import JobError
from bert.train import stop_signals
from bert.train.distributed import DistContext


class StepGuard:
    def __init__(
        self,
        ctx: DistContext,
        max_nonfinite_steps: int,
        timeout_s: float = 600.0,
        check_grad_norm: bool = True,
    ) -> None:
        self.ctx = ctx
        self.limit = max_nonfinite_steps
        self.check_grad_norm = check_grad_norm
        self.step_in_progress = 0  # the step the loop is in (named by error messages)
        self._bad = torch.zeros((), dtype=torch.int64, device=ctx.device)  # consecutive
        self._bad_seen = 0  # the newest count read on the host
        self._copy: tuple[torch.Tensor, torch.cuda.Event] | None = None
        # a CPU group of its own: the flags never queue behind the step's NCCL work
        self._group = (
            dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))
            if ctx.is_distributed
            else None
        )
        self._pending: tuple[dist.Work, torch.Tensor] | None = None

    def start(self, step: int) -> None:
        self.step_in_progress = step + 1

    def after_step(
        self, step: int, loss: torch.Tensor, grad_norm: torch.Tensor | None = None
    ) -> int | None:
        """Call after optimizer step `step` (1-based) with its loss and, when the optimizer
        keeps one, its gradient norm (device tensors: no sync). Returns the stop signal every
        rank agreed on, or None; raises JobError when either stayed non-finite too long."""
        self.step_in_progress = step + 1
        if self.limit:
            finite = torch.isfinite(loss)
            if self.check_grad_norm and grad_norm is not None:
                finite = finite & torch.isfinite(grad_norm.to(finite.device))
            self._bad = torch.where(finite, 0, self._bad + 1)
            self._read_count()
        signum, bad = self._agree(stop_signals.requested() or 0, self._bad_seen)
        if self.limit and bad >= self.limit:
            raise JobError(
                f"training diverged: the loss or the gradient norm was not finite "
                f"for {bad} consecutive steps, up to step {step} "
                f"(run.max_nonfinite_steps={self.limit}); lower optim.lr or check "
                f"the data"
            )
        return signum or None

    def finish(self) -> None:
        """Wait for the last flags' all-reduce, so no collective is left in flight."""
        if self._pending is not None:
            self._pending[0].wait()
            self._pending = None

    def _read_count(self) -> None:
        if self._bad.device.type != "cuda":
            self._bad_seen = int(self._bad)  # CPU: no device to wait for
            return
        if self._copy is not None and self._copy[1].query():
            self._bad_seen = int(self._copy[0])
            self._copy = None
        if self._copy is None:
            host = torch.empty((), dtype=torch.int64, pin_memory=True)
            host.copy_(self._bad, non_blocking=True)
            done = torch.cuda.Event()
            done.record()
            self._copy = (host, done)

    def _agree(self, signum: int, bad: int) -> tuple[int, int]:
        """(signal, count): the MAX over ranks of the previous step's flags (this step's own
        flags on a single rank)."""
        if self._group is None:
            return signum, bad
        flags = torch.tensor([signum, bad], dtype=torch.int64)
        work = dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=self._group, async_op=True)
        previous, self._pending = self._pending, (work, flags)
        if previous is None:
            return 0, 0
        previous[0].wait()
        agreed = previous[1].tolist()
        return agreed[0], agreed[1]
