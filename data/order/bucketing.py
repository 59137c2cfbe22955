"""Length bucketing ([Zhang]): every batch comes from one length bucket, so a batch pads (or,
unpadded, attends) only up to its bucket's maximum, and every sample is used once per pass.

The pool is what one rank may draw from: the lengths of its shard(s), or its share of a whole
epoch's length index (see `split_pool_by_bucket`):

    lengths     (N,)   int    sequence length of each pool sample
    provenance  (N, 2) int64  (shard index, sample index within the shard) of each sample: the
                              audit trail; every drawn batch carries it

Buckets: `boundaries` (M,) strictly increasing upper edges; bucket b holds the lengths
(boundaries[b-1], boundaries[b]] with boundaries[-1] read as 0. For max length 128 with 16-token
steps: [16, 32, ..., 128] (8 buckets, [Zhang] section II); for max 512 [Kim]'s four strata:
[128, 256, 384, 512].

Passes, not a global epoch. Each bucket is a queue over its own members: pass p of bucket b is a
permutation seeded with (seed, rank, b, p), and a batch of B samples takes the next B of the
queue. A curriculum visits buckets at its own rates, so buckets finish their passes at different
steps; what holds always is that within one pass of a bucket every member is used exactly once.
With batches per bucket proportional to bucket size (curriculum.proportional_visits), one round
of the curriculum is about one epoch of the pool.

The tail of a pass (fewer than B samples left) is handled by `tail`:
    "carry" (default): the batch takes the tail and tops up from the head of the next pass, whose
                       order is adjusted so the carried samples are not drawn twice in the same
                       batch. Nothing is lost; a batch may straddle two passes.
    "drop":            the tail is skipped (counted in `dropped`), the next pass starts fresh.

Distributed use: the bucket of step t comes from a curriculum that every rank evaluates alike
(data/order/curriculum.py), so no collective is needed to agree on it; each rank then draws its own
samples from its own pool's bucket queue with `draw(bucket)`. A rank's pool needs at least B
samples in every bucket, which the constructor checks.

Two samplers share these rules:
    BucketSampler  here: an in-memory pool (a whole index, or an experiment's data).
    BucketStream   what the training pipeline uses (data/sources/bucket_queues.py): the pool is
                   this rank's shards, streamed; bucket b's queue walks them epoch after epoch
                   keeping only its lengths (a ShardStream with a length range, as the strata
                   of data/sources/stratified.py do), so memory stays a few shards whatever the
                   data size.
"""

from __future__ import annotations

import zlib
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from data.order.lengths import length_pmf, strata_fractions

TAIL_MODES = ("carry", "drop")
STATE_VERSION = 1


# --------------------------------------------------------------------------------------------
# Boundaries
# --------------------------------------------------------------------------------------------


def uniform_boundaries(max_len: int, step: int) -> list[int]:
    """[step, 2*step, ..., max_len] (the last bucket may be narrower); e.g. (128, 16) -> 8."""
    if step < 1 or max_len < 1:
        raise ValueError(f"uniform_boundaries: max_len={max_len} and step={step} must be >= 1")
    edges = list(range(step, max_len, step))
    return edges + [max_len]


def check_boundaries(boundaries: Sequence[int]) -> np.ndarray:
    """(M,) int64 copy of `boundaries` after checking they are positive and increasing."""
    edges = np.asarray(list(boundaries), dtype=np.int64)
    if edges.ndim != 1 or edges.size == 0:
        raise ValueError(f"bucket boundaries {list(boundaries)} must be a non-empty list")
    if edges[0] < 1 or np.any(np.diff(edges) <= 0):
        raise ValueError(
            f"bucket boundaries {edges.tolist()} must be positive and strictly "
            f"increasing (upper edges: bucket b holds (edges[b-1], edges[b]])"
        )
    return edges


def bucket_of(lengths: np.ndarray, boundaries: Sequence[int]) -> np.ndarray:
    """Bucket index (N,) int64 of each length (N,); ValueError for lengths outside 1..max."""
    edges = check_boundaries(boundaries)
    lengths = np.asarray(lengths, dtype=np.int64)
    bad = np.flatnonzero((lengths < 1) | (lengths > edges[-1]))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"sample {i}: length {lengths[i]} is outside the buckets "
            f"(1..{edges[-1]}, boundaries {edges.tolist()})"
        )
    # side="left": a length equal to an edge belongs to the bucket that edge closes
    return np.searchsorted(edges, lengths, side="left").astype(np.int64)


