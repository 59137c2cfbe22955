"""node_swap: serpentine-level balance that moves only a few samples between nodes.

The full exchange (global_presort, serpentine) all-gathers every sample of the global batch to
every rank, which at 1,024 ranks x 16 samples is about 16k payloads received to keep 16. The
node-local strategies of [Kim] move nothing between nodes but balance worse, because node
totals differ: a node's ranks can only share out the tokens their node read. This strategy
needs only the lengths of the global batch on every rank (a few bytes per sample), and then
every rank computes the same assignment from them:

1. Even out the nodes (`even_out_nodes`). Nodes above the mean token count are givers, the
   others takers. Each round pairs the k-th most loaded giver with the k-th least loaded taker;
   each pair swaps one sample of the giver for a shorter one of the taker: the pair of samples
   whose length difference comes closest to, never above, the smaller of the two nodes'
   distances to the mean (while that distance exceeds what one swap can move, simply its
   longest for the other's shortest). Sample counts per node do not change. Rounds stop when
   every node is within `NODE_TOLERANCE` tokens per rank of the mean. Only these swapped
   samples cross nodes, and each travels once, from the rank that read it to the rank that
   trains it.
2. Partition each node into equal-count parts of close token sums (`partition_nodes`): deal
   the node's samples longest first, each round of R samples to the parts in order of their
   load so far (the longest to the lightest), then swap samples between the heaviest and the
   lightest part (or, when they cannot, another pair) while that narrows the gap.
3. Give each part to the rank of the node that read most of its samples
   (`match_parts_to_ranks`), so fewer payloads travel inside the node too.

Step 1 is global and every rank runs it; steps 2 and 3 treat each node on its own, so a rank
computes them only for its own node and the nodes its samples go to (`node_swap_rows`): about
5 ms of one core per step at 1,024 ranks x 16, 9 ms at 4,096 (the whole assignment, which the
simulator computes: about 10 and 26 ms).

Everything is integer numpy with stable sorts and first-index tie-breaks: the same lengths give
the same assignment on every rank and every machine, without communication. Conventions as in
data/order/strategies.py: lengths (..., W*B) with rank r's raw batch at [r*B:(r+1)*B], assignment
(..., W, B) a permutation of 0..W*B-1; leading dims are independent batches (trials).
"""

from __future__ import annotations

import numpy as np

from data.order.shape import local_batch, node_size

# How far (in tokens per rank) a node's total may stay from the mean before it swaps. Smaller
# moves more samples between nodes for a smaller spread (scripts/simulate_balance.py).
NODE_TOLERANCE = 2
_BIG = np.iinfo(np.int64).max // 4  # above any load or excess, and safe to negate
_INT16_MAX = int(np.iinfo(np.int16).max)
# Caps that bound the work per step whatever the lengths are (a step never loops unbounded).
MAX_NODE_ROUNDS = 128
MAX_REFINE_ITERS = 64
# When the heaviest and lightest part of a node cannot swap, the heaviest tries this many of
# the lightest parts and the lightest this many of the heaviest (more: better, slower).
WIDE_PARTS = 3


def _shape(lengths: np.ndarray, world_size: int, ranks_per_node: int) -> tuple[int, int, int]:
    """(local batch B, ranks per node R, nodes N); R clamped to the world (data/order/shape.py)."""
    local = local_batch(lengths, world_size)
    per_node = node_size(world_size, ranks_per_node)
    return local, per_node, world_size // per_node


