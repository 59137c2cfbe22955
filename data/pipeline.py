"""The host data pipeline of one rank: shards -> exchange -> balance -> pack -> prefetch -> device.

    pipeline = TrainPipeline(data_cfg, run_shape, rank, seed, device, comm)
    micro_batches = pipeline.next_step()   # list[PackedBatch] on the device, one optimizer step
    pipeline.observe_loss(step_loss)       # after the step: feeds a loss-driven curriculum
    pipeline.state_dict() / load_state_dict(state)
    pipeline.close()

What one step's preparation does, on the prefetch thread (data/prefetch.py), while the device
trains earlier steps:
1. Draw this rank's raw local batch of B = run_shape.geometry.local_batch_size samples with
   their origin (shard file, index) from the strategy's source (data/sources: a ShardStream,
   or for the stratified strategies a StratifiedStream whose batches hold fixed per-stratum
   counts) or, with a data.curriculum, from a BucketStream (data/sources/bucket_queues.py):
   all B from the length bucket the curriculum picks for the step (see "Curricula" below).
2. Exchange (strategies whose scope is wider than a rank): all-gather the raw batches over the
   group the strategy deals within, the node (run_shape.ranks_per_node) or the world; or, for
   the sparse transport (node_swap), all-gather only the sizes over the world
   (data/comm/sparse.py).
3. Balance: the strategy's dealer (data/order/strategies.py) computes the same assignment on
   every rank; keep row `rank`. Every sample of the global batch lands on exactly one rank.
   The sparse transport then moves only the samples that change rank, in one all-to-all-v.
4. Split the rank's B samples into the geometry's micro-batches (after balancing) and pack each
   (data/packing.py: the unpad metadata is computed here, on the host).
5. Start the device copy (pinned memory, side stream).
The main thread then takes the step with `next_step()`, which also writes the audit trail
(data/sample_record.py) when record_dir is set.

Curricula ([Zhang], docs/curriculum.md). Every rank holds the same curriculum and feeds it the
same numbers, so all ranks pick the same bucket for a step without a collective of their own:
the fixed orders are functions of (seed, step); loss_controlled and exp3s get, while the thread
prepares step s, the loss of step s - lag (lag = prefetch_depth + 1, data/order/loss_feedback.py)
averaged over all ranks by an all-gather on the host comm, on this thread (the training step
never waits for it; every rank computes the same mean from the same gathered list). The
trainer posts each step's loss with `observe_loss(loss)`, a device tensor: no host sync.

State (`state_dict`): the source position after the last step handed out; with a curriculum,
also the curriculum as it was right after drawing that step (with its draws awaiting losses)
and this rank's losses of the last `lag` steps, which the curriculum has not seen yet. Taken
after `observe_loss` of the last step; resuming from it prepares exactly the same batches.

`prepare_hooks`: callables run on the data thread with the step index before each step's
preparation (tests inject failures there: tests/faults.py).
"""

from __future__ import annotations

import os
from typing import Callable, NamedTuple, Sequence

import numpy as np
import torch

from data.comm import sparse
from data.comm.host import HostComm, allgather_batch
from data.config import DataConfig, JobShape
from data.order import strategies
from data.order.curricula import curriculum_from_config
from data.order.loss_feedback import LossFeedback
from data.order.shape import node_size
from data.packing import PackedBatch, Sample, pack_samples
from data.prefetch import DeviceTransfer, Prefetcher, Transferred
from data.sample_record import SampleRecorder
from data.sources import SOURCES
from data.sources.bucket_queues import BucketStream
from data.sources.rank_shards import RankShards
from data.sources.shards import list_shards


class PreparedStep(NamedTuple):
    step: int  # optimizer step index, from 0
    transferred: Transferred  # the micro-batches, copy to the device issued
    origin: np.ndarray  # (B, 2) int64: (shard file index, sample index) of the rank's samples
    state_after: dict  # source position (and curriculum) once this step's samples are drawn


