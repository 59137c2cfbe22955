"""Balancing variable-length sequences across data-parallel ranks (host side, pure numpy).

Without padding, a rank's step time follows the number of real tokens it trains, and every
rank waits for the slowest one at the gradient all-reduce. A strategy decides which rank trains
which sample of a global batch so that the per-rank token counts come out close.

Each strategy is one `Strategy` record in `STRATEGIES`: how it deals, where each rank's raw
samples come from (`source`), over which group of ranks it pools them (`scope`, hence whether
it needs the host exchange) and how the samples travel (`transport`). The config
(data/config.py), the pipeline (data/pipeline.py), the benchmark and the simulation read the
record, never the name.

Conventions (shared by the simulation and the host exchange):

    lengths     (..., W*B) int   the global batch as it arrives: rank r's raw local batch is
                                 lengths[..., r*B:(r+1)*B]. Leading dims are independent
                                 batches (the simulation stacks Monte-Carlo trials there).
    assignment  (..., W, B) int  indices into the last axis of `lengths`; row r = the samples
                                 rank r trains. Always a permutation of 0..W*B-1.

W = world size (or the group's size), B = local batch, R = ranks per node.

    none                      rank r keeps its own samples.
    global_presort            all-gather, sort by length (descending, stable), deal round robin
                              (sorted position i -> rank i % W). NVIDIA's "padding exchange"
                              ([Zeng], section IV-B).
    serpentine                global sort, snake dealing: 0..W-1, then W-1..0, ... (NVIDIA v2.1,
                              HazyResearch).
    stratified                Samsung ([Kim]): each rank's local batch is *drawn* with fixed
                              per-stratum counts (data/sources/stratified.py); the dealing itself
                              is the identity.
    stratified_local_presort  stratified draw, then sort within each node of R ranks and deal
                              round robin inside the node (no traffic between nodes).
    stratified_local_snake    the same with snake dealing inside the node.
    node_swap                 a few long-for-short swaps between nodes, then a balanced
                              equal-count partition inside each node (data/order/node_balance.py);
                              only the lengths are all-gathered and only moved samples travel
                              (the sparse transport, data/comm/sparse.py).
    stratified_node_swap      the same on stratified draws: fewer samples cross nodes.

Every dealer is deterministic: each rank computes the same assignment from the same gathered
lengths, so the exchange needs no extra communication to agree on it.

How stratification is used in training: each rank's stream keeps one shuffled queue per
stratum and pops `strata_counts(B)` samples from them per step (data/order/lengths.py).
Ranks draw independently, so stratification costs no communication; the node-local strategies
then only all-gather within a node. Caveat: the counts are rounded (16 -> 6:3:2:5 against
37.3:19.7:11.7:31.4 %), so a stratum is sampled up to 1/(2B) off its share and its queue
drains at a slightly different rate than one epoch of the data would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal, Optional

import numpy as np

from data.order.node_balance import assign_node_swap, node_swap_rows
from data.order.shape import local_batch, node_size

# ---------------------------------------------------------------------------------------------
# Dealers: lengths (..., W*B) -> assignment (..., W, B)
# ---------------------------------------------------------------------------------------------


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
    local = local_batch(lengths, world_size)
    ids = np.arange(world_size * local, dtype=np.int64).reshape(world_size, local)
    return np.broadcast_to(ids, lengths.shape[:-1] + ids.shape).copy()


def _global_sorted_deal(lengths, world_size, snake):
    local_batch(lengths, world_size)
    return _deal(_sort_desc(lengths), world_size, snake)


def _node_sorted_deal(lengths, world_size, ranks_per_node, snake):
    """Sort and deal inside each node; indices stay within the node's slice of the batch."""
    local = local_batch(lengths, world_size)
    r = node_size(world_size, ranks_per_node)
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


Deal = Callable[[np.ndarray, int, int], np.ndarray]  # (lengths, world, ranks_per_node)


