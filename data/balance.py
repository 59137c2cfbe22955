"""Balancing variable-length sequences across data-parallel ranks (host side, pure numpy).

Without padding, a rank's step time follows the number of real tokens it trains, and every
rank waits for the slowest one at the gradient all-reduce. These strategies decide which rank
trains which sample of a global batch so that the per-rank token counts come out close.

Conventions (shared by the simulation and the host exchange, which is why they live here):

    lengths     (..., W*B) int   the global batch as it arrives: rank r's raw local batch is
                                 lengths[..., r*B:(r+1)*B]. Leading dims are independent
                                 batches (the simulation stacks Monte-Carlo trials there).
    assignment  (..., W, B) int  indices into the last axis of `lengths`; row r = the samples
                                 rank r trains. Always a permutation of 0..W*B-1.

W = world size, B = local batch, R = ranks per node.

Strategies (names are used by the config and in JSON output):

    none                      rank r keeps its own samples.
    global_presort            all-gather, sort by length (descending, stable), deal round robin
                              (sorted position i -> rank i % W). NVIDIA's "padding exchange"
                              (seed 000, section IV-B).
    serpentine                global sort, snake dealing: 0..W-1, then W-1..0, ... (NVIDIA v2.1,
                              HazyResearch).
    stratified                Samsung (seed 001): each rank's local batch is *drawn* with fixed
                              per-stratum counts (see `stratified_draw`); the dealing itself is
                              the identity.
    stratified_local_presort  stratified draw, then sort within each node of R ranks and deal
                              round robin inside the node (no traffic between nodes).
    stratified_local_snake    the same with snake dealing inside the node.
    node_swap                 a few long-for-short swaps between nodes, then a balanced
                              equal-count partition inside each node (data/node_balance.py);
                              only the lengths are all-gathered and only moved samples travel
                              (data/sparse_exchange.py).
    stratified_node_swap      the same on stratified draws: fewer samples cross nodes.

Every dealer is deterministic: each rank computes the same assignment from the same gathered
lengths, so the exchange needs no extra communication to agree on it.

How stratification is used in training: the data stream of every rank keeps one shuffled queue
per stratum (samples bucketed by length with `stratum_of`); each step it pops `strata_counts(B)`
samples from the queues, i.e. exactly what `stratified_draw` does for an in-memory pool. Ranks
draw independently, so stratification costs no communication; the node-local strategies then
only all-gather within a node. Caveat: the counts are rounded (16 -> 6:3:2:5 against
37.3:19.7:11.7:31.4 %), so a stratum is sampled up to 1/(2B) off its share and its queue
drains at a slightly different rate than one epoch of the data would.
"""
from __future__ import annotations

import glob
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np

from data.node_balance import assign_node_swap

# ---------------------------------------------------------------------------------------------
# Length distribution
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LengthHistogram:
    """A piecewise-uniform length distribution with a spike at the maximum length.

    Bin i holds the lengths (edges[i], edges[i+1]] with probability probs[i]; `at_max` of all
    samples sit exactly at the maximum (inside the last bin); the rest of a bin is uniform.
    Edges are given for `ref_max_len` and scaled linearly for other maximum lengths.
    """

    edges: tuple[int, ...]
    probs: tuple[float, ...]
    at_max: float
    ref_max_len: int = 512


# REFERENCE.md section 2 (and seed 001, section 3.1): Wikipedia 2020-01-01, max length 512.
# The four shares sum to 1.001 (rounding in the source); `length_pmf` renormalizes.
REFERENCE_2_HISTOGRAM = LengthHistogram(
    edges=(0, 128, 256, 384, 512), probs=(0.373, 0.197, 0.117, 0.314), at_max=0.23)

# Seed 001's four strata for max length 512, scaled to other maximum lengths by `strata_edges`.
STRATA_EDGES_512 = (0, 128, 256, 384, 512)


def _scaled_edges(edges: Sequence[int], ref_max_len: int, max_len: int) -> np.ndarray:
    """Edges (n+1,) scaled from ref_max_len to max_len; the last edge is exactly max_len."""
    scaled = np.rint(np.asarray(edges, dtype=np.float64) * max_len / ref_max_len).astype(np.int64)
    scaled[-1] = max_len
    if np.any(np.diff(scaled) <= 0):
        raise ValueError(f"max_len={max_len} too small for bins {tuple(edges)}")
    return scaled