def bucket_counts(lengths: np.ndarray, boundaries: Sequence[int]) -> np.ndarray:
    """Samples per bucket (M,) int64 for a pool's lengths (N,)."""
    edges = check_boundaries(boundaries)
    return np.bincount(bucket_of(lengths, edges), minlength=edges.size).astype(np.int64)


def split_pool_by_bucket(
    lengths: np.ndarray, boundaries: Sequence[int], rank: int, world_size: int, seed: int
) -> np.ndarray:
    """Indices (n_r,) int64 of the pool samples rank `rank` owns, dealt bucket by bucket.

    For a pool shared by all ranks (a whole epoch's length index): each bucket's members are
    permuted with (seed, b) and dealt round robin, so every rank's buckets differ in size by at
    most one sample and the ranks' shares are disjoint and cover the pool.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"split_pool_by_bucket: rank {rank} is outside world_size {world_size}")
    buckets = bucket_of(lengths, boundaries)
    owned = []
    for b in range(len(check_boundaries(boundaries))):
        members = np.flatnonzero(buckets == b)
        members = members[np.random.default_rng([seed, b]).permutation(members.size)]
        owned.append(members[rank::world_size])
    return np.concatenate(owned).astype(np.int64)


# --------------------------------------------------------------------------------------------
# Sampler
# --------------------------------------------------------------------------------------------


class BucketBatch(NamedTuple):
    """One local batch drawn from one bucket; B = batch size."""

    bucket: int
    indices: np.ndarray  # (B,) int64 positions in the pool
    provenance: np.ndarray  # (B, 2) int64 (shard index, sample index in that shard)
    passes: np.ndarray  # (B,) int64 the bucket pass each sample was drawn in
    lengths: np.ndarray  # (B,) int64


class BucketSampler:
    """Per-bucket shuffled queues over one rank's pool; `draw(bucket)` -> the next batch.

    lengths (N,), provenance (N, 2) or None (then (0, i) for sample i). Deterministic: the
    batches depend only on (seed, rank, pool, boundaries, batch_size, tail) and the sequence of
    buckets asked for. `state_dict()` after any draw resumes exactly there.
    """

    def __init__(
        self,
        lengths: np.ndarray,
        boundaries: Sequence[int],
        batch_size: int,
        seed: int,
        rank: int = 0,
        provenance: np.ndarray | None = None,
        tail: str = "carry",
    ):
        self.lengths = np.asarray(lengths, dtype=np.int64).copy()
        self.boundaries = check_boundaries(boundaries)
        if batch_size < 1:
            raise ValueError(f"BucketSampler: batch_size={batch_size} must be >= 1")
        if tail not in TAIL_MODES:
            raise ValueError(f"BucketSampler: tail={tail!r}; choose from {TAIL_MODES}")
        self.batch_size, self.seed, self.rank, self.tail = batch_size, seed, rank, tail
        self.provenance = _provenance(provenance, self.lengths.size)
        buckets = bucket_of(self.lengths, self.boundaries)
        # members[b]: pool positions of bucket b in ascending order; the base of every pass
        self.members = [np.flatnonzero(buckets == b) for b in range(self.num_buckets)]
        self._check_sizes()
        m = self.num_buckets
        self.passes = np.zeros(m, dtype=np.int64)  # completed passes = index of the current one
        self.offsets = np.zeros(m, dtype=np.int64)  # samples of the current pass already drawn
        self.dropped = np.zeros(m, dtype=np.int64)  # samples skipped by tail="drop"
        self.draws = np.zeros(m, dtype=np.int64)  # batches drawn per bucket
        # carried[b]: pool positions carried into the current pass; they shaped its order
        self.carried: list[np.ndarray] = [np.zeros(0, dtype=np.int64) for _ in range(m)]
        self._orders: dict[int, tuple[int, np.ndarray]] = {}  # b -> (pass, order) cache

    @property
    def num_buckets(self) -> int:
        return int(self.boundaries.size)

    @property
    def bucket_sizes(self) -> np.ndarray:
        """(M,) int64 pool samples per bucket."""
        return np.array([m.size for m in self.members], dtype=np.int64)

    def _check_sizes(self) -> None:
        """Every bucket must hold a whole batch, or some step could not be served on this rank."""
        sizes = self.bucket_sizes
        small = np.flatnonzero(sizes < self.batch_size)
        if small.size:
            b = int(small[0])
            lo = 1 if b == 0 else int(self.boundaries[b - 1]) + 1
            raise ValueError(
                f"rank {self.rank}: bucket {b} (lengths {lo}..{self.boundaries[b]}) holds "
                f"{sizes[b]} samples, fewer than batch_size={self.batch_size}; merge it with a "
                f"neighbour (fewer boundaries) or use a larger pool. Bucket sizes: "
                f"{sizes.tolist()}"
            )

    # -- drawing -------------------------------------------------------------------------------

    def draw(self, bucket: int) -> BucketBatch:
        """The next batch_size samples of `bucket`'s queue (crossing into its next pass)."""
        if not 0 <= bucket < self.num_buckets:
            raise ValueError(f"bucket {bucket} is outside 0..{self.num_buckets - 1}")
        size, b = self.members[bucket].size, bucket
        if self.tail == "drop" and size - self.offsets[b] < self.batch_size:
            self.dropped[b] += size - self.offsets[b]
            self._start_pass(b, carried=np.zeros(0, dtype=np.int64))
        parts, passes = [], []
        need = self.batch_size
        while need:
            take = min(need, size - int(self.offsets[b]))
            start = int(self.offsets[b])
            parts.append(self._order(b)[start : start + take])
            passes.append(np.full(take, self.passes[b], dtype=np.int64))
            self.offsets[b] += take
            need -= take
            if self.offsets[b] == size:
                # carried = what this batch already holds; only non-empty when need > 0
                self._start_pass(b, carried=np.concatenate(parts) if need else parts[0][:0])
        self.draws[b] += 1
        indices = np.concatenate(parts)
        return BucketBatch(
            bucket, indices, self.provenance[indices], np.concatenate(passes), self.lengths[indices]
        )

    def _start_pass(self, b: int, carried: np.ndarray) -> None:
        self.passes[b] += 1
        self.offsets[b] = 0
        self.carried[b] = np.asarray(carried, dtype=np.int64)

    def _order(self, b: int) -> np.ndarray:
        """(n_b,) pool positions of bucket b in the order of its current pass (cached)."""
        cached = self._orders.get(b)
        if cached is not None and cached[0] == self.passes[b]:
            return cached[1]
        members = self.members[b]
        rng = np.random.default_rng([self.seed, self.rank, b, int(self.passes[b])])
        order = members[rng.permutation(members.size)]
        order = _carried_to_back(order, self.carried[b], self.batch_size)
        self._orders[b] = (int(self.passes[b]), order)
        return order

    # -- resume --------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Plain lists and ints (JSON-safe); with the identity of the sampler, checked on load."""
        return {
            "version": STATE_VERSION,
            "identity": self._identity(),
            "passes": self.passes.tolist(),
            "offsets": self.offsets.tolist(),
            "dropped": self.dropped.tolist(),
            "draws": self.draws.tolist(),
            "carried": [c.tolist() for c in self.carried],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at `state` (same pool, boundaries, batch size, seed, rank and tail)."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(
                f"BucketSampler state version {state.get('version')} is not {STATE_VERSION}"
            )
        if state["identity"] != self._identity():
            raise ValueError(
                f"BucketSampler state belongs to another sampler: saved "
                f"{state['identity']}, this one {self._identity()}"
            )
        m = self.num_buckets
        for key in ("passes", "offsets", "dropped", "draws", "carried"):
            if len(state[key]) != m:
                raise ValueError(
                    f"BucketSampler state {key} has {len(state[key])} entries, expected {m}"
                )
        offsets = np.asarray(state["offsets"], dtype=np.int64)
        if np.any(offsets < 0) or np.any(offsets >= self.bucket_sizes):
            raise ValueError(
                f"BucketSampler state offsets {offsets.tolist()} do not fit bucket "
                f"sizes {self.bucket_sizes.tolist()}"
            )
        self.passes = np.asarray(state["passes"], dtype=np.int64)
        self.offsets = offsets
        self.dropped = np.asarray(state["dropped"], dtype=np.int64)
        self.draws = np.asarray(state["draws"], dtype=np.int64)
        self.carried = [np.asarray(c, dtype=np.int64) for c in state["carried"]]
        self._orders.clear()

    def _identity(self) -> dict[str, Any]:
        """What must match for a saved position to mean the same samples."""
        crc = zlib.crc32(self.lengths.tobytes())
        crc = zlib.crc32(self.provenance.tobytes(), crc)
        return {
            "boundaries": self.boundaries.tolist(),
            "batch_size": self.batch_size,
            "seed": self.seed,
            "rank": self.rank,
            "tail": self.tail,
            "pool_size": int(self.lengths.size),
            "pool_crc32": int(crc),
        }

    def describe(self) -> str:
        sizes = self.bucket_sizes.tolist()
        return (
            f"bucketing: {self.num_buckets} buckets, boundaries "
            f"{self.boundaries.tolist()}, sizes {sizes}, batch {self.batch_size}, "
            f"tail={self.tail}, rank {self.rank}"
        )