@dataclass(frozen=True)
class Strategy:
    """One balancing strategy: everything the pipeline, config and tools need to know of it."""

    deal: Deal  # lengths (..., W*B), W, R -> assignment (..., W, B)
    # where each rank's raw local batch comes from (data/sources: SOURCES): "shards" reads
    # them in stream order, "stratified" draws fixed per-stratum counts
    source: Literal["shards", "stratified"]
    # which ranks pool their batches before dealing: "rank" (each its own: nothing moves, no
    # exchange), "node" (the R ranks of a node: no traffic between nodes) or "world"
    scope: Literal["rank", "node", "world"]
    # how the batches travel when they do (data/comm): "allgather" pools every sample of the
    # group on every rank (host.allgather_batch) and deals it with `deal`; "sparse" all-gathers
    # only the sizes over the world and moves only the samples that change rank, in one
    # all-to-all-v (data/comm/sparse.py), by the rows `rows` computes for each rank
    transport: Literal["allgather", "sparse"] = "allgather"
    # sparse only: (lengths (W*B,), W, R, rank) -> (ranks (K,), their rows (K, B)), the rows of
    # this rank's node and of the nodes its samples go to; the same assignment as `deal`
    rows: Optional[Callable[[np.ndarray, int, int, int], tuple[np.ndarray, np.ndarray]]] = None

    def __post_init__(self) -> None:
        # the transport runs what the record names, so a sparse strategy must name its rows (a
        # strategy whose deal the transport would silently ignore cannot be built)
        if (self.transport == "sparse") != (self.rows is not None):
            raise ValueError(
                "a strategy names its rows function if and only if its transport is sparse"
            )

    @property
    def exchanges(self) -> bool:
        """Whether the batches travel between ranks (the host exchange runs)."""
        return self.scope != "rank"


STRATEGIES: dict[str, Strategy] = {
    "none": Strategy(assign_none, source="shards", scope="rank"),
    "stratified": Strategy(assign_stratified, source="stratified", scope="rank"),
    "stratified_local_presort": Strategy(
        assign_stratified_local_presort, source="stratified", scope="node"
    ),
    "stratified_local_snake": Strategy(
        assign_stratified_local_snake, source="stratified", scope="node"
    ),
    "global_presort": Strategy(assign_global_presort, source="shards", scope="world"),
    "serpentine": Strategy(assign_serpentine, source="shards", scope="world"),
    # serpentine-level balance without the full all-gather (docs/balance_at_scale.md)
    "node_swap": Strategy(
        assign_node_swap, source="shards", scope="world", transport="sparse", rows=node_swap_rows
    ),
    "stratified_node_swap": Strategy(
        assign_node_swap,
        source="stratified",
        scope="world",
        transport="sparse",
        rows=node_swap_rows,
    ),
}


def get(name: str) -> Strategy:
    """The record of strategy `name`; ValueError naming the choices for an unknown one."""
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ValueError(
            f"unknown balance strategy {name!r}; choose from {sorted(STRATEGIES)}"
        ) from None


def balance(
    strategy: str,
    lengths: np.ndarray,
    world_size: int,
    ranks_per_node: int,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Assignment (..., W, B) of the global batch lengths (..., W*B) under `strategy`.

    rng is accepted so every caller uses one signature, but no dealer uses it: the dealing is
    deterministic on purpose, so all ranks agree on it without communicating. Randomness in the
    stratified strategies lives in how the batch is drawn (`stratified_draw`).
    """
    return get(strategy).deal(np.asarray(lengths), world_size, ranks_per_node)


def tokens_per_rank(lengths: np.ndarray, assignment: np.ndarray) -> np.ndarray:
    """Real tokens each rank trains: lengths (..., W*B), assignment (..., W, B) -> (..., W)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    flat = assignment.reshape(assignment.shape[:-2] + (-1,))
    picked = np.take_along_axis(lengths, flat, axis=-1)
    return picked.reshape(assignment.shape).sum(axis=-1)