def length_pmf(max_len: int, histogram: LengthHistogram = REFERENCE_2_HISTOGRAM) -> np.ndarray:
    """Probability of each length, shape (max_len+1,), float64; entry 0 is 0.

    An explicit pmf lets every sampler (plain, per stratum, empirical) share one inverse-CDF
    draw, and lets strata that do not line up with the histogram bins still work.
    """
    edges = _scaled_edges(histogram.edges, histogram.ref_max_len, max_len)
    probs = np.asarray(histogram.probs, dtype=np.float64)
    probs = probs / probs.sum()
    if not 0.0 <= histogram.at_max <= probs[-1]:
        raise ValueError("at_max must lie within the last bin's share")
    pmf = np.zeros(max_len + 1, dtype=np.float64)
    for i, p in enumerate(probs):
        lo, hi = edges[i] + 1, edges[i + 1]
        # the last bin keeps its spike at max_len out of the uniform part
        uniform_p = p - histogram.at_max if i == len(probs) - 1 else p
        uniform_hi = hi - 1 if i == len(probs) - 1 else hi
        pmf[lo:uniform_hi + 1] += uniform_p / (uniform_hi - lo + 1)
    pmf[max_len] += histogram.at_max
    return pmf


def pmf_from_lengths(lengths: np.ndarray, max_len: int | None = None) -> np.ndarray:
    """Empirical pmf (max_len+1,) of observed lengths, e.g. from `lengths_from_shards`."""
    lengths = np.asarray(lengths, dtype=np.int64).ravel()
    if lengths.size == 0 or lengths.min() < 1:
        raise ValueError("need at least one length, all >= 1")
    max_len = int(lengths.max()) if max_len is None else max_len
    if lengths.max() > max_len:
        raise ValueError(f"length {lengths.max()} exceeds max_len={max_len}")
    counts = np.bincount(lengths, minlength=max_len + 1).astype(np.float64)
    return counts / counts.sum()


def sample_from_pmf(pmf: np.ndarray, shape, rng: np.random.Generator,
                    lo: int = 0, hi: int | None = None) -> np.ndarray:
    """Lengths of `shape` drawn from pmf restricted to (lo, hi] (int64), by inverse CDF."""
    hi = pmf.shape[0] - 1 if hi is None else hi
    restricted = np.zeros_like(pmf)
    restricted[lo + 1:hi + 1] = pmf[lo + 1:hi + 1]
    total = restricted.sum()
    if total <= 0:
        raise ValueError(f"no probability mass in lengths ({lo}, {hi}]")
    cdf = np.cumsum(restricted / total)
    # side="right" skips zero-mass lengths; the clip guards u landing on a rounded-down 1.0
    idx = np.searchsorted(cdf, rng.random(shape), side="right")
    return np.minimum(idx, hi).astype(np.int64)


def sample_lengths(n, max_len: int, rng: np.random.Generator,
                   histogram: LengthHistogram = REFERENCE_2_HISTOGRAM) -> np.ndarray:
    """n lengths (int64; n may be an int or a shape) from REFERENCE 2's length histogram.

    For max_len=512: 1-128 37.3 %, 129-256 19.7 %, 257-384 11.7 %, 385-512 31.4 % with 23 %
    of all samples exactly 512; uniform inside the bins otherwise (mean about 255).
    """
    return sample_from_pmf(length_pmf(max_len, histogram), n, rng)


def _expand_paths(paths: str | Iterable[str]) -> list[str]:
    """A glob pattern, a single path or an iterable of paths -> sorted list of files."""
    if isinstance(paths, str):
        found = sorted(glob.glob(paths))
        return found if found else [paths]
    return [str(p) for p in paths]


def lengths_from_shards(paths: str | Iterable[str]) -> np.ndarray:
    """Sequence lengths (N,) int64 of every sample in MLPerf HDF5 shards.

    Variable-length shards: the length of each `input_ids` row. Fixed-length shards (2-D
    `input_ids`): the sum of `input_mask`, since the rows there are padded to 512.
    """
    try:
        import h5py
    except ImportError as e:  # only this helper needs h5py
        raise ImportError("lengths_from_shards needs h5py: pip install h5py") from e
    out = []
    for path in _expand_paths(paths):
        with h5py.File(path, "r") as f:
            ids = f["input_ids"]
            if ids.ndim == 2:
                out.append(np.asarray(f["input_mask"][()], dtype=np.int64).sum(axis=1))
            else:
                rows = ids[()]
                out.append(np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows)))
    if not out:
        raise ValueError(f"no shards found for {paths!r}")
    return np.concatenate(out)


