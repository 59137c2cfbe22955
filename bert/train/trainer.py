"""The training loop: MLPerf phases around train_step() and evaluate().

    Trainer(cfg) -> init phase: process group, model, optimizer, checkpoint   (init_start..stop)
    trainer.train() -> run phase: blocks of training between evals until the target or the
                       step budget                                           (run_start..stop)

No training or eval data is opened before run_start. Losses and accuracy sums stay on the device
and are read only at progress and eval points.

Resume (`checkpoint.resume`, bert/train/checkpoint/): the init phase restores model, optimizer,
schedule, loss scale and RNG; the run phase restores the data position and continues the block
and eval schedule of the interrupted run, so the weights come out as if it had never stopped. A
resumed run writes its own log (bert/mlperf/logfile.py: log_name): a recovery, not a timed MLPerf
result. `run.eval_only`: the init phase, then one eval of the initial weights
(mlperf_eval_only.log). Each log is written under a partial name and takes its final name only
at run_stop (bert/mlperf/logfile.py): a run that fails earlier never replaces an earlier log.

The batch geometry is built once, before the rendezvous (it needs only the launcher's world
size), and passed to the data pipeline. `callbacks` (`Callback`) see the opened pipeline and the
end of every optimizer step; nothing else reaches into the loop (tests inject faults that way).
What a run leaves beside its log (metrics.jsonl, run.json, TensorBoard events, profiler traces)
comes from one `Observer` (bert/obs/observer.py), itself such a callback, fed host values only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import weakref
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Sequence

import torch

from bert import gpu_status
from bert.config import Config
from bert.model import BertForPretraining, num_parameters
from bert.model.weights import load_into_model, read_checkpoint_file
from bert.obs.logs import setup_logging
from bert.obs.observer import Observer, file_suffix, published_files
from bert.core.ranges import named
from bert.obs.run_record import RunOrigin
from bert.optim.registry import build_optimizer
from bert.train.distributed import DistContext, all_reduce_sum, broadcast_int, init_distributed
from bert.train.graphs.build import build_graphs
from bert.train.launch_env import launch_layout
from bert.train.run_shape import RunShape
from bert.mlperf.logfile import LogFile, log_name
from bert.mlperf.writer import MLPerfLogger
from bert.train.progress import Progress
from bert.train.checkpoint import Checkpointer
from bert.train.preflight import preflight_data
from bert.train.peer_failure import explain
from bert.train.run_lock import hold_run_folders
from bert.train.step_guard import StepGuard
from bert.train.stop_signals import RunInterrupted, stop_reason
from bert.train.train_state import TrainState
from data.comm.host import make_host_comm
from data.packing import PackedBatch, pack_samples
from data.pipeline import TrainPipeline
from data.sample_record import check_record_dir
from data.sources.shards import read_eval_samples

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class TrainResult:
    status: str  # run_stop's: "success" or "aborted"; "eval_only"
    end: str  # how it ended: bert/train/exit_status.py RUN_ENDS (the exit status follows)
    steps: int
    samples: int
    eval_accuracy: float
    log_path: str
    train_seconds: float


class Callback:
    """Hooks into a training run (no-ops here; subclass what you need)."""

    def on_train_start(self, trainer: "Trainer") -> None:
        """The data is open (`trainer.pipeline`); no step has run."""

    def on_step_end(self, trainer: "Trainer", step: int) -> None:
        """Optimizer step `step` (1-based) is done."""


class Trainer:
    def __init__(
        self,
        cfg: Config,
        mlperf_log: str | None = None,
        callbacks: Sequence[Callback] = (),
        origin: RunOrigin | None = None,
        force: bool = False,
    ):
        """origin: how the config was given (file, --set, flags), for run.json; force: --force."""
        self.cfg = cfg
        setup_logging(launch_layout().rank, cfg.log.all_ranks)
        self.train_files = preflight_data(cfg)  # paths only: no data is read before run_start
        # Every check of the inputs comes before the first file is written (the output folder,
        # the MLPerf log): a bad input changes nothing of an earlier run in the same folder.
        # The batch split needs only the launcher's world size: checked before the rendezvous.
        layout = launch_layout()
        self.run_shape = RunShape.build(cfg, layout.world_size, layout.local_world_size)
        self.geometry = self.run_shape.geometry
        self.ctx: DistContext = init_distributed(cfg.run.device, cfg.dist.timeout_s)
        self.out_dir = Path(cfg.run.output_dir)
        self.progress = Progress(
            enabled=self.ctx.is_main or cfg.log.all_ranks,
            interval_s=cfg.log.interval_s,
            quiet=cfg.log.quiet,
        )
        # the resume point, resolved once and read whole before the log opens: a refused or
        # damaged resume writes nothing; a fresh run must not overwrite an earlier audit trail
        self.ckpt = Checkpointer(cfg, self.ctx, self.geometry.global_batch_size, self.progress.line)
        check_record_dir(cfg.log.record_samples_dir, self.ckpt.resuming)
        # read (not yet loaded into the model, which init builds): a file that is no checkpoint
        # fails here; not needed when resuming, whose state replaces it
        init = cfg.run.init_checkpoint if not self.ckpt.resuming else ""
        self._init_state = read_checkpoint_file(init) if init else None
        resumed = self.ckpt.resume_manifest.step if self.ckpt.resuming else None
        self.log_file = LogFile(mlperf_log or self.out_dir / log_name(cfg.run.eval_only, resumed))
        # one run per folder and --record-samples folder, till train ends; files it did not
        # write under the names it publishes are refused unless force (bert/train/own_files.py)
        published = published_files(self.out_dir, self.log_file.final)
        self.lock = hold_run_folders(self.ctx, cfg, published, force)
        weakref.finalize(self, self.lock.release)  # a Trainer dropped untrained (tests)
        try:
            self.log_path = str(self.log_file.final)
            # written under a per-attempt partial name until run_stop (bert/mlperf/logfile.py)
            self.mllog = MLPerfLogger(str(self.log_file.partial), self.ctx.rank)
            # metrics.jsonl, run.json, TensorBoard, the profiler window (bert/obs/observer.py)
            self.obs = Observer(
                cfg, self.ctx, self.out_dir, file_suffix(self.log_file.final), origin
            )
            if self.ctx.is_main:
                self.progress.on_point = self.obs.train_point
            self.callbacks = [self.obs, *callbacks]
            self.guard = StepGuard(
                self.ctx,
                cfg.run.max_nonfinite_steps,  # signals, NaN
                cfg.dist.timeout_s,
                check_grad_norm=cfg.run.precision != "fp16",
            )
            self._ended_by_itself = False  # run_stop logged by the loop itself
            self._init_phase()
        except BaseException:
            self.lock.release()
            raise

    # -- init phase (timed as MLPerf init: no data may be read here) -------------------------

    def _init_phase(self) -> None:
        cfg, log = self.cfg, self.mllog
        sub = cfg.submission
        log.cache_clear(cfg.run.cache_cleared)
        log.init_start()
        log.submission_info(sub.org, sub.platform, sub.division, sub.status)
        self.seed = self.ckpt.run_seed(self._run_seed)  # a resumed run keeps its checkpoint's
        log.hyperparameters(cfg, self.run_shape, None, cfg.eval.samples, self.seed)
        self._log_run_facts()
        if cfg.run.threads and self.ctx.device.type == "cpu":
            torch.set_num_threads(cfg.run.threads)
        torch.manual_seed(self.seed)
        self.raw_model = self._build_model()
        # the host builds per-backend metadata only for the backend that reads it
        self.pack = partial(pack_samples, **self.raw_model.pack_options())
        self.optim = build_optimizer(
            self.raw_model, cfg.optim, cfg.schedule, cfg.run.precision == "fp16", self.ctx
        )
        self.model = self.optim.model  # DDP-wrapped for the replicated optimizer
        # run.cuda_graphs: a GraphCache (bert/train/graphs/), forward and backward replayed
        self.graphs = build_graphs(self) if cfg.run.cuda_graphs else None
        # what a checkpoint keeps of the run (bert/train/train_state.py), restored if resuming
        self.state = TrainState(self.raw_model, self.optim, self.ctx.device)
        self.ckpt.restore(self.state)
        self.start_point = dict(self.state.progress)
        self.progress.line(
            f"model: {num_parameters(self.model) / 1e6:.1f}M parameters, device "
            f"{self.ctx.device}, {self.ctx.world_size} rank(s), global batch "
            f"{self.geometry.global_batch_size} = {self.ctx.world_size} x "
            f"{self.geometry.micro_batch_size} x {self.geometry.gradient_accumulation_steps} "
            f"accum, precision {cfg.run.precision}, seed {self.seed}"
        )
        self.obs.init_done(self.optim)  # the device's rate (MFU), run.json
        log.init_stop()

    def _log_run_facts(self) -> None:
        """What the log must say besides the hyperparameters: where the run ran, and for a
        resumed run where it resumed from (so it is never taken for a whole timed run)."""
        ctx = self.ctx
        on_gpu = ctx.device.type == "cuda"
        self.mllog.topology(
            nodes=max(1, ctx.world_size // max(1, ctx.local_world_size)),
            accelerators_per_node=ctx.local_world_size if on_gpu else 0,
            accelerator_model=torch.cuda.get_device_name(ctx.device) if on_gpu else "N/A",
        )
        if self.ckpt.resuming:
            manifest = self.ckpt.resume_manifest
            self.mllog.resumed_from(manifest.step, manifest.samples)
        unvalidated = gpu_status.warning(self.cfg) if on_gpu else None
        if unvalidated:
            self.progress.result(unvalidated)

    def _run_seed(self) -> int:
        seed = self.cfg.run.seed
        if seed < 0:
            seed = int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF
        return broadcast_int(seed, self.ctx)  # every rank must shuffle the data alike

    def _save_checkpoint(self, step: int, samples: int, accuracy: float) -> None:
        self.state.progress = {"step": step, "samples": samples, "accuracy": accuracy}
        self.ckpt.save(self.state)

    def _interrupt(
        self, signum: int, step: int, samples: int, accuracy: float, block_samples: int
    ) -> None:
        """Stop at this step boundary for a signal: the open block closed with what it
        trained, and a checkpoint if they are on (run_stop comes with the log's end)."""
        first = samples - block_samples
        self.mllog.block_stop(samples, first_epoch_num=first, epoch_count=block_samples)
        self.mllog.train_samples(samples)
        saved = ""
        if self.ckpt.final_due(step):
            self._save_checkpoint(step, samples, accuracy)
            saved = "; checkpoint saved"
        elif self.ckpt.saves_final:
            saved = "; checkpoint of this step already saved"
        self.progress.result(
            f"interrupted by {signal.Signals(signum).name} after step {step}{saved}"
        )
        raise RunInterrupted(signum, step)

    def _build_model(self) -> torch.nn.Module:
        # on CUDA a fused kernel the config asks for must be built: fail here, not at step 1
        model = BertForPretraining(self.cfg.model, device=self.ctx.device)
        if self._init_state is not None:
            load_into_model(model, self._init_state, source=self.cfg.run.init_checkpoint)
            self._init_state = None  # a BERT-Large copy on the host is not kept for the run
        return model.to(self.ctx.device)

    # -- run phase ---------------------------------------------------------------------------

    def train(self) -> TrainResult:
        """The timed run. Stopped from outside (a signal, an error), it still closes its log
        (run_stop aborted, with the reason), kept under its own name (bert/mlperf/logfile.py)."""
        try:
            result = self._train()
        except BaseException as err:
            failure = explain(err, self.ctx, self.guard.step_in_progress, self.cfg.dist.timeout_s)
            self._close_data(finish=False)  # peers may be gone: no lockstep shutdown
            self._end_log(failure or err)
            if failure is not None:
                raise failure from None
            raise
        finally:
            self.lock.release()
        self._close_data(finish=True)
        return result

    def _end_log(self, err: BaseException) -> None:
        """The log of a run that failed or was interrupted: kept aborted under its own name,
        unless the run had ended by itself before (then the error came after its result)."""
        if self._ended_by_itself:
            return  # published at its run_stop
        self.obs.close(publish=False)  # metrics and run record keep their partial names too
        if self.mllog.run_started and not self.mllog.run_stopped:
            self.mllog.run_stop("aborted", stop_reason=stop_reason(err))
        if self.ctx.is_main and self.mllog.run_stopped:
            self.mllog.close()
            kept = self.log_file.keep_aborted(
                "interrupted" if isinstance(err, RunInterrupted) else "failed"
            )
            self.progress.result(
                f"this run's MLPerf log: {kept} ({self.log_file.final.name} not replaced)"
            )

    def _publish_log(self) -> None:
        """A run that ended by itself: its log takes its final name, keeping an earlier log
        found there; the metrics and the run record go with it."""
        self.obs.close(publish=self.ctx.is_main)
        if not self.ctx.is_main:
            return
        self.mllog.close()
        kept = self.log_file.publish()
        if kept is not None:
            self.progress.result(f"an earlier {self.log_file.final.name} there is kept as {kept}")

    def _train(self) -> TrainResult:
        cfg, log = self.cfg, self.mllog
        if cfg.run.eval_only:
            return self._evaluate_only()
        log.run_start()
        started = time.time()
        pipeline, eval_set = self._open_data()
        pipeline.announce(log, self.progress)  # bucketing and curriculum, when used
        gbs, run_shape = self.geometry.global_batch_size, self.run_shape
        steps_per_block = run_shape.steps_per_eval_block  # whole global batches (REFERENCE 1)
        step, samples = self.start_point["step"], self.start_point["samples"]
        accuracy, status = self.start_point["accuracy"], "aborted"
        for callback in self.callbacks:
            callback.on_train_start(self)
        max_steps = run_shape.max_steps
        self.progress.start(max_steps * gbs, samples, max_steps, run_shape.last_step_name)
        self.guard.start(step)
        while step < max_steps:
            # A resumed run finishes the interrupted block: evals stay where they were.
            block_steps = min(steps_per_block - step % steps_per_block, max_steps - step)
            log.block_start(samples, first_epoch_num=samples, epoch_count=block_steps * gbs)
            for block_step in range(1, block_steps + 1):
                step_loss = self.train_step(pipeline)
                step += 1  # a skipped fp16 step counts too: its samples were consumed
                samples += gbs
                self.progress.step(step, samples, step_loss, self.optim.lr)
                if block_step < block_steps and self.ckpt.due(step):
                    self._save_checkpoint(step, samples, accuracy)
                for callback in self.callbacks:
                    callback.on_step_end(self, step)
                signum = self.guard.after_step(
                    step,
                    step_loss,  # agreed by every rank
                    self.optim.grad_norm_tensor(),
                )
                if signum:
                    self._interrupt(signum, step, samples, accuracy, block_step * gbs)
            log.block_stop(
                samples, first_epoch_num=samples - block_steps * gbs, epoch_count=block_steps * gbs
            )
            accuracy = self._eval_point(eval_set, samples, step)
            if accuracy >= cfg.eval.target_mlm_accuracy:
                status = "success"
                break
            if self.ckpt.due(step):
                self._save_checkpoint(step, samples, accuracy)
        self.guard.finish()
        log.train_samples(samples)
        log.run_stop(status)
        self._ended_by_itself = True
        seconds = time.time() - started
        end = self.run_shape.end(status)
        self.obs.ended(status, end, step, samples, accuracy, seconds, self.log_file.final.name)
        self._publish_log()
        if self.ckpt.final_due(step):
            self._save_checkpoint(step, samples, accuracy)  # the final state, after run_stop
        self.progress.result(
            f"run_stop {status}: eval MLM accuracy {accuracy:.4f} after "
            f"{samples} samples ({step} steps) in {seconds:.1f} s"
        )
        return TrainResult(status, end, step, samples, accuracy, self.log_path, seconds)

    def _open_data(self):
        """Training pipeline and this rank's share of the eval set (first data access).

        Collective when distributed: the host comm and its node groups are created here.
        """
        ctx = self.ctx
        self.pipeline = TrainPipeline(
            self.cfg.data,
            self.run_shape,
            ctx.rank,
            self.seed,
            ctx.device,
            make_host_comm(ctx.world_size, self.cfg.dist.timeout_s),
            record_dir=self.cfg.log.record_samples_dir or None,
            pack=self.obs.wrap_pack(self.pack),
            vocab_size=self.cfg.model.vocab_size,
        )
        with self.ckpt.fit():  # a resumed run's data position, restored into the pipeline
            self.state.attach_pipeline(self.pipeline)
        return self.pipeline, self._read_eval_set()

    def _read_eval_set(self):
        """This rank's share of the eval set."""
        d, ctx = self.cfg.data, self.ctx
        return read_eval_samples(
            d.eval_file,
            ctx.rank,
            ctx.world_size,
            self.cfg.eval.samples,
            d.max_seq_length,
            d.max_predictions_per_seq,
            vocab_size=self.cfg.model.vocab_size,
        )

    def _evaluate_only(self) -> TrainResult:
        """One eval of the initial weights (no training data is opened)."""
        log = self.mllog
        log.run_start()
        started = time.time()
        accuracy = self._eval_point(self._read_eval_set(), samples=0)
        status = "success" if accuracy >= self.cfg.eval.target_mlm_accuracy else "aborted"
        log.train_samples(0)
        log.run_stop(status)
        self._ended_by_itself = True
        seconds = time.time() - started
        self.obs.ended("eval_only", "eval_only", 0, 0, accuracy, seconds, self.log_file.final.name)
        self._publish_log()
        source = self.cfg.run.init_checkpoint or "randomly initialized weights"
        self.progress.result(
            f"eval-only: MLM accuracy {accuracy:.5f} of {source} over "
            f"{self.cfg.eval.samples or 'all'} eval samples"
        )
        return TrainResult("eval_only", "eval_only", 0, 0, accuracy, self.log_path, seconds)

    def _close_data(self, finish: bool = True) -> None:
        """Stop the data thread (before MPI or the process group shut down)."""
        pipeline, self.pipeline = getattr(self, "pipeline", None), None
        if pipeline is not None:
            pipeline.close(finish)

    def train_step(self, pipeline: TrainPipeline) -> torch.Tensor:
        """One optimizer step over the micro-batches the pipeline hands out (the geometry's
        `gradient_accumulation_steps`), each padded and replayed as a graph if one fits.

        Returns the step's loss (MLM + NSP, averaged over micro-batches) as a device tensor.
        """
        with named("data_wait"):
            waited = time.perf_counter()  # host clock only: what the step waited for its data
            micro_batches = pipeline.next_step()
            self.obs.data_ready(time.perf_counter() - waited, micro_batches)
        accum = len(micro_batches)
        step_loss = torch.zeros((), device=self.ctx.device)
        self.model.train()
        # micro-batches packed and already on the device: prepared ahead by the data thread
        for micro, batch in enumerate(micro_batches):
            # Gradients are reduced across ranks only on the last micro-batch.
            last = micro == accum - 1
            with contextlib.nullcontext() if last else self.optim.no_sync():
                loss = None if self.graphs is None else self.graphs.run(batch)  # replayed
                if loss is None:  # no graph fits the batch, or run.cuda_graphs is off
                    loss = self.forward_backward(batch, accum)
            step_loss += loss
        with named("optimizer"):
            self.optim.step()
        pipeline.observe_loss(step_loss)  # loss-driven curricula; a queued copy, no host sync
        return step_loss

    def forward_backward(self, batch: PackedBatch, accum: int) -> torch.Tensor:
        """Forward and backward of a micro-batch (what a graph captures): its loss / accum."""
        with named("forward"):
            loss = self.forward_loss(batch) / accum
        with named("backward"):
            self.optim.backward(loss)
        return loss.detach()

    def forward_loss(self, batch: PackedBatch) -> torch.Tensor:
        with self._autocast():
            mlm_logits, nsp_logits = self.model(batch)
        mlm, nsp = self.raw_model.loss(mlm_logits, nsp_logits, batch)
        return mlm + nsp

    def _autocast(self):
        dtype = AUTOCAST_DTYPES.get(self.cfg.run.precision)
        if dtype is None:
            return contextlib.nullcontext()
        cache = self.graphs is None  # a graph would keep reading a cached cast of old weights
        return torch.autocast(self.ctx.device.type, dtype=dtype, cache_enabled=cache)

    def _eval_point(self, eval_set, samples: int, step: int = 0) -> float:
        self.progress.point(step, samples, self.optim.lr)  # the block's last metrics (host read)
        stats = self.obs.block_stats(samples)
        if stats is not None:
            self.mllog.tracked_stats(step, samples, stats)
        self.mllog.eval_start(samples)
        started = time.perf_counter()
        with named("eval"):
            accuracy = self.evaluate(eval_set)
        self.mllog.eval_stop(samples)
        self.mllog.eval_accuracy(accuracy, samples)
        self.obs.eval_point(step, samples, accuracy, time.perf_counter() - started)
        self.progress.restart_interval(samples)  # eval time is not training time
        target = self.cfg.eval.target_mlm_accuracy
        self.progress.line(
            f"eval at {samples} samples: MLM accuracy {accuracy:.4f} (target {target})"
        )
        return accuracy

    @torch.no_grad()
    def evaluate(self, eval_set) -> float:
        """Token-weighted MLM accuracy over the whole eval set (all ranks' shares)."""
        self.model.eval()
        model = self.raw_model  # no gradient sync needed for eval
        counts = torch.zeros(2, dtype=torch.int64, device=self.ctx.device)
        size = self.cfg.eval.batch_size
        for start in range(0, len(eval_set), size):
            batch = self.pack(eval_set[start : start + size]).to(self.ctx.device)
            with self._autocast():
                mlm_logits, _ = model(batch)
            counts[0] += model.count_correct(mlm_logits, batch)
            counts[1] += batch.num_masked
        all_reduce_sum(counts, self.ctx)
        correct, total = counts.tolist()  # the eval point's one host read
        return correct / max(total, 1)
