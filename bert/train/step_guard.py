"""What the trainer checks between two optimizer steps: a stop signal, and a diverged loss.

    guard = StepGuard(ctx, max_nonfinite_steps)
    stop = guard.after_step(step, step_loss)   # None, or the signal to stop on (all ranks agree)
    guard.finish()                             # at the end of the loop (no collective left open)

- Stop signals (bert/train/stop_signals.py): a signal may reach the ranks at different steps,
  and a rank that stopped alone would leave the others in a collective. So each step every
  rank all-reduces (MAX) its flags on a gloo group of its own, asynchronously, and acts on the
  previous step's result: every rank stops after the same step, one step after the first rank
  saw the signal, and the loop never waits on it.
- Divergence: `max_nonfinite_steps` consecutive steps with a non-finite loss stop the run with
  a JobError naming the step (0: never). The count lives on the device; on CUDA it is copied to
  pinned host memory without blocking and read once the copy is done, so the step never syncs
  (the decision may come a step or two late). fp16 steps that overflowed are skipped by the
  loss scaler, with a finite loss: they do not count.
"""
from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

from bert.core.errors import JobError
from bert.train import stop_signals
from bert.train.distributed import DistContext


class StepGuard:
    def __init__(self, ctx: DistContext, max_nonfinite_steps: int,
                 timeout_s: float = 600.0) -> None:
        self.ctx = ctx
        self.limit = max_nonfinite_steps
        self.step_in_progress = 0  # the step the loop is in (named by error messages)
        self._bad = torch.zeros((), dtype=torch.int64, device=ctx.device)  # consecutive
        self._bad_seen = 0  # the newest count read on the host
        self._copy: tuple[torch.Tensor, torch.cuda.Event] | None = None
        # a CPU group of its own: the flags never queue behind the step's NCCL work
        self._group = (dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))
                       if ctx.is_distributed else None)
        self._pending: tuple[dist.Work, torch.Tensor] | None = None

    def start(self, step: int) -> None:
        self.step_in_progress = step + 1

    def after_step(self, step: int, loss: torch.Tensor) -> int | None:
        """Call after optimizer step `step` (1-based). Returns the stop signal every rank
        agreed on, or None; raises JobError when the loss stayed non-finite too long."""
        self.step_in_progress = step + 1
        if self.limit:
            self._bad = torch.where(torch.isfinite(loss), 0, self._bad + 1)
            self._read_count()
        signum, bad = self._agree(stop_signals.requested() or 0, self._bad_seen)
        if self.limit and bad >= self.limit:
            raise JobError(f"training diverged: the loss was not finite for {bad} consecutive "
                           f"steps, up to step {step} (run.max_nonfinite_steps="
                           f"{self.limit}); lower optim.lr or check the data")
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
