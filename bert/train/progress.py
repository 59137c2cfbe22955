"""Human progress lines on rank 0 (MLPerf lines go through bert/mlperf/writer.py, never here),
through the `logging` setup of bert/obs/logs.py (time, rank, level on every line).

`--quiet` silences the progress lines but not the `result` lines (how the run ended).

One speed figure: Progress owns the interval clock, and a point's samples/s is the figure
metrics.jsonl records for it (`on_point` gets the interval's seconds; bert/obs/metrics.py).
The interval is training time: an eval point ends one (`point`) and the next starts when the
eval is done (`restart_interval`), so eval time lowers no rate, as MFU needs. The time left is
wall time, evals included: to the run's last step (run.max_steps, else the schedule's end) at
the mean rate since the start, and "at most": the target accuracy may end the run sooner, and
nothing predicts when.

The step loss stays on the device; it is read only when a progress line is due (every
`interval_s` seconds), which is the one host-device sync outside eval points. So is the lr: the
trainer passes the optimizer's `lr` function, called only for a line (the sharded optimizer's
lr comes from its device step count). `on_point(step, samples, loss, lr, seconds)` receives
the values read at each point and the interval's training seconds (the metrics record,
bert/obs/metrics.py); with it, a --quiet run still has its points, without lines. `point()`
makes one now (the trainer, before each eval).
"""

from __future__ import annotations

import time
from typing import Callable

import torch

from bert.obs.logs import get_logger

LOG = get_logger("progress")


def _duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600:d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class Progress:
    """`enabled`: this rank prints (rank 0 only). `quiet` (--quiet): only `result` lines, the
    outcome of the run, which a quiet run must still report."""

    def __init__(
        self,
        enabled: bool,
        interval_s: float = 10.0,
        quiet: bool = False,
        on_point: Callable[[int, int, float, float, float], None] | None = None,
    ):
        self.enabled = enabled
        self.quiet = quiet
        self.on_point = on_point
        self.interval_s = interval_s
        self.total_samples = 0
        self.total_steps = 0
        self.end_name = "max_steps"  # what ends the run at total_steps, for the time left
        self._t0 = self._last_time = time.time()
        self._start_samples = self._last_samples = 0
        self._loss_sum: torch.Tensor | None = None
        self._loss_steps = 0

    def line(self, text: str) -> None:
        if self.enabled and not self.quiet:
            LOG.info(text)

    def result(self, text: str) -> None:
        """A line printed even with --quiet: how the run ended, or what it did to files."""
        if self.enabled:
            LOG.info(text)

    def start(
        self,
        total_samples: int,
        start_samples: int = 0,
        total_steps: int = 0,
        end_name: str = "max_steps",
    ) -> None:
        """Start the clock for a run of at most `total_samples` samples (`total_steps` steps),
        `start_samples` of them already trained (a resumed run). end_name: what sets the last
        step (run.max_steps, the schedule's end), named in the time left."""
        self.total_samples, self.total_steps, self.end_name = total_samples, total_steps, end_name
        self._t0 = self._last_time = time.time()
        self._start_samples = self._last_samples = start_samples

    def step(
        self, step: int, samples: int, step_loss: torch.Tensor, lr: Callable[[], float]
    ) -> None:
        """Record one optimizer step; print a line if one is due.

        lr: called only for a line; returns the lr of the next real update (fp16: a skipped
        step leaves it where it was, bert/optim/registry.py)."""
        if not self.enabled or (self.quiet and self.on_point is None):
            return
        self._loss_sum = step_loss if self._loss_sum is None else self._loss_sum + step_loss
        self._loss_steps += 1
        if time.time() - self._last_time >= self.interval_s:
            self.point(step, samples, lr)

    def point(self, step: int, samples: int, lr: Callable[[], float]) -> None:
        """A point now, over the steps since the last one (none: nothing to report)."""
        if not self.enabled or self._loss_steps == 0:
            return
        now = time.time()
        loss = float(self._loss_sum) / self._loss_steps  # host read at log points only
        lr_now = lr()
        seconds = max(now - self._last_time, 1e-9)  # training time: evals excluded
        rate = (samples - self._last_samples) / seconds
        self.line(
            f"step {step:6d} | samples {samples:9d} | loss {loss:7.4f} | lr {lr_now:.3e} | "
            f"{rate:8.1f} samples/s | elapsed {_duration(now - self._t0)} | "
            f"{self.eta(samples, now)}"
        )
        if self.on_point is not None:
            self.on_point(step, samples, loss, lr_now, seconds)
        self.restart_interval(samples, now)
        self._loss_sum, self._loss_steps = None, 0

    def restart_interval(self, samples: int, now: float | None = None) -> None:
        """The next interval starts now (after a point; after an eval, whose time no rate
        counts)."""
        self._last_time = time.time() if now is None else now
        self._last_samples = samples

    def eta(self, samples: int, now: float) -> str:
        """Wall time left to the run's last step at the mean rate since the start (evals
        included: they take wall time too, and the mean does not jump with each interval's
        rate). "at most": the target accuracy may end the run sooner, and nothing predicts
        when."""
        mean_rate = (samples - self._start_samples) / max(now - self._t0, 1e-9)
        left = (self.total_samples - samples) / mean_rate if mean_rate > 0 else 0.0
        return f"at most ~{_duration(left)} to step {self.total_steps} ({self.end_name})"
