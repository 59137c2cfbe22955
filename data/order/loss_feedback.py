"""Step losses from the training loop to the data thread, without a host-device sync in the step.

The loss-driven curricula (data/order/curriculum.py: loss_controlled, exp3s) pick the bucket of a
step from the losses of earlier steps. The data thread prepares steps ahead, so it uses the losses
of steps up to `lag` = prefetch depth + 1 behind the one it prepares: when the thread prepares
step s, step s - lag has already been handed to the training loop (the queue holds at most
depth steps), so the thread only ever waits for work the device is doing or has done, never
for the loop to take more. The lag is fixed, so every rank feeds its curriculum the same
steps' losses whatever its timing.

    feedback.observe(step, loss)   main thread, after the step; loss: () device tensor
    feedback.value(step) -> float  data thread; waits for observe() and for the copy

On CUDA, observe() only queues a non_blocking copy of the loss into pinned host memory and
records an event behind it on the current stream: no host sync in the training step. value()
waits on that event on the data thread. On CPU the loss is just read.

`values(steps)` reads the losses a checkpoint must carry (data/pipeline.py: state_dict), and
`preload` puts them back on resume; on CUDA that read syncs, at checkpoint points only.
"""

from __future__ import annotations

import threading

import torch

POLL_S = 0.05  # wake-up period of value(): bounds the reaction to close()


class _Loss:
    """One step's loss: a value, or a pinned host copy and the event that completes it."""

    __slots__ = ("value", "host", "event")

    def __init__(self, value: float | None, host: torch.Tensor | None = None, event=None):
        self.value, self.host, self.event = value, host, event

    def read(self) -> float:
        if self.value is None:
            self.event.synchronize()  # blocks the calling (data) thread only
            self.value = float(self.host)
        return self.value


class LossFeedback:
    """Per-step losses of this rank, posted by the training loop, read by the data thread."""

    def __init__(self, device: torch.device | str, lag: int):
        if lag < 1:
            raise ValueError(f"LossFeedback: lag={lag} must be >= 1")
        self.cuda = torch.device(device).type == "cuda"
        self.lag = lag
        self._losses: dict[int, _Loss] = {}
        self._cond = threading.Condition()
        self._closed = False

    # -- main thread -----------------------------------------------------------------------

    def observe(self, step: int, loss: torch.Tensor) -> None:
        """Post `step`'s loss, a () tensor on the training device (detached here)."""
        loss = loss.detach()
        if self.cuda and loss.is_cuda:
            host = torch.empty((), dtype=torch.float32, pin_memory=True)
            host.copy_(loss.float(), non_blocking=True)
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(loss.device))
            record = _Loss(None, host, event)
        else:
            record = _Loss(float(loss))
        with self._cond:
            self._losses[int(step)] = record
            # the data thread never needs a loss more than `lag` steps behind the loop
            for old in [s for s in self._losses if s < step + 1 - self.lag]:
                del self._losses[old]
            self._cond.notify_all()

    def observed(self, step: int) -> bool:
        with self._cond:
            return step in self._losses

    def values(self, steps) -> dict[int, float]:
        """{step: loss} for checkpointing; every step must have been observed (syncs on CUDA)."""
        with self._cond:
            missing = [s for s in steps if s not in self._losses]
            records = {s: self._losses[s] for s in steps if s in self._losses}
        if missing:
            raise RuntimeError(
                f"the losses of steps {missing} were not posted: call "
                f"pipeline.observe_loss(loss) after every step, before saving"
            )
        return {s: r.read() for s, r in records.items()}

    def preload(self, values: dict) -> None:
        """Losses of steps trained before a resume (from `values`)."""
        with self._cond:
            for step, value in values.items():
                self._losses[int(step)] = _Loss(float(value))
            self._cond.notify_all()

    def close(self) -> None:
        """Wake a waiting value() with an error (the pipeline is shutting down)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # -- data thread -----------------------------------------------------------------------

    def value(self, step: int) -> float:
        """`step`'s loss, once posted and copied; RuntimeError if closed while waiting."""
        with self._cond:
            while step not in self._losses:
                if self._closed:
                    raise RuntimeError(
                        f"data pipeline closed while waiting for the loss of step {step}"
                    )
                self._cond.wait(POLL_S)
            record = self._losses[step]
        return record.read()  # outside the lock: it may wait for the device
