"""Sequence lengths: the reference length histogram, its one sampler, and [Kim]'s strata.

    lengths     (..., N) int   sequence lengths, 1..max_len
    pmf         (max_len+1,)   probability of each length (entry 0 is 0)
    strata      [Kim]'s four length strata, (0, 128], (128, 256], (256, 384], (384, 512]
                at max length 512, scaled to other maximum lengths

`sample_lengths` is the one sampler of REFERENCE 2's histogram: the synthetic data
(data/synthetic.py), the balance simulation and the pipeline benchmark all draw from it, and
`length_pmf` is its exact distribution. `sample_from_pmf` draws from any pmf (an empirical one
from real shards, or one restricted to a stratum).
"""

from __future__ import annotations

import glob
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np


@dataclass(frozen=True)
class LengthHistogram:
    """A piecewise-uniform length distribution with a spike at the maximum length.

    Bin i holds the lengths (edges[i], edges[i+1]] with probability probs[i]; `at_max` of all
    samples sit exactly at the maximum (inside the last bin); the rest of a bin is uniform.
    Edges are given for `ref_max_len` and scaled (rounded down) to other maximum lengths.
    """

    edges: tuple[int, ...]
    probs: tuple[float, ...]
    at_max: float
    ref_max_len: int = 512


# REFERENCE.md section 2 (and [Kim], section 3.1): Wikipedia 2020-01-01, max length 512.
# The four shares sum to 1.001 (rounding in the source); every share is divided by that sum.
REFERENCE_2_HISTOGRAM = LengthHistogram(
    edges=(0, 128, 256, 384, 512), probs=(0.373, 0.197, 0.117, 0.314), at_max=0.23
)

# [Kim]'s four strata for max length 512, scaled to other maximum lengths by `strata_edges`.
STRATA_EDGES_512 = (0, 128, 256, 384, 512)


def histogram_bins(
    max_len: int, histogram: LengthHistogram = REFERENCE_2_HISTOGRAM, min_length: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lows, highs, probs), each (bins + 1,): inclusive length ranges and their probabilities.

    The histogram's bins scaled to max_len, the first starting at min_length, the last one's
    spike at max_len a bin of its own.
    """
    edges = [e * max_len // histogram.ref_max_len for e in histogram.edges]
    edges[-1] = max_len
    lows = np.array([min_length, *(e + 1 for e in edges[1:-1]), max_len])
    highs = np.array([*edges[1:-1], max_len - 1, max_len])
    if np.any(highs < lows):
        raise ValueError(
            f"max_len={max_len} too small for bins {histogram.edges} above length {min_length}"
        )
    probs = np.asarray(histogram.probs, dtype=np.float64)
    if not 0.0 <= histogram.at_max <= probs[-1]:
        raise ValueError("at_max must lie within the last bin's share")
    probs = np.array([*probs[:-1], probs[-1] - histogram.at_max, histogram.at_max])
    return lows, highs, probs / probs.sum()


def sample_lengths(
    n,
    max_len: int,
    rng: np.random.Generator,
    histogram: LengthHistogram = REFERENCE_2_HISTOGRAM,
    min_length: int = 1,
) -> np.ndarray:
    """n lengths (int64; n may be an int or a shape) from REFERENCE 2's length histogram.

    For max_len=512: 1-128 37.3 %, 129-256 19.7 %, 257-384 11.7 %, 385-512 31.4 % with 23 %
    of all samples exactly 512; uniform inside the bins otherwise (mean about 255). A bin is
    drawn first, then a length inside it.
    """
    lows, highs, probs = histogram_bins(max_len, histogram, min_length)
    bins = rng.choice(len(probs), size=n, p=probs)
    return rng.integers(lows[bins], highs[bins] + 1).astype(np.int64)


def length_pmf(
    max_len: int, histogram: LengthHistogram = REFERENCE_2_HISTOGRAM, min_length: int = 1
) -> np.ndarray:
    """Probability of each length under `sample_lengths`, shape (max_len+1,), float64.

    An explicit pmf lets every other draw (per stratum, empirical) share one inverse-CDF
    sampler, and lets strata that do not line up with the histogram bins still work.
    """
    pmf = np.zeros(max_len + 1, dtype=np.float64)
    for lo, hi, p in zip(*histogram_bins(max_len, histogram, min_length)):
        pmf[lo : hi + 1] += p / (hi - lo + 1)
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


def sample_from_pmf(
    pmf: np.ndarray, shape, rng: np.random.Generator, lo: int = 0, hi: int | None = None
) -> np.ndarray:
    """Lengths of `shape` drawn from pmf restricted to (lo, hi] (int64), by inverse CDF."""
    hi = pmf.shape[0] - 1 if hi is None else hi
    restricted = np.zeros_like(pmf)
    restricted[lo + 1 : hi + 1] = pmf[lo + 1 : hi + 1]
    total = restricted.sum()
    if total <= 0:
        raise ValueError(f"no probability mass in lengths ({lo}, {hi}]")
    cdf = np.cumsum(restricted / total)
    # side="right" skips zero-mass lengths; the clip guards u landing on a rounded-down 1.0
    idx = np.searchsorted(cdf, rng.random(shape), side="right")
    return np.minimum(idx, hi).astype(np.int64)


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
    import h5py

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
# Strata ([Kim])
# ---------------------------------------------------------------------------------------------


def strata_edges(max_len: int, edges_512: Sequence[int] = STRATA_EDGES_512) -> np.ndarray:
    """Stratum boundaries (S+1,) for max_len: stratum s holds lengths (edges[s], edges[s+1]]."""
    scaled = np.rint(np.asarray(edges_512, dtype=np.float64) * max_len / 512).astype(np.int64)
    scaled[-1] = max_len
    if np.any(np.diff(scaled) <= 0):
        raise ValueError(f"max_len={max_len} too small for bins {tuple(edges_512)}")
    return scaled


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

    REFERENCE 2's shares give 6:3:2:5 for a local batch of 16. ([Kim]'s text lists 5:2:3:6;
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


def stratified_draw(
    pool_lengths: np.ndarray,
    world: int,
    local: int,
    strata_fracs: Sequence[float] | None,
    rng: np.random.Generator,
    max_len: int = 512,
    edges: Sequence[int] | None = None,
) -> np.ndarray:
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


def sample_stratified_lengths(
    trials: int,
    world: int,
    local: int,
    rng: np.random.Generator,
    pmf: np.ndarray,
    edges: Sequence[int],
) -> np.ndarray:
    """Simulation twin of `stratified_draw`: lengths (trials, world*local) drawn per stratum.

    Rank r's slice [r*local:(r+1)*local] has exactly `strata_counts(local, ...)` samples of
    each stratum, each drawn from the pmf restricted to that stratum.
    """
    counts = strata_counts(local, strata_fractions(pmf, edges))
    parts = [
        sample_from_pmf(pmf, (trials, world, int(c)), rng, lo=int(edges[s]), hi=int(edges[s + 1]))
        for s, c in enumerate(counts)
        if c > 0
    ]
    return np.concatenate(parts, axis=-1).reshape(trials, world * local)
