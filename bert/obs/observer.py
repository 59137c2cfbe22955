"""The one object the trainer calls into to make a run observable (bert/obs/__init__.py).

    obs = Observer(cfg, ctx, out_dir, suffix, origin)   # files named after the MLPerf log
    obs.init_done()                     # init phase: the device's rate; run.json (partial)
    pipeline = TrainPipeline(..., pack=obs.wrap_pack(pack))
    obs.on_train_start(trainer)         # a Callback: the run phase's clocks, profiler window
    obs.data_ready(wait_s, batches)     # each step: host facts (tokens, FLOPs, data wait)
    obs.on_step_end(trainer, step)      # a Callback: the profiler window's step
    obs.train_point(step, samples, loss, lr, seconds)   # from Progress, at its points
    obs.block_stats(samples), obs.eval_point(...)   # at eval points
    obs.ended(...); obs.close(publish)  # the files take their final names with the log

Rank 0 writes the metrics and the run record; every rank profiles its own steps.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Sequence


from bert.config import Config
from bert.core.files import write_text_atomic
from bert.core import ranges
from bert.model.flops import batch_flops
from bert.obs.mfu import SquareSums, device_peak
from bert.obs.metrics import MetricsRecorder, read_optimizer
from bert.obs.profiler import ProfilerWindow
from bert.obs.run_record import RunOrigin, build_record
from bert.obs.sinks import JsonLines, TensorBoard
from bert.train.exit_status import run_end_status
from bert.mlperf.logfile import LogFile

MEMORY_NOTE = {"cuda": "torch.cuda.max_memory_allocated", "cpu": "process peak RSS"}


def file_suffix(mlperf_log: Path) -> str:
    """What the run's other files carry after their stem: mlperf.log -> "",
    mlperf_resumed_step_4.log -> "_resumed_step_4", other.log -> "_other"."""
    stem = Path(mlperf_log).stem
    return stem.removeprefix("mlperf") if stem.startswith("mlperf") else f"_{stem}"


def published_files(out_dir: Path, mlperf_log: Path) -> list[Path]:
    """The files a run that ends by itself publishes (each renaming an earlier one aside):
    its MLPerf log, and the metrics and run record that take their names from it."""
    suffix = file_suffix(mlperf_log)
    return [Path(mlperf_log), out_dir / f"metrics{suffix}.jsonl", out_dir / f"run{suffix}.json"]


class Observer:
    def __init__(
        self, cfg: Config, ctx, out_dir: Path, suffix: str, origin: RunOrigin | None
    ) -> None:
        """suffix: the MLPerf log's name after "mlperf" ("" for mlperf.log, "_eval_only", ...);
        the run's files carry it too: metrics<suffix>.jsonl, run<suffix>.json."""
        self.cfg, self.ctx, self.out_dir, self.origin = cfg, ctx, out_dir, origin
        self.squares = SquareSums()
        self.sinks: list = []
        self.record_file: LogFile | None = None
        self.record: dict | None = None
        if ctx.is_main:
            self.sinks.append(JsonLines(out_dir / f"metrics{suffix}.jsonl"))
            if cfg.log.tensorboard:
                self.sinks.append(TensorBoard(out_dir / "tensorboard"))
            self.record_file = LogFile(out_dir / f"run{suffix}.json")
        self.recorder: MetricsRecorder | None = None
        self.window: ProfilerWindow | None = None
        self.optim = None
        self.graphs = None  # the trainer's GraphCache (run.cuda_graphs): its counts
        self._block = (time.perf_counter(), 0)  # (clock, samples) at the block's start
        ranges.set_nvtx(cfg.profile.nvtx)

    # -- init ---------------------------------------------------------------------------------

    def init_done(self, optim) -> None:
        """The device's rate (for MFU) and the run record, written under its partial name."""
        self.optim = optim
        peak, source = device_peak(self.ctx.device, self.cfg.run.precision)
        self.recorder = MetricsRecorder(self._write, self.ctx.device, peak)
        if self.record_file is None:
            return
        metrics = {
            "peak_flops": peak,
            "peak_source": source,
            "flops": "bert/model/flops.py (useful FLOPs; padding not credited)",
            "peak_memory": MEMORY_NOTE[self.ctx.device.type],
            "loss": "rank 0's mean over the interval's steps",
        }
        files = {"metrics": Path(self.sinks[0].file.final).name, "mlperf_log": None}
        self.record = build_record(
            self.cfg, self.origin, self.ctx.device, self.ctx.world_size, metrics, files
        )
        self._write_record(self.record_file.partial)

    def wrap_pack(self, pack):
        return self.squares.wrap(pack)

    # -- run phase ----------------------------------------------------------------------------

    def on_train_start(self, trainer) -> None:
        start = trainer.start_point
        self.graphs = trainer.graphs
        self.recorder.restart_clock(start["samples"])
        self._block = (time.perf_counter(), start["samples"])
        profile = self.cfg.profile
        if profile.steps > 0:
            folder = Path(profile.dir or self.out_dir / "profile")
            self.window = ProfilerWindow(
                profile, folder, self.ctx.rank, self.ctx.device, start["step"] + 1
            )
            self.window.step_begin(start["step"] + 1)

    def data_ready(self, wait_s: float, batches: Sequence) -> None:
        """One step's host facts: its batches' shapes, the seconds it waited for them."""
        squares = self.squares.take(batches)
        tokens = sum(b.num_tokens for b in batches)
        flops = (
            None
            if squares is None
            else batch_flops(
                self.cfg.model,
                tokens,
                squares,
                sum(b.num_masked for b in batches),
                sum(b.num_sequences for b in batches),
            )
        )
        self.recorder.step_done(tokens, flops, wait_s)

    def on_step_end(self, trainer, step: int) -> None:
        if self.window is not None:
            self.window.step_end(step)
            self.window.step_begin(step + 1)

    def train_point(self, step: int, samples: int, loss: float, lr: float, seconds: float) -> None:
        """A progress point (rank 0): the optimizer's host reads, then the record over the
        interval's `seconds` of training, measured by Progress (its console rate is the
        record's samples_per_s)."""
        host = read_optimizer(self.optim)
        if self.graphs is not None:
            host.update(self.graphs.metrics())  # host counts: no device read
        self.recorder.train_point(step, samples, loss, lr, host, seconds)

    def block_stats(self, samples: int) -> dict | None:
        """Throughput of the block just trained, and the latest loss and lr (tracked_stats)."""
        last = self.recorder.last_record if self.recorder else None
        clock, start_samples = self._block
        if last is None or samples <= start_samples:
            return None
        seconds = max(self.recorder.last_point - clock, 1e-9)
        return {
            "throughput": (samples - start_samples) / seconds,
            "loss": last["loss"],
            "lr": last["lr"],
        }

    def eval_point(self, step: int, samples: int, accuracy: float, seconds: float) -> None:
        self.recorder.eval_point(step, samples, accuracy, seconds)
        self.recorder.restart_clock(samples)  # eval time is not training time
        self._block = (time.perf_counter(), samples)

    def ended(
        self,
        status: str,
        end: str,
        steps: int,
        samples: int,
        accuracy: float,
        seconds: float,
        log_name: str,
    ) -> None:
        """status: run_stop's (success, aborted); end: how the run ended and so its exit status
        (bert/train/exit_status.py RUN_ENDS)."""
        if self.record is not None:
            self.record["files"]["mlperf_log"] = log_name
            self.record["result"] = {
                "status": status,
                "end": end,
                "exit_status": run_end_status(end),
                "steps": steps,
                "samples": samples,
                "eval_mlm_accuracy": accuracy,
                "run_seconds": seconds,
            }

    def close(self, publish: bool) -> None:
        """Stop the profiler; close the sinks; with `publish` (the MLPerf log was published),
        metrics and run record take their final names too."""
        if self.window is not None:
            self.window.close()
        for sink in self.sinks:
            sink.close(publish)
        self.sinks = []
        if self.record is not None and self.record_file is not None:
            self._write_record(self.record_file.partial)
            if publish:
                self.record_file.publish()
            self.record_file = None

    def _write(self, record: dict) -> None:
        for sink in self.sinks:
            sink.write(record)

    def _write_record(self, path: Path) -> None:
        write_text_atomic(path, json.dumps(self.record, indent=1, default=str) + "\n")
