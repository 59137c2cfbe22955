"""Monte-Carlo of per-rank token counts under each balancing strategy ([Kim], section 5.2 /
Table 5); scripts/simulate_balance.py prints and plots it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from data.order.lengths import sample_from_pmf, sample_stratified_lengths, strata_edges
from data.order.strategies import STRATEGIES, balance, tokens_per_rank

# [Kim], appendix C.2, Table 5: mean min / max tokens per GPU, 16 samples per GPU, 8 GPUs per
# node, max length 512. The GPU count is not stated; these numbers come out of this simulation
# at 1024 GPUs (their 128-node cluster), not at 8 or 64.
PUBLISHED_TABLE_5 = {
    "none": (1886, 6459),
    "stratified": (3620, 4482),
    "stratified_local_presort": (3743, 4401),
    "stratified_local_snake": (3900, 4246),
    "global_presort": (3807, 4313),
}


@dataclass(frozen=True)
class Simulation:
    """`trials` global batches of world x local lengths drawn from `pmf` ((L+1,), over lengths
    0..L), each dealt by every strategy in `strategies` with nodes of ranks_per_node ranks.
    edges: the length strata of the stratified draw (default: strata_edges(L)); the trials
    are drawn in chunks of about `chunk_samples` lengths to bound memory."""

    world: int
    local: int
    ranks_per_node: int
    trials: int
    pmf: np.ndarray
    strategies: Sequence[str] = tuple(STRATEGIES)
    edges: Sequence[int] | None = None
    chunk_samples: int = 1 << 22


def dealt_batches(sim: Simulation, rng: np.random.Generator):
    """Yield (strategy, lengths (t, W*B), assignment (t, W, B)) for chunks of t trials.

    Each trial draws one global batch per source (data/order/strategies.py: `Strategy.source`):
    a plain one, and a stratified one shared by the stratified strategies, so their
    differences are not sampling noise. Every strategy deals each chunk in turn.
    """
    world, local, pmf = sim.world, sim.local, sim.pmf
    edges = strata_edges(pmf.shape[0] - 1) if sim.edges is None else np.asarray(sim.edges)
    n = world * local
    per_chunk = max(1, sim.chunk_samples // n)
    done = 0
    while done < sim.trials:
        t = min(per_chunk, sim.trials - done)
        batches = {
            "shards": sample_from_pmf(pmf, (t, n), rng),
            "stratified": sample_stratified_lengths(t, world, local, rng, pmf, edges),
        }
        for s in sim.strategies:
            batch = batches[STRATEGIES[s].source]
            yield s, batch, balance(s, batch, world, sim.ranks_per_node)
        done += t


def simulate_token_range(sim: Simulation, rng: np.random.Generator) -> dict[str, dict[str, float]]:
    """Mean over trials of the min and max per-rank tokens, per strategy (`dealt_batches`).

    Returns {strategy: {"min_tokens": float, "max_tokens": float}}.
    """
    sums = {s: np.zeros(2) for s in sim.strategies}
    for s, batch, assignment in dealt_batches(sim, rng):
        tok = tokens_per_rank(batch, assignment)
        sums[s] += [tok.min(axis=-1).sum(), tok.max(axis=-1).sum()]
    return {
        s: {"min_tokens": float(v[0] / sim.trials), "max_tokens": float(v[1] / sim.trials)}
        for s, v in sums.items()
    }