def _provenance(provenance: np.ndarray | None, n: int) -> np.ndarray:
    """(n, 2) int64 provenance; default (0, i): a single shard read in order."""
    if provenance is None:
        return np.stack([np.zeros(n, dtype=np.int64), np.arange(n, dtype=np.int64)], axis=1)
    prov = np.asarray(provenance, dtype=np.int64)
    if prov.shape != (n, 2):
        raise ValueError(
            f"provenance has shape {prov.shape}, expected ({n}, 2): one "
            f"(shard index, sample index) per pool sample"
        )
    return prov.copy()


def _carried_to_back(order: np.ndarray, carried: np.ndarray, batch_size: int) -> np.ndarray:
    """Reorder a pass so its first B - len(carried) entries avoid the carried samples.

    order (n,), carried (c,) with c < B <= n. The batch that straddles two passes takes the
    carried tail of the old pass plus this head; without this, a sample could appear twice in
    that batch. Stable: the pass is otherwise the seeded permutation.
    """
    if carried.size == 0:
        return order
    head_len = batch_size - carried.size
    is_carried = np.isin(order, carried)
    free = np.flatnonzero(~is_carried)[:head_len]  # first head_len non-carried positions
    in_head = np.zeros(order.size, dtype=bool)
    in_head[free] = True
    return np.concatenate([order[in_head], order[~in_head]])