class TrainPipeline:
    """Prepared optimizer steps for one rank (see module docstring)."""

    def __init__(
        self,
        data: DataConfig,
        shape: JobShape,
        rank: int,
        seed: int,
        device,
        comm: HostComm,
        record_dir: str | os.PathLike | None = None,
        pack: Callable[[Sequence[Sample]], PackedBatch] = pack_samples,
        prepare_hooks: Sequence[Callable[[int], None]] = (),
        vocab_size: int | None = None,
    ):
        """shape: the run shape (bert/train/run_shape.py), whose batch geometry and node size
        the pipeline reads, never derives; pack: packs one micro-batch (the trainer's asks
        for the length groups of grouped attention when the model's backend reads them,
        data/packing.py); vocab_size: the model's, which every token id and label of a shard
        must be below (checked as it is read)."""
        self.vocab_size = vocab_size
        self.geometry = shape.geometry
        self.rank, self.world_size = rank, self.geometry.world_size
        self.ranks_per_node = shape.ranks_per_node
        self.strategy = strategies.get(data.balance)
        self.strategy_name = data.balance
        self.depth = data.prefetch_depth
        self.pack = pack
        self.prepare_hooks = list(prepare_hooks)
        files = list_shards(data.train_dir)
        self.curriculum, self.feedback = None, None
        shards = RankShards(
            files,
            rank,
            self.world_size,
            seed,
            data.max_seq_length,
            data.max_predictions_per_seq,
            vocab_size,
        )
        if data.curriculum.enabled:
            self._open_curriculum(data, shards, seed, device)
        else:
            self.source = SOURCES[self.strategy.source](shards)
        self.comm = comm  # all ranks: the curriculum's losses are averaged over it
        self.group = self._exchange_group(comm)
        self.transfer = DeviceTransfer(device)
        self.recorder = (
            SampleRecorder(record_dir, rank, [f.name for f in files]) if record_dir else None
        )
        self._prefetcher: Prefetcher | None = None
        self._next_to_prepare = 0
        self._state = {**self._snapshot(), "step": 0}

    def _open_curriculum(self, data: DataConfig, shards: RankShards, seed: int, device) -> None:
        """Bucketed source, the curriculum over its buckets, and the loss feedback it needs."""
        # the division rule was checked with the config (Config.__post_init__)
        self.source = BucketStream(shards, data.curriculum.bucket_boundaries)
        self.curriculum = curriculum_from_config(data.curriculum, self.source.shares, seed)
        if self.curriculum.uses_losses:
            self.feedback = LossFeedback(device, lag=self.depth + 1)

    def _exchange_group(self, comm: HostComm) -> HostComm | None:
        """The ranks whose batches are pooled and dealt; None when nothing moves. The sparse
        transport exchanges over the world but deals by nodes: its node size is checked too."""
        if not self.strategy.exchanges:
            return None
        if self.strategy.scope == "world" and self.strategy.transport != "sparse":
            return comm
        try:
            node = node_size(self.world_size, self.ranks_per_node)
        except ValueError as err:
            raise ValueError(
                f"data.balance={self.strategy_name}: {err} (data.ranks_per_node)"
            ) from None
        if self.strategy.scope == "world" or node == self.world_size:
            return comm
        return comm.split(self.rank // node)  # collective: every rank splits here

    # -- main thread --------------------------------------------------------------------------

    def next_step(self) -> list[PackedBatch]:
        """The micro-batches of the next optimizer step, on the device (starts the thread)."""
        last = self._state["step"] - 1
        if self.feedback is not None and last >= 0 and not self.feedback.observed(last):
            raise RuntimeError(
                f"data.curriculum.name={self.curriculum.name} needs every step's "
                f"loss: call pipeline.observe_loss(loss) after step {last}"
            )
        if self._prefetcher is None:
            self._prefetcher = Prefetcher(
                self._prepare, self.depth, name=f"data-prefetch-rank{self.rank}"
            )
        prepared: PreparedStep = self._prefetcher.get()
        batches = self.transfer.finish(prepared.transferred)
        if self.recorder is not None:
            self.recorder.write(prepared.step, prepared.origin)
        self._state = {**prepared.state_after, "step": prepared.step + 1}
        return batches

    def observe_loss(self, loss: torch.Tensor, step: int | None = None) -> None:
        """The loss of the last step handed out (or `step`): a () tensor on the training
        device, this rank's. Only the loss-driven curricula use it; no host sync on CUDA."""
        if self.feedback is not None:
            self.feedback.observe(self._state["step"] - 1 if step is None else step, loss)

    def state_dict(self) -> dict:
        """Position after the last step handed out by next_step (prefetched steps excluded):
        resuming from it continues with the step that follows (module docstring: State)."""
        state = dict(self._state)
        if self.feedback is not None:  # on CUDA reading these syncs: checkpoint points only
            done = state["step"]
            state["losses"] = self.feedback.values(range(max(0, done - self.feedback.lag), done))
            state["loss_lag"] = self.feedback.lag
        return state

    def load_state_dict(self, state: dict) -> None:
        if self._prefetcher is not None:
            raise RuntimeError("TrainPipeline.load_state_dict must come before next_step()")
        self.source.load_state_dict(state["source"])
        if self.curriculum is not None:
            self._load_curriculum(state)
        self._next_to_prepare = int(state["step"])
        self._state = {**self._snapshot(), "step": self._next_to_prepare}

    def _load_curriculum(self, state: dict) -> None:
        if "curriculum" not in state:
            raise ValueError("data state holds no curriculum: it was saved without data.curriculum")
        self.curriculum.load_state_dict(state["curriculum"])
        if self.feedback is not None:
            if state.get("loss_lag") != self.feedback.lag:
                raise ValueError(
                    f"data state was saved with a loss lag of "
                    f"{state.get('loss_lag')} steps (data.prefetch_depth + 1), "
                    f"this run has {self.feedback.lag}: the buckets would differ"
                )
            self.feedback.preload(state["losses"])

    def _snapshot(self) -> dict:
        """The source position, and the curriculum's state, as they are now."""
        snap = {"source": self.source.state_dict()}
        if self.curriculum is not None:
            snap["curriculum"] = self.curriculum.state_dict()
        return snap

    def announce(self, mllog, progress) -> None:
        """Say which bucketing and curriculum the run uses: one MLPerf event, one progress
        line (bert/mlperf/writer.py, bert/train/progress.py). Nothing without a curriculum."""
        if self.curriculum is None:
            return
        mllog.data_curriculum(
            self.curriculum.name,
            {"bucket_boundaries": self.source.edges.tolist(), **self.curriculum.config()},
        )
        feedback = (
            f"; global loss of step t-{self.feedback.lag} fed back"
            if self.feedback is not None
            else ""
        )
        progress.line(
            f"data: {self.source.describe()}; curriculum {self.curriculum.describe()}{feedback}"
        )

    def close(self, finish: bool = True) -> None:
        """Stop the prefetch thread, then release shards and the record file.

        Collective when finish is True (all ranks close after the same step: their threads
        stop after the same exchange, see data/prefetch.py); finish=False on an error path.
        """
        if self.feedback is not None:
            self.feedback.close()  # a thread waiting for a loss that will not come gives up
        if self._prefetcher is not None:
            self._prefetcher.close(finish)
        self.source.close()
        if self.recorder is not None:
            self.recorder.close()

    def __enter__(self) -> "TrainPipeline":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(finish=exc_type is None)

    # -- prefetch thread ----------------------------------------------------------------------

    def _prepare(self) -> PreparedStep:
        step = self._next_to_prepare
        for hook in self.prepare_hooks:
            hook(step)
        samples, origin = self._draw(step)
        state_after = self._snapshot()
        if self.group is not None:
            samples, origin = self._exchange(samples, origin)
        packed = [self.pack(micro) for micro in self.geometry.micro_batches(samples)]
        self._next_to_prepare = step + 1
        return PreparedStep(step, self.transfer.start(packed), origin, state_after)

    def _draw(self, step: int):
        """This rank's raw local batch of `step` and its origin (B, 2)."""
        local_batch = self.geometry.local_batch_size
        if self.curriculum is None:
            return self.source.next_batch_tagged(local_batch)
        if self.feedback is not None and step >= self.feedback.lag:
            done = step - self.feedback.lag
            self.curriculum.update_step(done, self._mean_over_ranks(self.feedback.value(done)))
        bucket = self.curriculum.next_bucket(step)
        return self.source.next_batch_tagged(local_batch, bucket)

    def _mean_over_ranks(self, value: float) -> float:
        """The mean of every rank's `value`: the same bits on every rank (the same gathered
        list, summed in the same order), which keeps the curricula in step."""
        gathered = self.comm.allgather_array(
            np.array([value], dtype=np.float64), sizes=[1] * self.comm.size
        )
        return float(np.mean(np.concatenate(gathered)))

    def _exchange(self, samples, origin):
        """This rank's share of the group's pooled batch under the strategy."""
        if self.strategy.transport == "sparse":
            return sparse.exchange(
                self.group, samples, origin, self.ranks_per_node, rows_for=self.strategy.rows
            )
        pooled = allgather_batch(self.group, samples, origin)
        size = self.group.size
        rows = self.strategy.deal(pooled.lengths, size, size)[self.group.rank]
        return pooled.samples(rows), pooled.origin[rows]
