"""Many input files -> N output shards with a seeded global shuffle, in bounded memory.

Assignment (exactly balanced, globally mixed): the inputs, in the order given, hold global slots
0 .. T-1, input i the slots off_i .. off_i + n_i - 1. Input i's samples are permuted by a
generator seeded (seed, 0, i), and the p-th of them goes to output shard (off_i + p) mod N. So
every output holds floor(T/N) or ceil(T/N) samples, drawn at random from every input in
proportion to its size, and no two outputs can be alike (the trap in REFERENCE 2). Each output's
samples are then permuted by a generator seeded (seed, 1, j).

Two passes keep memory bounded (neither holds the data set):
1. split: each input (one per worker) is read once; its samples are written to one piece per
   bucket of `shards_per_bucket` consecutive outputs (TMP/bucket_B/input_I.hdf5, plus the
   target shard of each sample in a .npy file beside it), then a done-marker.
2. assemble: each bucket (one per worker) reads its pieces, groups them by target shard,
   permutes and writes the outputs.
Peak memory of a worker: one input file in pass 1, one bucket (about T * shards_per_bucket / N
samples) in pass 2. The result does not depend on the bucket size or the worker count. A rerun
resumes: pass 1 skips inputs with a done-marker, pass 2 skips outputs that exist; the plan is
stored so that a rerun with other inputs or parameters is refused instead of mixing the two.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from bert.core.files import atomic_path, remove_stale_temps, write_text_atomic
from bert.core.readers import read_json
from data.prepare.disk import check_disk, content_bytes
from data.prepare.fixed import count_samples, load_samples
from data.prepare.parallel import StepRun
from data.prepare.progress import Progress
from data.sources.shards import SHARD_GLOB, DataError, read_samples, write_samples
from data.synthetic import shard_name

PLAN_NAME = "reshard.json"
TMP_NAME = ".reshard_tmp"


@dataclass(frozen=True)
class ReshardPlan:
    inputs: tuple[str, ...]
    counts: tuple[int, ...]
    num_shards: int
    seed: int
    shards_per_bucket: int
    max_seq_length: int
    max_predictions: int
    out_dir: str

    @property
    def num_buckets(self) -> int:
        return -(-self.num_shards // self.shards_per_bucket)

    def shards_of(self, bucket: int) -> range:
        start = bucket * self.shards_per_bucket
        return range(start, min(start + self.shards_per_bucket, self.num_shards))

    def output(self, shard: int) -> Path:
        return Path(self.out_dir) / shard_name(shard, self.num_shards)

    def piece(self, bucket: int, index: int) -> Path:
        return Path(self.out_dir) / TMP_NAME / f"bucket_{bucket:05d}" / f"input_{index:05d}.hdf5"

    def done_marker(self, index: int) -> Path:
        return Path(self.out_dir) / TMP_NAME / f"input_{index:05d}.done"

    def targets(self, index: int) -> np.ndarray:
        """(n_i,) int64: the output shard of each sample of input `index`, by sample number."""
        n = self.counts[index]
        offset = sum(self.counts[:index])
        order = np.random.default_rng([self.seed, 0, index]).permutation(n)
        targets = np.empty(n, dtype=np.int64)
        targets[order] = (offset + np.arange(n)) % self.num_shards
        return targets


def make_plan(
    inputs: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    num_shards: int,
    seed: int,
    shards_per_bucket: int,
    max_seq_length: int,
    max_predictions: int,
) -> ReshardPlan:
    if num_shards < 1 or shards_per_bucket < 1:
        raise ValueError("num_shards and shards_per_bucket must be >= 1")
    paths = [str(Path(p).resolve()) for p in inputs]
    if not paths:
        raise DataError("reshard: no input files")
    counts = tuple(count_samples(p) for p in paths)
    if sum(counts) < num_shards:
        raise DataError(f"reshard: {sum(counts)} samples cannot fill {num_shards} shards")
    return ReshardPlan(
        tuple(paths),
        counts,
        num_shards,
        seed,
        min(shards_per_bucket, num_shards),
        max_seq_length,
        max_predictions,
        str(Path(out_dir).resolve()),
    )


# --------------------------------------------------------------------------------------------
# The two passes
# --------------------------------------------------------------------------------------------


def split_input(task: tuple[ReshardPlan, int]) -> int:
    """Pass 1 for one input: its pieces, then its done-marker. Returns the samples read."""
    plan, index = task
    samples = load_samples(plan.inputs[index], plan.max_seq_length, plan.max_predictions)
    if len(samples) != plan.counts[index]:
        raise DataError(
            f"{plan.inputs[index]}: holds {len(samples)} samples, the plan counted "
            f"{plan.counts[index]} (file changed during the run?)"
        )
    targets = plan.targets(index)
    buckets = targets // plan.shards_per_bucket
    for bucket in np.unique(buckets).tolist():
        chosen = np.flatnonzero(buckets == bucket)
        piece = plan.piece(bucket, index)
        with atomic_path(piece.with_suffix(".npy")) as tmp, open(tmp, "wb") as fh:
            np.save(fh, targets[chosen])
        write_samples(piece, [samples[k] for k in chosen.tolist()])
    write_text_atomic(plan.done_marker(index), "done\n")
    return len(samples)


def assemble_bucket(task: tuple[ReshardPlan, int]) -> tuple[list[Path], int]:
    """Pass 2 for one bucket: its missing outputs, each permuted. Returns the paths written
    and their samples."""
    plan, bucket = task
    todo = [j for j in plan.shards_of(bucket) if not plan.output(j).exists()]
    if not todo:
        return [], 0
    samples, targets = [], []
    for index in range(len(plan.inputs)):
        piece = plan.piece(bucket, index)
        if piece.exists():
            samples += read_samples(piece, plan.max_seq_length, plan.max_predictions)
            targets.append(np.load(piece.with_suffix(".npy")))
    target = np.concatenate(targets)
    written, count = [], 0
    for shard in todo:
        members = np.flatnonzero(target == shard)
        order = np.random.default_rng([plan.seed, 1, shard]).permutation(members)
        written.append(write_samples(plan.output(shard), [samples[k] for k in order.tolist()]))
        count += len(members)
    return written, count


def reshard(
    inputs: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    num_shards: int,
    seed: int = 12345,
    shards_per_bucket: int = 32,
    max_seq_length: int = 512,
    max_predictions: int = 76,
    run: StepRun = StepRun(),
) -> list[Path]:
    """Write `num_shards` part_XXXXX_of_NNNNN.hdf5 shards of `inputs` (either format)."""
    plan = make_plan(
        inputs, out_dir, num_shards, seed, shards_per_bucket, max_seq_length, max_predictions
    )
    out = Path(plan.out_dir)
    outputs = [plan.output(j) for j in range(num_shards)]
    if _finished(plan):
        shutil.rmtree(out / TMP_NAME, ignore_errors=True)  # killed while cleaning up
        run.log(f"reshard: {out} already holds these {num_shards} shards")
        return outputs
    pending = [i for i in range(len(plan.inputs)) if not plan.done_marker(i).exists()]
    missing = [j for j in range(num_shards) if not outputs[j].exists()]
    _check_space(plan, pending, len(missing), run.show_progress)
    _claim(plan, outputs)
    for folder in [out, *(out / TMP_NAME).glob("bucket_*")]:
        remove_stale_temps(folder)
    split = Progress(
        "reshard split", len(pending), sum(plan.counts[i] for i in pending), run.show_progress
    )
    run.map(split_input, [(plan, i) for i in pending], lambda count: split.done(count, count))
    run.log(f"reshard: split {len(pending)} inputs into {plan.num_buckets} buckets")
    buckets = sorted({j // plan.shards_per_bucket for j in missing})
    assemble = Progress("reshard assemble", len(missing), len(missing), run.show_progress)

    def finished(result: tuple[list[Path], int]) -> None:
        paths, count = result
        run.log(
            f"reshard: wrote {len(paths)} shards" + (f" ({paths[0].name} ...)" if paths else "")
        )
        assemble.done(count, len(paths), files=len(paths))

    run.map(assemble_bucket, [(plan, b) for b in buckets], finished)
    write_text_atomic(out / PLAN_NAME, json.dumps(asdict(plan), indent=1))
    shutil.rmtree(out / TMP_NAME, ignore_errors=True)
    return outputs


def _check_space(plan: ReshardPlan, pending: list[int], missing: int, show: bool) -> None:
    """Pass 1 writes each pending input's samples again as pieces (plus an int64 target per
    sample); pass 2 writes the missing shards, each 1/N of the whole."""
    content = [content_bytes(p) for p in plan.inputs]
    pieces = sum(content[i] + 8 * plan.counts[i] for i in pending)
    shards = sum(content) * missing // plan.num_shards
    check_disk(
        "reshard",
        pieces + shards,
        plan.out_dir,
        f"{len(pending)} inputs split into pieces and {missing} shards written, "
        f"each the variable-length size of its samples",
        show,
    )


def _finished(plan: ReshardPlan) -> bool:
    record = Path(plan.out_dir) / PLAN_NAME
    if not record.exists():
        return False
    stored = read_json(record, "reshard plan", DataError, expect=object)  # regular, capped
    if stored != json.loads(json.dumps(asdict(plan))):
        raise DataError(
            f"{record}: {plan.out_dir} was resharded from other inputs or "
            f"parameters; use an empty folder"
        )
    return True


def _claim(plan: ReshardPlan, outputs: list[Path]) -> None:
    """Refuse a folder holding foreign shards or a partial run with another plan."""
    out = Path(plan.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    foreign = sorted(set(out.glob(SHARD_GLOB)) - set(outputs))
    if foreign:
        raise DataError(
            f"{out}: holds shards this reshard would not write ({foreign[0].name}); "
            f"use an empty folder"
        )
    stored = out / TMP_NAME / PLAN_NAME
    current = json.dumps(asdict(plan), indent=1)
    if stored.exists() and stored.read_text() != current:
        raise DataError(
            f"{stored}: an interrupted reshard with other inputs or parameters; "
            f"delete {out} (or its {TMP_NAME}) to start over"
        )
    write_text_atomic(stored, current)