# ---------------------------------------------------------------------------------------------
# Strata (seed 001)
# ---------------------------------------------------------------------------------------------


def strata_edges(max_len: int, edges_512: Sequence[int] = STRATA_EDGES_512) -> np.ndarray:
    """Stratum boundaries (S+1,) for max_len: stratum s holds lengths (edges[s], edges[s+1]]."""
    return _scaled_edges(edges_512, 512, max_len)


def stratum_of(lengths: np.ndarray, edges: Sequence[int]) -> np.ndarray:
    """Stratum index (same shape as lengths) of each length; lengths beyond the ends clip."""
    edges = np.asarray(edges)
    s = np.searchsorted(edges, lengths, side="left") - 1
    return np.clip(s, 0, len(edges) - 2)


def strata_fractions(pmf: np.ndarray, edges: Sequence[int]) -> np.ndarray:
    """Probability mass (S,) of each stratum under a length pmf (max_len+1,)."""
    cdf = np.concatenate([[0.0], np.cumsum(pmf)])
    edges = np.minimum(np.asarray(edges), pmf.shape[0] - 1)
    return cdf[edges[1:] + 1] - cdf[edges[:-1] + 1]


def strata_counts(local_batch: int, fracs: Sequence[float]) -> np.ndarray:
    """Per-stratum sample counts (S,) summing to local_batch: largest-remainder rounding.

    REFERENCE 2's shares give 6:3:2:5 for a local batch of 16. (Seed 001's text lists 5:2:3:6;
    read short-to-long that would be a mean of about 4640 tokens per GPU, far above the 3620-4482
    range of its own Table 5, whereas 6:3:2:5 gives about 4080: the text seems to list the
    strata long-to-short.)
    """
    fracs = np.asarray(fracs, dtype=np.float64)
    ideal = fracs / fracs.sum() * local_batch
    counts = np.floor(ideal).astype(np.int64)
    short = local_batch - int(counts.sum())
    # ties go to the lower stratum (stable sort) so the result does not depend on float noise
    order = np.argsort(-(ideal - counts), kind="stable")
    counts[order[:short]] += 1
    return counts


def stratified_draw(pool_lengths: np.ndarray, world: int, local: int,
                    strata_fracs: Sequence[float] | None, rng: np.random.Generator,
                    max_len: int = 512, edges: Sequence[int] | None = None) -> np.ndarray:
    """Pick each rank's local batch from a pool so that every rank has the same stratum counts.

    pool_lengths: (P,) lengths of the candidate samples (e.g. one shard).
    strata_fracs: (S,) stratum shares used for the counts; None = the pool's own shares.
    Returns (world, local) int64 indices into the pool, drawn without replacement; within a
    row the samples come stratum by stratum (order inside a local batch does not matter).
    """
    pool_lengths = np.asarray(pool_lengths)
    edges = strata_edges(max_len) if edges is None else np.asarray(edges)
    strata = stratum_of(pool_lengths, edges)
    if strata_fracs is None:
        strata_fracs = np.bincount(strata, minlength=len(edges) - 1) / pool_lengths.size
    counts = strata_counts(local, strata_fracs)
    rows = []
    for s, c in enumerate(counts):
        members = np.flatnonzero(strata == s)
        if members.size < world * c:
            raise ValueError(f"stratum {s} has {members.size} samples, needs {world * c}")
        picked = rng.choice(members, size=world * c, replace=False)
        rows.append(picked.reshape(world, c))
    return np.concatenate(rows, axis=1).astype(np.int64)


def sample_stratified_lengths(trials: int, world: int, local: int, rng: np.random.Generator,
                              pmf: np.ndarray, edges: Sequence[int]) -> np.ndarray:
    """Simulation twin of `stratified_draw`: lengths (trials, world*local) drawn per stratum.

    Rank r's slice [r*local:(r+1)*local] has exactly `strata_counts(local, ...)` samples of
    each stratum, each drawn from the pmf restricted to that stratum.
    """
    counts = strata_counts(local, strata_fractions(pmf, edges))
    parts = [sample_from_pmf(pmf, (trials, world, int(c)), rng, lo=int(edges[s]),
                             hi=int(edges[s + 1]))
             for s, c in enumerate(counts) if c > 0]
    return np.concatenate(parts, axis=-1).reshape(trials, world * local)