# --------------------------------------------------------------------------------------------
# Sampler + curriculum
# --------------------------------------------------------------------------------------------


class CurriculumSampler:
    """The bucket of each step from a curriculum, this rank's samples from a BucketSampler.

    `curriculum` is any object with next_bucket(step) -> int, update(bucket, loss_before,
    loss_after=None, step=None), state_dict(), load_state_dict() and num_buckets (the classes of
    data/order/curriculum.py). Every rank holds an identical curriculum, fed identical (all-reduced)
    losses, so the bucket of a step agrees across ranks without a collective.
    """

    def __init__(self, sampler: BucketSampler, curriculum: Any):
        if curriculum.num_buckets != sampler.num_buckets:
            raise ValueError(
                f"curriculum has {curriculum.num_buckets} buckets, the sampler "
                f"{sampler.num_buckets}"
            )
        self.sampler, self.curriculum = sampler, curriculum

    def next_batch(self, step: int) -> BucketBatch:
        return self.sampler.draw(self.curriculum.next_bucket(step))

    @property
    def update(self) -> Callable[..., None]:
        """The curriculum's own update(bucket, loss_before, loss_after=None, step=None), which
        takes the step's global (all-reduced) losses: handed out, not restated."""
        return self.curriculum.update

    def state_dict(self) -> dict[str, Any]:
        return {"sampler": self.sampler.state_dict(), "curriculum": self.curriculum.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state["sampler"])
        self.curriculum.load_state_dict(state["curriculum"])

    def describe(self) -> str:
        return f"{self.sampler.describe()}; {self.curriculum.describe()}"


def reference_shares(boundaries: Sequence[int], max_seq_length: int) -> np.ndarray:
    """(M,) each bucket's share of the data under REFERENCE 2's length histogram.

    The same on every rank without reading any data (the proportional curricula need equal
    inputs everywhere); the synthetic data follows the same histogram.
    """
    edges = check_boundaries(boundaries)
    return strata_fractions(length_pmf(max_seq_length), np.concatenate([[0], edges]))
