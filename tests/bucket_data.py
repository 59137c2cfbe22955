"""Shards with exact bucket sizes, and the checks of a bucketed run's audit trail.

`write_bucketed_shards` writes SHARDS files holding exactly PER_BUCKET samples of every length
bucket of EDGES (synthetic samples picked by length), so every rank's queue for a bucket holds
the same number of samples in every epoch and epochs end on batch boundaries: then "every
sample exactly once per epoch" can be checked exactly, step by step, across ranks.

Used by tests/integration/test_bucketing_pipeline.py (ranks as threads) and
tests/integration/test_curriculum_distributed.py (ranks as processes).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from data.sources.shards import list_shards, read_samples, write_samples
from data.synthetic import shard_name
from data.synthetic_language import generate_samples, successor_table

from data_audit import Key

MAX_SEQ, MAX_PRED, VOCAB = 64, 10, 256
EDGES = (16, 32, 48, 64)
BOUNDARIES = ",".join(map(str, EDGES))
SHARDS, PER_BUCKET = 4, 8  # 32 samples per shard, 32 per bucket in all


def write_bucketed_shards(folder: Path, seed: int = 3, eval_samples: int = 16) -> Path:
    """SHARDS training shards with PER_BUCKET samples per bucket each, plus eval.hdf5."""
    rng = np.random.default_rng(seed)
    pool = generate_samples(rng, successor_table(seed, VOCAB), 4000, MAX_SEQ, MAX_PRED)
    buckets = np.searchsorted(EDGES, [len(s.input_ids) for s in pool], side="left")
    members = [list(np.flatnonzero(buckets == b)) for b in range(len(EDGES))]
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(SHARDS):
        picked = [pool[m.pop()] for m in members for _ in range(PER_BUCKET)]
        order = rng.permutation(len(picked))
        write_samples(folder / shard_name(k, SHARDS), [picked[i] for i in order])
    write_samples(folder / "eval.hdf5", pool[-eval_samples:])
    return folder


def sample_buckets(folder: Path) -> dict[Key, int]:
    """(shard name, index) -> bucket of every training sample."""
    return {
        (p.name, i): int(np.searchsorted(EDGES, len(s.input_ids), side="left"))
        for p in list_shards(folder)
        for i, s in enumerate(read_samples(p, MAX_SEQ, MAX_PRED))
    }


def step_buckets(recorded: list[dict[int, list[Key]]], buckets: dict[Key, int]) -> list[int]:
    """The one bucket of every step, checking that all samples of all ranks share it."""
    steps = sorted(set().union(*recorded))
    assert steps == list(range(len(steps))), "steps missing from the audit trail"
    out = []
    for step in steps:
        seen = {buckets[k] for rank in recorded for k in rank.get(step, [])}
        assert len(seen) == 1, f"step {step}: samples of buckets {sorted(seen)}"
        out.append(seen.pop())
    return out


def check_epochs(recorded: list[dict[int, list[Key]]], buckets: dict[Key, int]) -> list[int]:
    """Every bucket's samples, in step order over all ranks: each run of PER_BUCKET * SHARDS
    of them is one epoch (every sample of the bucket once), the rest has no repeat. Returns
    the bucket of every step."""
    per_step = step_buckets(recorded, buckets)
    size = PER_BUCKET * SHARDS
    for b in range(len(EDGES)):
        drawn = [
            k
            for step, sb in enumerate(per_step)
            if sb == b
            for rank in recorded
            for k in sorted(rank[step])
        ]
        everyone = sorted(k for k, kb in buckets.items() if kb == b)
        for start in range(0, len(drawn), size):
            chunk = drawn[start : start + size]
            repeats = [k for k, n in Counter(chunk).items() if n > 1]
            assert not repeats, f"bucket {b}, epoch {start // size}: repeated {repeats}"
            if len(chunk) == size:
                assert sorted(chunk) == everyone, f"bucket {b}, epoch {start // size}"
    return per_step