# ---------------------------------------------------------------------------------------------
# Dealers: lengths (..., W*B) -> assignment (..., W, B)
# ---------------------------------------------------------------------------------------------


def _local_batch(lengths: np.ndarray, world_size: int) -> int:
    """B from the global batch (..., W*B); rejects a batch that does not split evenly."""
    n = lengths.shape[-1]
    if world_size < 1 or n % world_size:
        raise ValueError(f"global batch of {n} does not split over {world_size} ranks")
    return n // world_size


def _node_size(world_size: int, ranks_per_node: int) -> int:
    """Ranks per node, clamped to the world (a one-node job may have fewer ranks than slots)."""
    r = min(ranks_per_node, world_size)
    if r < 1 or world_size % r:
        raise ValueError(f"world_size={world_size} is not a whole number of "
                         f"{ranks_per_node}-rank nodes")
    return r


def _sort_desc(lengths: np.ndarray) -> np.ndarray:
    """Indices (..., N) that sort the last axis by length, longest first, ties by index."""
    neg = -np.asarray(lengths, dtype=np.int64)
    if neg.size and neg.min() > np.iinfo(np.int16).min:
        # numpy's stable sort is a radix sort for 16-bit keys: several times faster here
        neg = neg.astype(np.int16)
    return np.argsort(neg, axis=-1, kind="stable")


def _deal(order: np.ndarray, ranks: int, snake: bool) -> np.ndarray:
    """Deal a sorted order (..., ranks*B) to ranks -> (..., ranks, B).

    Round robin: sorted position i goes to rank i % ranks. Snake reverses every other round,
    so the rank that got the longest sample of one round gets the shortest of the next.
    """
    rounds = order.reshape(order.shape[:-1] + (-1, ranks))  # (..., B, ranks)
    if snake:
        rounds = rounds.copy()
        rounds[..., 1::2, :] = rounds[..., 1::2, ::-1]
    return np.swapaxes(rounds, -1, -2)


def _identity(lengths: np.ndarray, world_size: int) -> np.ndarray:
    """Each rank keeps its own slice: (..., W, B)."""
    local = _local_batch(lengths, world_size)
    ids = np.arange(world_size * local, dtype=np.int64).reshape(world_size, local)
    return np.broadcast_to(ids, lengths.shape[:-1] + ids.shape).copy()


def _global_sorted_deal(lengths, world_size, snake):
    _local_batch(lengths, world_size)
    return _deal(_sort_desc(lengths), world_size, snake)


def _node_sorted_deal(lengths, world_size, ranks_per_node, snake):
    """Sort and deal inside each node; indices stay within the node's slice of the batch."""
    local = _local_batch(lengths, world_size)
    r = _node_size(world_size, ranks_per_node)
    nodes = world_size // r
    per_node = np.asarray(lengths).reshape(lengths.shape[:-1] + (nodes, r * local))
    dealt = _deal(_sort_desc(per_node), r, snake)  # (..., nodes, r, local), node-local indices
    offsets = (np.arange(nodes, dtype=np.int64) * r * local)[:, None, None]
    return (dealt + offsets).reshape(lengths.shape[:-1] + (world_size, local))


def assign_none(lengths, world_size, ranks_per_node):
    """No balancing: (..., W*B) -> (..., W, B) identity."""
    return _identity(np.asarray(lengths), world_size)


def assign_global_presort(lengths, world_size, ranks_per_node):
    """Global sort, round robin: (..., W*B) -> (..., W, B)."""
    return _global_sorted_deal(np.asarray(lengths), world_size, snake=False)


def assign_serpentine(lengths, world_size, ranks_per_node):
    """Global sort, snake dealing: (..., W*B) -> (..., W, B)."""
    return _global_sorted_deal(np.asarray(lengths), world_size, snake=True)


def assign_stratified(lengths, world_size, ranks_per_node):
    """Stratified draw only: the batch is already balanced by how it was drawn -> identity."""
    return _identity(np.asarray(lengths), world_size)


def assign_stratified_local_presort(lengths, world_size, ranks_per_node):
    """Node-local sort, round robin within the node: (..., W*B) -> (..., W, B)."""
    return _node_sorted_deal(np.asarray(lengths), world_size, ranks_per_node, snake=False)


