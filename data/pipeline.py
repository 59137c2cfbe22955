"""The host data pipeline of one rank: shards -> exchange -> balance -> pack -> prefetch -> device.

    pipeline = TrainPipeline(cfg, rank, world_size, seed, device, comm)
    micro_batches = pipeline.next_step()   # list[PackedBatch] on the device, one optimizer step
    pipeline.state_dict() / load_state_dict(state)
    pipeline.close()

What one step's preparation does, on the prefetch thread (data/prefetch.py), while the device
trains earlier steps:
1. Draw this rank's raw local batch of B = global_batch / world samples with their origin
   (shard file, index): from a ShardStream, or a StratifiedStream (data/strata.py) for the
   stratified strategies, whose batches hold fixed per-stratum counts.
2. Exchange (strategies that move samples): all-gather the raw batches over the group the
   strategy deals within: the world for global_presort/serpentine, the node for
   stratified_local_*; none and stratified move nothing.
3. Balance: data/balance.py computes the same assignment on every rank; keep row `rank`.
   Every sample of the global batch lands on exactly one rank.
4. Split the rank's B samples into gradient_accumulation_steps micro-batches (after balancing)
   and pack each (data/batching.py: the unpad metadata is computed here, on the host).
5. Start the device copy (pinned memory, side stream).
The main thread then takes the step with `next_step()`, which also writes the audit trail
(data/sample_record.py) when record_dir is set.

Test hook: BERT_TEST_CRASH_RANK=R makes rank R fail while preparing step BERT_TEST_CRASH_STEP
(default 2). tests/test_data_distributed.py uses it to check that a failing rank ends the job.
"""
from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np

from data.balance import NODE_LOCAL, STRATIFIED, balance
from data.batching import PackedBatch, pack_samples
from data.exchange import HostComm, allgather_batch
from data.prefetch import DeviceTransfer, Prefetcher, Transferred
from data.sample_record import SampleRecorder
from data.shards import ShardStream, list_shards
from data.strata import StratifiedStream

CRASH_RANK_VAR, CRASH_STEP_VAR = "BERT_TEST_CRASH_RANK", "BERT_TEST_CRASH_STEP"


class PreparedStep(NamedTuple):
    step: int  # optimizer step index, from 0
    transferred: Transferred  # the micro-batches, copy to the device issued
    origin: np.ndarray  # (B, 2) int64: (shard file index, sample index) of the rank's samples
    state_after: dict  # source position once this step's samples are drawn


class TrainPipeline:
    """Prepared optimizer steps for one rank (see module docstring)."""

    def __init__(self, cfg, rank: int, world_size: int, seed: int, device, comm: HostComm,
                 record_dir: str | os.PathLike | None = None, ranks_per_node: int = 0):
        d, run = cfg.data, cfg.run
        if run.global_batch_size % (world_size * run.gradient_accumulation_steps):
            raise ValueError(f"run.global_batch_size={run.global_batch_size} does not split "
                             f"into {world_size} ranks x {run.gradient_accumulation_steps} "
                             f"micro-batches")
        self.rank, self.world_size = rank, world_size
        self.strategy = d.balance
        self.local_batch = run.global_batch_size // world_size
        self.accum = run.gradient_accumulation_steps
        self.depth = d.prefetch_depth
        files = list_shards(os.path.expanduser(d.train_dir))
        source_cls = StratifiedStream if self.strategy in STRATIFIED else ShardStream
        self.source = source_cls(files, rank, world_size, seed, d.max_seq_length,
                                 d.max_predictions_per_seq)
        self.group = self._exchange_group(comm, ranks_per_node or d.ranks_per_node or world_size)
        self.transfer = DeviceTransfer(device)
        self.recorder = (SampleRecorder(record_dir, rank, [f.name for f in files])
                         if record_dir else None)
        self._crash_step = _crash_step(rank)
        self._prefetcher: Prefetcher | None = None
        self._next_to_prepare = 0
        self._state = {"source": self.source.state_dict(), "step": 0}

    def _exchange_group(self, comm: HostComm, ranks_per_node: int) -> HostComm | None:
        """The ranks whose batches are pooled and dealt; None when nothing moves."""
        if self.strategy in ("none", "stratified"):
            return None
        if self.strategy not in NODE_LOCAL:
            return comm
        node_size = min(ranks_per_node, self.world_size)
        if self.world_size % node_size:
            raise ValueError(f"data.balance={self.strategy}: world size {self.world_size} is "
                             f"not a whole number of {node_size}-rank nodes "
                             f"(data.ranks_per_node)")
        # collective: every rank splits at the same point
        return comm if node_size == self.world_size else comm.split(self.rank // node_size)

    # -- main thread --------------------------------------------------------------------------

    def next_step(self) -> list[PackedBatch]:
        """The micro-batches of the next optimizer step, on the device (starts the thread)."""
        if self._prefetcher is None:
            self._prefetcher = Prefetcher(self._prepare, self.depth,
                                          name=f"data-prefetch-rank{self.rank}")
        prepared: PreparedStep = self._prefetcher.get()
        batches = self.transfer.finish(prepared.transferred)
        if self.recorder is not None:
            self.recorder.write(prepared.step, prepared.origin)
        self._state = {"source": prepared.state_after, "step": prepared.step + 1}
        return batches

    def state_dict(self) -> dict:
        """Position after the last step handed out by next_step (prefetched steps excluded):
        resuming from it continues with the step that follows."""
        return {"source": self._state["source"], "step": self._state["step"]}

    def load_state_dict(self, state: dict) -> None:
        if self._prefetcher is not None:
            raise RuntimeError("TrainPipeline.load_state_dict must come before next_step()")
        self.source.load_state_dict(state["source"])
        self._next_to_prepare = int(state["step"])
        self._state = {"source": self.source.state_dict(), "step": self._next_to_prepare}

    def close(self, finish: bool = True) -> None:
        """Stop the prefetch thread, then release shards and the record file.

        Collective when finish is True (all ranks close after the same step: their threads
        stop after the same exchange, see data/prefetch.py); finish=False on an error path.
        """
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
        if step == self._crash_step:
            raise RuntimeError(f"{CRASH_RANK_VAR}={self.rank}: injected failure while preparing "
                               f"step {step} (test hook)")
        samples, origin = self.source.next_batch_tagged(self.local_batch)
        state_after = self.source.state_dict()
        if self.group is not None:
            samples, origin = self._exchange(samples, origin)
        micro = self.local_batch // self.accum
        packed = [pack_samples(samples[i * micro:(i + 1) * micro]) for i in range(self.accum)]
        self._next_to_prepare = step + 1
        return PreparedStep(step, self.transfer.start(packed), origin, state_after)

    def _exchange(self, samples, origin):
        """This rank's share of the group's pooled batch under the strategy."""
        pooled = allgather_batch(self.group, samples, origin)
        size = self.group.size
        rows = balance(self.strategy, pooled.lengths, size, size)[self.group.rank]
        return pooled.samples(rows), pooled.origin[rows]


def _crash_step(rank: int) -> int:
    """Step at which the test hook makes this rank fail; -1 when the hook is off."""
    if os.environ.get(CRASH_RANK_VAR, "") != str(rank):
        return -1
    return int(os.environ.get(CRASH_STEP_VAR, "2"))
