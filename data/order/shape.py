"""How a global batch of W*B lengths splits over W ranks and nodes of R ranks: the checks every
dealer shares (data/order/strategies.py, data/order/node_balance.py)."""

from __future__ import annotations

import numpy as np


def local_batch(lengths: np.ndarray, world_size: int) -> int:
    """B from the global batch (..., W*B); rejects a batch that does not split evenly."""
    n = lengths.shape[-1]
    if world_size < 1 or n % world_size:
        raise ValueError(f"global batch of {n} does not split over {world_size} ranks")
    return n // world_size


def node_size(world_size: int, ranks_per_node: int) -> int:
    """Ranks per node, clamped to the world (a one-node job may have fewer ranks than slots)."""
    r = min(ranks_per_node, world_size)
    if r < 1 or world_size % r:
        raise ValueError(
            f"world_size={world_size} is not a whole number of {ranks_per_node}-rank nodes"
        )
    return r
