"""Monte-Carlo of per-rank token counts under each balancing strategy ([Kim], section 5.2 /
Table 5); scripts/simulate_balance.py prints and plots it."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from data.order.lengths import sample_from_pmf, sample_stratified_lengths, strata_edges
from data.order.strategies import STRATEGIES, balance, tokens_per_rank


def dealt_batches(
    world: int,
    local: int,
    ranks_per_node: int,
    trials: int,
    rng: np.random.Generator,
    pmf: np.ndarray,
    strategies: Sequence[str] = tuple(STRATEGIES),
    edges: Sequence[int] | None = None,
    chunk_samples: int = 1 << 22,
):
    """Yield (strategy, lengths (t, W*B), assignment (t, W, B)) for chunks of t trials.

    Each trial draws one global batch per source (data/order/strategies.py: `Strategy.source`):
    a plain one, and a stratified one shared by the stratified strategies, so their
    differences are not sampling noise. Trials are processed in chunks of about
    `chunk_samples` lengths to bound memory; every strategy deals each chunk in turn.
    """
    max_len = pmf.shape[0] - 1
    edges = strata_edges(max_len) if edges is None else np.asarray(edges)
    n = world * local
    per_chunk = max(1, chunk_samples // n)
    done = 0
    while done < trials:
        t = min(per_chunk, trials - done)
        batches = {
            "shards": sample_from_pmf(pmf, (t, n), rng),
            "stratified": sample_stratified_lengths(t, world, local, rng, pmf, edges),
        }
        for s in strategies:
            batch = batches[STRATEGIES[s].source]
            yield s, batch, balance(s, batch, world, ranks_per_node)
        done += t


def simulate_token_range(
    world: int,
    local: int,
    ranks_per_node: int,
    trials: int,
    rng: np.random.Generator,
    pmf: np.ndarray,
    strategies: Sequence[str] = tuple(STRATEGIES),
    edges: Sequence[int] | None = None,
    chunk_samples: int = 1 << 22,
) -> dict[str, dict[str, float]]:
    """Mean over trials of the min and max per-rank tokens, per strategy (`dealt_batches`).

    Returns {strategy: {"min_tokens": float, "max_tokens": float}}.
    """
    sums = {s: np.zeros(2) for s in strategies}
    for s, batch, assignment in dealt_batches(
        world, local, ranks_per_node, trials, rng, pmf, strategies, edges, chunk_samples
    ):
        tok = tokens_per_rank(batch, assignment)
        sums[s] += [tok.min(axis=-1).sum(), tok.max(axis=-1).sum()]
    return {
        s: {"min_tokens": float(v[0] / trials), "max_tokens": float(v[1] / trials)}
        for s, v in sums.items()
    }