def assign_stratified_local_snake(lengths, world_size, ranks_per_node):
    """Node-local sort, snake dealing within the node: (..., W*B) -> (..., W, B)."""
    return _node_sorted_deal(np.asarray(lengths), world_size, ranks_per_node, snake=True)


STRATEGIES: dict[str, Callable[[np.ndarray, int, int], np.ndarray]] = {
    "none": assign_none,
    "stratified": assign_stratified,
    "stratified_local_presort": assign_stratified_local_presort,
    "stratified_local_snake": assign_stratified_local_snake,
    "global_presort": assign_global_presort,
    "serpentine": assign_serpentine,
    # issue 15: serpentine-level balance without the full all-gather (data/node_balance.py)
    "node_swap": assign_node_swap,
    "stratified_node_swap": assign_node_swap,
}

# strategies whose batches must come from a stratified draw to mean what their name says
STRATIFIED = frozenset(name for name in STRATEGIES if name.startswith("stratified"))
# strategies that never move a sample to another node (their exchange stays intra-node)
NODE_LOCAL = frozenset({"none", "stratified", "stratified_local_presort",
                        "stratified_local_snake"})
# strategies whose exchange moves only the samples that change rank (data/sparse_exchange.py)
SPARSE_EXCHANGE = frozenset({"node_swap", "stratified_node_swap"})


def balance(strategy: str, lengths: np.ndarray, world_size: int, ranks_per_node: int,
            rng: np.random.Generator | None = None) -> np.ndarray:
    """Assignment (..., W, B) of the global batch lengths (..., W*B) under `strategy`.

    rng is accepted so every caller uses one signature, but no dealer uses it: the dealing is
    deterministic on purpose, so all ranks agree on it without communicating. Randomness in the
    stratified strategies lives in how the batch is drawn (`stratified_draw`).
    """
    try:
        fn = STRATEGIES[strategy]
    except KeyError:
        raise ValueError(f"unknown balance strategy {strategy!r}; "
                         f"choose from {sorted(STRATEGIES)}") from None
    return fn(np.asarray(lengths), world_size, ranks_per_node)


def tokens_per_rank(lengths: np.ndarray, assignment: np.ndarray) -> np.ndarray:
    """Real tokens each rank trains: lengths (..., W*B), assignment (..., W, B) -> (..., W)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    flat = assignment.reshape(assignment.shape[:-2] + (-1,))
    picked = np.take_along_axis(lengths, flat, axis=-1)
    return picked.reshape(assignment.shape).sum(axis=-1)


# ---------------------------------------------------------------------------------------------
# Monte-Carlo of per-rank token counts (seed 001, section 5.2 / Table 5)
# ---------------------------------------------------------------------------------------------


def simulate_token_range(world: int, local: int, ranks_per_node: int, trials: int,
                         rng: np.random.Generator, pmf: np.ndarray,
                         strategies: Sequence[str] = tuple(STRATEGIES),
                         edges: Sequence[int] | None = None,
                         chunk_samples: int = 1 << 22) -> dict[str, dict[str, float]]:
    """Mean over trials of the min and max per-rank tokens, per strategy.

    Each trial draws one plain global batch (for none / global strategies) and one stratified
    batch (shared by the stratified strategies, so their differences are not sampling noise).
    Trials are processed in chunks of about `chunk_samples` lengths to bound memory.
    Returns {strategy: {"min_tokens": float, "max_tokens": float}}.
    """
    max_len = pmf.shape[0] - 1
    edges = strata_edges(max_len) if edges is None else np.asarray(edges)
    n = world * local
    per_chunk = max(1, chunk_samples // n)
    sums = {s: np.zeros(2) for s in strategies}
    done = 0
    while done < trials:
        t = min(per_chunk, trials - done)
        plain = sample_from_pmf(pmf, (t, n), rng)
        strat = sample_stratified_lengths(t, world, local, rng, pmf, edges)
        for s in strategies:
            batch = strat if s in STRATIFIED else plain
            tok = tokens_per_rank(batch, balance(s, batch, world, ranks_per_node))
            sums[s] += [tok.min(axis=-1).sum(), tok.max(axis=-1).sum()]
        done += t
    return {s: {"min_tokens": float(v[0] / trials), "max_tokens": float(v[1] / trials)}
            for s, v in sums.items()}