def assign_node_swap(lengths, world_size: int, ranks_per_node: int) -> np.ndarray:
    """Assignment (..., W, B) of the global batch lengths (..., W*B) (module docstring)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    local, per_node, nodes = _shape(lengths, world_size, ranks_per_node)
    flat = lengths.reshape(-1, nodes, per_node * local)  # (T, N, M) with M = R*B
    members = even_out_nodes(flat, per_node)  # (T, N, M) global indices, per node
    rows = _rows_of_nodes(
        flat.reshape(flat.shape[0], -1), members, np.arange(nodes), local, per_node
    )
    return rows.reshape(lengths.shape[:-1] + (world_size, local))


def node_swap_rows(
    lengths, world_size: int, ranks_per_node: int, rank: int
) -> tuple[np.ndarray, np.ndarray]:
    """The rows of assign_node_swap that rank `rank` needs to exchange: (ranks, rows (K, B)).

    Those of its own node's ranks (its row and the samples it keeps inside the node) and of
    every node that trains one of its samples. Step 1 runs whole, on every rank; steps 2 and 3
    only for these few nodes instead of all of them: the rows equal assign_node_swap's.
    lengths (W*B,) of one global batch.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    local, per_node, nodes = _shape(lengths, world_size, ranks_per_node)
    members = even_out_nodes(lengths.reshape(1, nodes, -1), per_node)[0]
    node_of = np.empty(lengths.size, dtype=np.int64)
    node_of[members.reshape(-1)] = np.repeat(np.arange(nodes), members.shape[1])
    needed = np.unique(np.append(node_of[rank * local : (rank + 1) * local], rank // per_node))
    rows = _rows_of_nodes(lengths[None], members[None, needed], needed, local, per_node)[0]
    return (needed[:, None] * per_node + np.arange(per_node)).reshape(-1), rows


def _rows_of_nodes(
    lengths: np.ndarray, members: np.ndarray, node_ids: np.ndarray, local: int, per_node: int
) -> np.ndarray:
    """Steps 2 and 3 for some nodes: (T, K*R, B) global indices each of their ranks trains.

    lengths (T, W*B); members (T, K, M) what each of the K nodes `node_ids` trains (step 1).
    Every node is handled on its own, so any subset gives the same rows as all of them.
    """
    trials, k, m = members.shape
    member_len = np.take_along_axis(lengths, members.reshape(trials, -1), axis=1)
    parts = partition_nodes(member_len.reshape(-1, m), per_node)  # (T*K, R, B)
    first_rank = np.tile(np.asarray(node_ids) * per_node, trials)  # (T*K,)
    reader = members.reshape(-1, m) // local - first_rank[:, None]  # rank within the node
    order = match_parts_to_ranks(parts, reader, per_node)
    parts = np.take_along_axis(parts, order[:, :, None], axis=1)
    rows = np.take_along_axis(members.reshape(-1, m), parts.reshape(parts.shape[0], -1), axis=1)
    return rows.reshape(trials, k * per_node, local)


# ---------------------------------------------------------------------------------------------
# 1. Node totals: a few long-for-short swaps between nodes
# ---------------------------------------------------------------------------------------------


def even_out_nodes(lengths: np.ndarray, per_node: int, tolerance: int | None = None) -> np.ndarray:
    """Swap samples between nodes until node totals sit near the mean.

    lengths (T, N, M): trial t's node n read samples t, n*M..(n+1)*M-1 (flat index within the
    trial). Returns members (T, N, M): the flat indices each node trains afterwards.
    Excesses are kept scaled by N (N * total - sum over nodes) so that they stay integers.
    """
    trials, nodes, m = lengths.shape
    members = np.broadcast_to(np.arange(nodes * m).reshape(nodes, m), lengths.shape).copy()
    held = lengths.copy()  # lengths of `members`
    excess = nodes * held.sum(axis=2)
    excess -= excess.sum(axis=1, keepdims=True) // nodes  # = N*S_n - sum(S): exact
    band = nodes * per_node * (NODE_TOLERANCE if tolerance is None else tolerance)
    if nodes < 2:
        return members
    giver = excess > 0
    for _ in range(MAX_NODE_ROUNDS):
        t, hi, lo, cap = _pair_nodes(excess, giver, band)
        if t.size == 0:
            break
        a, b, diff = _best_swaps(held[t, hi], held[t, lo], cap // nodes)
        ok = diff > 0
        if not ok.any():
            break
        t, hi, lo, a, b, diff = t[ok], hi[ok], lo[ok], a[ok], b[ok], diff[ok]
        for arr in (members, held):
            arr[t, hi, a], arr[t, lo, b] = arr[t, lo, b], arr[t, hi, a]
        excess[t, hi] -= nodes * diff
        excess[t, lo] += nodes * diff
    return members


def _pair_nodes(excess: np.ndarray, giver: np.ndarray, band: int):
    """This round's pairs: the k-th most loaded giver with the k-th least loaded taker.

    giver (T, N) bool: nodes that started above the mean; a giver only ever gives tokens away
    and a taker only takes, so nodes do not swing back and forth. Returns flat arrays (trial,
    giver, taker, scaled transfer allowed) of the pairs with a side outside the band, which
    may move at most to the mean. A node inside the band helps only once its whole side of
    the mean is inside (the tail: a last far node among nearly even ones); it may then go on
    to the band's far edge, so the far node can shed its excess in a few swaps. Earlier, such
    a node would only take small bites out of a far partner, each costing a swap.
    """
    hi = np.argsort(np.where(giver, -excess, _BIG), axis=1, kind="stable")  # ties: lower node
    lo = np.argsort(np.where(giver, _BIG, excess), axis=1, kind="stable")
    pairs = min(int(giver.sum(axis=1).max()), int((~giver).sum(axis=1).max()))
    hi, lo = hi[:, :pairs], lo[:, :pairs]
    trial = np.arange(excess.shape[0])[:, None]
    e_hi, e_lo = excess[trial, hi], excess[trial, lo]
    valid = giver[trial, hi] & ~giver[trial, lo]
    out_hi, out_lo = e_hi > band, e_lo < -band
    # the sorted order puts a side's nodes outside the band first: the first pair tells
    tail_hi, tail_lo = ~out_hi[:, :1], ~out_lo[:, :1]
    room_hi = np.where(out_hi, e_hi, np.where(tail_hi, e_hi + band, 0))
    room_lo = np.where(out_lo, -e_lo, np.where(tail_lo, band - e_lo, 0))
    cap = np.minimum(room_hi, room_lo)
    t, k = np.nonzero(valid & (out_hi | out_lo) & (cap > 0))
    return t, hi[t, k], lo[t, k], cap[t, k]


def _best_swaps(give: np.ndarray, take: np.ndarray, limit: np.ndarray):
    """Per pair p: positions (a, b) maximizing give[p, a] - take[p, b] subject to <= limit[p].

    give, take (P, M) lengths; limit (P,) >= 0. Returns (a, b, diff), diff <= 0 where no swap
    helps; ties go to the first position. Most pairs may move more than any one swap can:
    their best swap is simply the longest for the shortest.
    """
    rows = np.arange(give.shape[0])
    a, b = np.argmax(give, axis=1), np.argmin(take, axis=1)
    diff = give[rows, a] - take[rows, b]
    for search in (_exact_swaps, _best_swaps_below):
        tight = np.flatnonzero(diff > limit)  # still without a swap within the limit
        if tight.size:
            found = search(give[tight], take[tight], limit[tight])
            for arr, f in zip((a, b, diff), found):
                arr[tight] = f
    return a, b, diff


def _exact_swaps(give: np.ndarray, take: np.ndarray, limit: np.ndarray):
    """_best_swaps where a swap moves exactly `limit` tokens, as it usually can (one length
    table per pair instead of a sort and a search); other rows get diff above their limit.
    Picks what _best_swaps_below would: the first such a, the first b of that length."""
    p, m = give.shape
    rows = np.arange(p)[:, None]
    top = int(max(give.max(), take.max())) + 1
    present = np.zeros((p, top), dtype=bool)
    present[rows, take] = True
    want = give - limit[:, None]
    hit = present[rows, np.clip(want, 0, top - 1)] & (want >= 0)
    a = np.argmax(hit, axis=1)
    rows = rows[:, 0]
    b = np.argmax(take == want[rows, a][:, None], axis=1)
    found = hit[rows, a]
    return a, b, np.where(found, limit, _BIG)


def _best_swaps_below(give: np.ndarray, take: np.ndarray, limit: np.ndarray):
    """_best_swaps where the limit binds: for each a, the best b is the shortest take >=
    give[a] - limit, found by one searchsorted over all pairs at once (each row offset so that
    the flattened sorted rows stay sorted)."""
    p, m = give.shape
    top = int(max(give.max(), take.max())) + 2  # row offset: above any value or query
    order = _argsort_small(take)
    rows = np.arange(p)[:, None]
    sorted_take = take[rows, order]
    offset = (np.arange(p, dtype=np.int64) * top)[:, None]
    query = np.clip(give - limit[:, None], 0, top - 1) + offset
    pos = np.searchsorted((sorted_take + offset).ravel(), query.ravel()).reshape(p, m)
    pos -= (np.arange(p) * m)[:, None]
    found = pos < m
    pos = np.minimum(pos, m - 1)
    diff = np.where(found, give - sorted_take[rows, pos], -1)
    a = np.argmax(diff, axis=1)  # ties: the first position
    rows = rows[:, 0]
    return a, order[rows, pos[rows, a]], diff[rows, a]


def _argsort_small(values: np.ndarray) -> np.ndarray:
    """Stable ascending argsort along the last axis; a radix sort when values fit int16."""
    if values.size and values.min() >= 0 and values.max() <= _INT16_MAX:
        values = values.astype(np.int16)
    return np.argsort(values, axis=-1, kind="stable")


# ---------------------------------------------------------------------------------------------
# 2. Inside a node: equal-count parts with close token sums
# ---------------------------------------------------------------------------------------------


def partition_nodes(lengths: np.ndarray, parts: int) -> np.ndarray:
    """Split each row of lengths (K, M) into `parts` groups of M/parts positions, close sums.

    Returns (K, parts, M/parts) positions into the row.
    """
    return _refine_by_swaps(lengths, _deal_by_load(lengths, parts))


def _deal_by_load(lengths: np.ndarray, parts: int) -> np.ndarray:
    """Longest-first dealing with equal counts: the samples, longest first, go out in rounds of
    `parts`; in each round the longest goes to the lightest part so far, the next to the next
    lightest, and so on (ties by part index). Every part gets one sample per round. This is
    longest-processing-time-first under a count limit, one vectorized step per round instead of
    per sample; unlike a fixed snake it follows the loads, and leaves about 10 tokens between
    the parts of a node of 8 x 16 samples instead of about 70."""
    k, m = lengths.shape
    size = m // parts
    order = _argsort_small(lengths.max() - lengths).reshape(k, size, parts)  # longest first
    load = np.zeros((k, parts), dtype=np.int64)
    groups = np.empty((k, parts, size), dtype=np.int64)
    rows = np.arange(k)[:, None]
    for r in range(size):
        lightest = np.argsort(load, axis=1, kind="stable")
        items = order[:, r, :]
        groups[rows, lightest, r] = items
        load[rows, lightest] += lengths[rows, items]
    return groups


def _refine_by_swaps(lengths: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Swap samples between parts while the heaviest part gets lighter or the lightest heavier.

    Each round and row does one swap: the best one between the heaviest and the lightest part;
    when none helps, the best between the heaviest and any lighter part or between the lightest
    and any heavier one. A swap moving d tokens from a part to one lighter by `gap` helps when
    0 < d < gap, and most when d is near gap/2: its gain is min(d, gap - d). Each swap lowers
    the sum of squared part loads, so the rounds end; a row leaves once no swap helps or its
    loads differ by at most 1 (as even as integers allow).
    """
    k, parts, size = groups.shape
    held = np.take_along_axis(lengths, groups.reshape(k, -1), axis=1).reshape(groups.shape)
    # the swap search is memory-bound: the narrowest integers that hold gap - d exactly
    fits16 = held.size == 0 or held.sum(axis=2).max() + held.max() <= _INT16_MAX
    held = held.astype(np.int16 if fits16 else np.int32)
    live = np.arange(k)
    for _ in range(MAX_REFINE_ITERS):
        load = held[live].sum(axis=2)
        heavy, light = np.argmax(load, axis=1), np.argmin(load, axis=1)
        keep = load.max(axis=1) - load.min(axis=1) > 1
        live, load, heavy, light = live[keep], load[keep], heavy[keep], light[keep]
        if live.size == 0:
            break
        best = _swap_gain(held[live], heavy[:, None], light[:, None])
        stuck = np.flatnonzero(best[0] < 1)
        if stuck.size:
            p, q = _wide_pairs(load[stuck], min(WIDE_PARTS, parts))
            for arr, w in zip(best, _swap_gain(held[live[stuck]], p, q)):
                arr[stuck] = w
        gain, p, q, i, j = best
        ok = gain >= 1
        rows, p, q, i, j = live[ok], p[ok], q[ok], i[ok], j[ok]
        for arr in (groups, held):
            arr[rows, p, i], arr[rows, q, j] = arr[rows, q, j], arr[rows, p, i]
        live = rows
    return groups


def _wide_pairs(load: np.ndarray, width: int):
    """Candidate (from, to) parts (L, 2*width): the heaviest part to each of the `width`
    lightest, then each of the `width` heaviest to the lightest (load order, ties by index)."""
    order = np.argsort(load, axis=1, kind="stable")
    light, heavy = order[:, :width], order[:, ::-1][:, :width]
    p = np.concatenate([np.repeat(heavy[:, :1], width, axis=1), heavy], axis=1)
    q = np.concatenate([light, np.repeat(light[:, :1], width, axis=1)], axis=1)
    return p, q


def _swap_gain(held: np.ndarray, p: np.ndarray, q: np.ndarray):
    """Best swap of each row over candidate part pairs (p[:, c] gives to q[:, c]).

    held (L, parts, size) lengths; p, q (L, C). A swap gives position i of part p for position
    j of part q; gain = min(d, gap - d) with d the tokens it moves and gap = load p - load q,
    < 1 when it does not narrow the two. Returns (gain, p, q, i, j), each (L,), of the best
    candidate; ties go to the first (c, i, j).
    """
    rows = np.arange(held.shape[0])[:, None]
    a, b = held[rows, p], held[rows, q]  # (L, C, size)
    gap = (a.sum(axis=2) - b.sum(axis=2)).astype(held.dtype)  # sum() widens small ints
    d = a[:, :, :, None] - b[:, :, None, :]
    gain = np.minimum(d, gap[:, :, None, None] - d).reshape(rows.size, -1)
    flat = np.argmax(gain, axis=1)
    c, ij = np.divmod(flat, held.shape[2] ** 2)
    i, j = np.divmod(ij, held.shape[2])
    r = rows[:, 0]
    return gain[r, flat], p[r, c], q[r, c], i, j


# ---------------------------------------------------------------------------------------------
# 3. Which rank of the node trains which part
# ---------------------------------------------------------------------------------------------


def match_parts_to_ranks(parts: np.ndarray, reader: np.ndarray, ranks: int) -> np.ndarray:
    """order (K, R): order[k, r] = the part rank r of node k trains.

    parts (K, R, B) positions into the node's members; reader (K, M) the node-local rank that
    read each member (outside 0..R-1 for samples from other nodes). Greedy: repeatedly the
    (part, rank) pair sharing the most samples, lowest flat index on ties.
    """
    k = parts.shape[0]
    read_by = np.take_along_axis(reader, parts.reshape(k, -1), axis=1).reshape(parts.shape)
    overlap = (read_by[:, :, :, None] == np.arange(ranks)).sum(axis=2)  # (K, part, rank)
    order = np.empty((k, ranks), dtype=np.int64)
    rows = np.arange(k)
    taken = -1
    for _ in range(ranks):
        flat = np.argmax(overlap.reshape(k, -1), axis=1)
        part, rank = np.divmod(flat, ranks)
        order[rows, rank] = part
        overlap[rows, part, :] = taken
        overlap[rows, :, rank] = taken
    return order
