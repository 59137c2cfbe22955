"""The profiler window: torch.profiler over chosen training steps, one trace per rank.

`profile.steps` > 0 records optimizer steps start_step .. start_step + steps - 1 (1-based), after
one warm-up step when the run has one before the window (the profiler's own start-up lands
there, not in the recorded steps). Outside the window nothing is profiled: the torch profiler
is created one step before the window and dropped after it, and the named ranges
(bert/core/ranges.py) are null contexts.

Each rank writes PROFILE_DIR/trace_rank<R>_steps<A>-<B>.json.gz (Chrome / Perfetto trace,
open it in https://ui.perfetto.dev or chrome://tracing) and, on CUDA with
`profile.memory_snapshot`, memory_rank<R>_steps<A>-<B>.pickle (torch.cuda.memory's snapshot,
for https://pytorch.org/memory_viz). A table of the window (time per named range, top ops) is
logged when the window closes. A run that ends inside its window writes what it recorded.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity

from bert.core.files import temp_name
from bert.core import ranges
from bert.obs.config import ProfileConfig
from bert.obs.logs import get_logger

LOG = get_logger("profile")
MEMORY_HISTORY_ENTRIES = 100_000


class ProfilerWindow:
    def __init__(
        self, cfg: ProfileConfig, folder: Path, rank: int, device: torch.device, first_step: int
    ) -> None:
        """first_step: the first step this run trains (1, or the step after a resume point)."""
        self.first, self.last = cfg.start_step, cfg.start_step + cfg.steps - 1
        self.folder, self.rank, self.device = folder, rank, device
        self.memory = cfg.memory_snapshot and device.type == "cuda"
        self.begin = max(first_step, self.first - 1)  # the profiler starts before this step
        self.prof: torch.profiler.profile | None = None
        self.trace_path: Path | None = None
        self.done = self.first - 1  # the last step recorded so far
        self.summary = ""
        self.enabled = cfg.steps > 0 and first_step <= self.first
        if cfg.steps > 0 and not self.enabled:
            LOG.info(
                f"profile: steps {self.first}-{self.last} come before this run's first "
                f"step {first_step}: not recorded"
            )

    @property
    def name(self) -> str:
        """Named after the steps recorded (fewer than asked when the run ended inside)."""
        return f"rank{self.rank}_steps{self.first}-{self.done}"

    def step_begin(self, step: int) -> None:
        if self.enabled and step == self.begin and self.prof is None:
            self._start()

    def step_end(self, step: int) -> None:
        if self.prof is None:
            return
        self.done = max(self.done, step)
        self.prof.step()
        if step >= self.last:
            self.close()

    def close(self) -> None:
        """Stop recording (at the window's end, or when the run ends inside it)."""
        prof, self.prof = self.prof, None
        if prof is None:
            return
        self.enabled = False
        try:
            prof.stop()  # inside the window: writes what was recorded (on_trace_ready)
        finally:
            ranges.set_recording(False)
            if self.memory:
                torch.cuda.memory._record_memory_history(enabled=None)

    def _start(self) -> None:
        activities = [ProfilerActivity.CPU]
        if self.device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        warmup = self.first - self.begin
        if not warmup:
            LOG.warning(
                f"profile: step {self.first} is the run's first: no warm-up step before "
                f"the window, so its first step includes the profiler's start-up"
            )
        with warnings.catch_warnings():  # torch's own warning says the same, on stderr
            warnings.simplefilter("ignore", UserWarning)
            window = torch.profiler.schedule(
                wait=0, warmup=warmup, active=self.last - self.first + 1, repeat=1
            )
        # the profiler counts steps from 0 where it starts and labels each ProfilerStep#<count>:
        # counting from the training step instead labels the trace with the real step numbers
        offset = self.begin
        self.prof = torch.profiler.profile(
            activities=activities,
            schedule=lambda count: window(max(count - offset, 0)),
            on_trace_ready=self._save,
        )
        self.prof.step_num = offset
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.memory:
            torch.cuda.memory._record_memory_history(max_entries=MEMORY_HISTORY_ENTRIES)
        ranges.set_recording(True)
        self.prof.start()

    def _save(self, prof: torch.profiler.profile) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        final = _free_name(self.folder / f"trace_{self.name}.json.gz")
        tmp = final.with_name(temp_name(final).name + ".json.gz")  # gzipped by the suffix
        prof.export_chrome_trace(str(tmp))
        tmp.replace(final)
        self.trace_path = final
        if self.memory:
            snapshot = _free_name(self.folder / f"memory_{self.name}.pickle")
            torch.cuda.memory._dump_snapshot(str(snapshot))
        self.summary = summary_table(prof, self.device)
        LOG.info(f"profile: wrote {final}\n{self.summary}")


def summary_table(prof: torch.profiler.profile, device: torch.device) -> str:
    """Time per named range, then the top operators by their own time."""
    averages = prof.key_averages()
    on_gpu = device.type == "cuda"
    lines = [
        f"{'range':<12} {'calls':>6} {'host ms':>10}" + (f" {'device ms':>10}" if on_gpu else "")
    ]
    for event in averages:
        if event.key in ranges.RANGE_NAMES:
            row = f"{event.key:<12} {event.count:>6} {event.cpu_time_total / 1e3:>10.2f}"
            if on_gpu:
                row += f" {getattr(event, 'device_time_total', 0.0) / 1e3:>10.2f}"
            lines.append(row)
    sort_by = "self_cuda_time_total" if on_gpu else "self_cpu_time_total"
    top = averages.table(sort_by=sort_by, row_limit=12)
    return "\n".join(lines) + "\n" + top


def _free_name(path: Path) -> Path:
    """`path`, or a numbered sibling if an earlier run left one there (never overwritten)."""
    candidate, n = path, 1
    while candidate.exists():
        stem = path.name.split(".")[0]
        candidate = path.with_name(f"{stem}.{n}{path.name[len(stem) :]}")
        n += 1
    return candidate
