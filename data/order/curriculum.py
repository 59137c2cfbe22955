"""Bucket-order curricula ([Zhang], section III): which length bucket each training step uses.

Every curriculum answers `next_bucket(step) -> int` and takes `update(bucket, loss_before,
loss_after=None, step=None)` after the step (a no-op for the fixed orders), and saves its
position with `state_dict()/load_state_dict()`. Build one with
`make_curriculum(name, num_buckets, seed, **opts)` (data/order/curricula.py, the registry):

    increasing       rounds over the buckets, shortest first; bucket b gets batches_per_visit[b]
    decreasing       consecutive steps per visit. The same, longest first.
    random           The same, in a fresh seeded permutation of the buckets each round.
    shuffled         Not in [Zhang]: each round is a seeded random permutation of its
                     batches (bucket b appears batches_per_visit[b] times), so consecutive
                     steps are independent draws. With proportional visits this is plain
                     shuffled training with length-homogeneous batches (see docs/curriculum.md
                     on the MLPerf division question).
    loss_controlled  Algorithm 1: stay on a bucket until the mean training loss of its last
                     `window` batches is below its target, then move to the next bucket;
                     after the last bucket a new round starts.
    exp3s            Algorithm 2: an Exp3.S bandit (equations (1)-(5)) picks the bucket; its
                     reward is a loss reduction, mapped to [-1, 1] with the 20%/80% quantiles
                     of recent rewards: on the trained batch itself ("prediction_gain", needs
                     a second forward after the step) or since the bucket's previous batch
                     ("visit_gain", no extra forward: what the training pipeline supports).
                     In data/order/exp3s.py.

Agreement across ranks without communication: the fixed orders are pure functions of (seed,
step). loss_controlled and exp3s depend on losses, so every rank must feed them the same
numbers, in the same order: the globally all-reduced losses, which the all-reduce returns
identically to every rank. Their draws are then identical too (exp3s draws with a generator
seeded by (seed, step)). `fingerprint()` is a cheap check of that agreement (compare it across
ranks at eval points, not per step).

Prefetching: a data pipeline that prepares step t+1 before step t's loss is known calls
`next_bucket(t+1)` before `update(t)`. The stateful curricula record each draw until its update
arrives (`update` consumes the oldest pending draw unless `step` is given), and asking again for
a recorded step returns the recorded bucket, so a checkpoint taken after update(t) that still
holds the draws of t+1.. resumes with exactly the same buckets.

MLPerf division: every curriculum is open division (`curricula.division_error`;
docs/curriculum.md).
"""

from __future__ import annotations

import json
import zlib
from collections import deque
from typing import Any, Sequence

import numpy as np

STATE_VERSION = 1


# --------------------------------------------------------------------------------------------
# Base
# --------------------------------------------------------------------------------------------


class Curriculum:
    """Common interface. `uses_losses`: update() matters; `needs_loss_after`: the trainer must
    evaluate the batch again after the optimizer step to supply loss_after."""

    name = "curriculum"
    uses_losses = False
    needs_loss_after = False

    def __init__(self, num_buckets: int, seed: int):
        if num_buckets < 1:
            raise ValueError(f"{self.name}: num_buckets={num_buckets} must be >= 1")
        self.num_buckets, self.seed = num_buckets, seed

    def next_bucket(self, step: int) -> int:
        raise NotImplementedError

    def update(
        self,
        bucket: int,
        loss_before: float,
        loss_after: float | None = None,
        step: int | None = None,
    ) -> None:
        """The losses of the step that trained `bucket`: the draw of `step`, else the oldest
        pending one. Fixed orders ignore them; kept so a trainer can call every curriculum
        alike."""
        pending = getattr(self, "pending", None)
        if pending is None:
            return  # a fixed order: nothing to learn
        if self.needs_loss_after and loss_after is None:
            raise ValueError(
                f"{self.name}: update() needs loss_after (the batch's loss after the step)"
            )
        _, drawn, prob = pending.pop(bucket, step)
        self._learn(drawn, prob, float(loss_before), loss_after)

    def _learn(
        self, bucket: int, prob: float, loss_before: float, loss_after: float | None
    ) -> None:
        """A loss-driven curriculum's use of one update: the draw's bucket and probability,
        the batch's losses."""
        raise NotImplementedError

    def update_step(self, step: int, loss_before: float, loss_after: float | None = None) -> None:
        """update() for the draw of `step`, whose bucket the curriculum recorded itself (a
        pipeline that learns the loss of a step long after drawing it need not keep it)."""
        pending = getattr(self, "pending", None)
        if pending is None:
            return  # a fixed order: nothing to update
        item = pending.find(step)
        if item is None:
            raise ValueError(
                f"{self.name}: update_step({step}) without a pending draw for that "
                f"step (pending: {[i[0] for i in pending.items]})"
            )
        self.update(item[1], loss_before, loss_after, step=step)

    def state_dict(self) -> dict[str, Any]:
        return {"version": STATE_VERSION, "name": self.name, "config": self.config()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("version") != STATE_VERSION or state.get("name") != self.name:
            raise ValueError(
                f"{self.name}: state of {state.get('name')!r} version "
                f"{state.get('version')} cannot be loaded"
            )
        if state["config"] != self.config():
            raise ValueError(
                f"{self.name}: state was saved with config {state['config']}, "
                f"this curriculum has {self.config()}"
            )

    def config(self) -> dict[str, Any]:
        """The settings that define the schedule (JSON-safe)."""
        return {"num_buckets": self.num_buckets, "seed": self.seed}

    def describe(self) -> str:
        settings = ", ".join(f"{k}={v}" for k, v in self.config().items())
        return f"{self.name}({settings})"

    def fingerprint(self) -> int:
        """crc32 of the state: equal on all ranks iff they agree on the schedule so far."""
        return zlib.crc32(json.dumps(self.state_dict(), sort_keys=True).encode())


def _check_step(step: int) -> int:
    if step < 0:
        raise ValueError(f"step={step} must be >= 0")
    return int(step)


# --------------------------------------------------------------------------------------------
# Fixed orders: increasing, decreasing, random
# --------------------------------------------------------------------------------------------


def proportional_visits(bucket_sizes: Sequence[int], batches_per_round: int) -> list[int]:
    """Batches per bucket (M,) summing to batches_per_round, proportional to bucket sizes.

    Largest-remainder rounding, and at least one batch for every non-empty bucket, so a round
    trains (about) the data's own length mix. Use the global sizes (summed over ranks), so all
    ranks compute the same visits. With batches_per_round = pool size / global batch one round
    is about one epoch.
    """
    sizes = np.asarray(bucket_sizes, dtype=np.float64)
    nonempty = int((sizes > 0).sum())
    if sizes.ndim != 1 or nonempty == 0 or np.any(sizes < 0):
        raise ValueError(
            f"proportional_visits: bucket sizes {list(bucket_sizes)} need at least "
            f"one positive entry and no negative one"
        )
    if batches_per_round < nonempty:
        raise ValueError(
            f"batches_per_round={batches_per_round} is less than the {nonempty} non-empty buckets"
        )
    ideal = sizes / sizes.sum() * batches_per_round
    counts = np.where(sizes > 0, np.maximum(np.floor(ideal), 1), 0).astype(np.int64)
    # hand out (or take back) the difference by remainder; ties go to the lower bucket
    order = np.argsort(-(ideal - counts), kind="stable")
    diff = batches_per_round - int(counts.sum())
    i = 0
    while diff != 0:
        b = order[i % order.size] if diff > 0 else order[::-1][i % order.size]
        if diff > 0 and sizes[b] > 0:
            counts[b] += 1
            diff -= 1
        elif diff < 0 and counts[b] > 1:
            counts[b] -= 1
            diff += 1
        i += 1
    return counts.tolist()


ORDERS = ("increasing", "decreasing", "random", "shuffled")


class OrderedCurriculum(Curriculum):
    """Rounds over the buckets in a fixed or per-round random order.

    batches_per_visit: one int for every bucket (the "fixed number of batches per bucket per
    round") or a list (M,) such as `proportional_visits(...)`. Round r is
    sum(batches_per_visit) steps long; within it the buckets come in `round_order(r)`, each for
    batches_per_visit[b] consecutive steps ("shuffled": the round's steps in a seeded random
    order instead). A pure function of (seed, step): no state to save beyond the settings, and
    no communication across ranks.
    """

    def __init__(
        self, name: str, num_buckets: int, seed: int, batches_per_visit: int | Sequence[int] = 1
    ):
        if name not in ORDERS:
            raise ValueError(f"OrderedCurriculum: unknown order {name!r}")
        self.name = name
        super().__init__(num_buckets, seed)
        visits = np.broadcast_to(np.asarray(batches_per_visit, dtype=np.int64), (num_buckets,))
        if np.any(visits < 0) or visits.sum() == 0:
            raise ValueError(
                f"{name}: batches_per_visit={batches_per_visit} must be >= 0 with "
                f"at least one bucket visited"
            )
        self.visits = visits.copy()
        self.round_length = int(visits.sum())
        self._round_cache: tuple[int, np.ndarray] | None = None  # (round, (L,) buckets)

    def round_order(self, round_index: int) -> np.ndarray:
        """(M,) buckets in the order of round `round_index` (not used by "shuffled")."""
        if self.name == "increasing":
            return np.arange(self.num_buckets)
        if self.name == "decreasing":
            return np.arange(self.num_buckets)[::-1].copy()
        return np.random.default_rng([self.seed, round_index]).permutation(self.num_buckets)

    def round_steps(self, round_index: int) -> np.ndarray:
        """(round_length,) the bucket of every step of round `round_index` (cached)."""
        if self._round_cache is None or self._round_cache[0] != round_index:
            if self.name == "shuffled":
                rng = np.random.default_rng([self.seed, round_index])
                steps = rng.permutation(np.repeat(np.arange(self.num_buckets), self.visits))
            else:
                order = self.round_order(round_index)
                steps = np.repeat(order, self.visits[order])
            self._round_cache = (round_index, steps)
        return self._round_cache[1]

    def next_bucket(self, step: int) -> int:
        round_index, position = divmod(_check_step(step), self.round_length)
        return int(self.round_steps(round_index)[position])

    def config(self) -> dict[str, Any]:
        return {**super().config(), "batches_per_visit": self.visits.tolist()}


# --------------------------------------------------------------------------------------------
# Pending draws (stateful curricula under a prefetching pipeline)
# --------------------------------------------------------------------------------------------


class _PendingDraws:
    """Draws made but not yet updated, oldest first: [step, bucket, probability].

    A pipeline prefetches a few steps, never hundreds: more pending draws than MAX_PENDING means
    update() is not being called, and the curriculum would silently stop adapting.
    """

    MAX_PENDING = 256

    def __init__(self):
        self.items: list[list] = []

    def find(self, step: int) -> list | None:
        for item in self.items:
            if item[0] == step:
                return item
        return None

    def add(self, step: int, bucket: int, prob: float) -> None:
        if self.items and step <= self.items[-1][0]:
            raise ValueError(
                f"next_bucket({step}) after next_bucket({self.items[-1][0]}): "
                f"steps must be asked for in increasing order"
            )
        if len(self.items) >= self.MAX_PENDING:
            raise ValueError(
                f"{len(self.items)} draws without update(): a loss-driven "
                f"curriculum needs update() after every step"
            )
        self.items.append([int(step), int(bucket), float(prob)])

    def pop(self, bucket: int, step: int | None) -> list:
        """The draw an update refers to: `step`'s, or the oldest; its bucket must match."""
        if not self.items:
            raise ValueError(f"update(bucket={bucket}) without a pending next_bucket() draw")
        item = self.items[0] if step is None else self.find(step)
        if item is None:
            raise ValueError(
                f"update(step={step}): no pending draw for that step "
                f"(pending: {[i[0] for i in self.items]})"
            )
        if item[1] != bucket:
            raise ValueError(
                f"update(bucket={bucket}) for step {item[0]}, which drew bucket "
                f"{item[1]}: updates must follow the draws"
            )
        self.items.remove(item)
        return item


# --------------------------------------------------------------------------------------------
# Algorithm 1: loss-controlled
# --------------------------------------------------------------------------------------------


class LossControlledCurriculum(Curriculum):
    """[Zhang], Algorithm 1: train bucket i until its loss is below targets[i], then i+1.

    "Its loss" is the mean training loss (loss_before, the loss the step optimized, all-reduced)
    of the last `window` batches of the current visit, checked after every update once the
    visit has `window` batches. A visit lasts at least max(min_batches, window) batches unless
    `max_batches` (None: no cap; a cap keeps an unreachable target from stalling the run on one
    bucket) ends it first. After the last bucket of `order` a new round
    starts with the same targets, so in a long run later rounds visit each bucket briefly unless
    its loss has risen again.
    """

    name = "loss_controlled"
    uses_losses = True

    def __init__(
        self,
        num_buckets: int,
        seed: int,
        targets: float | Sequence[float] = 2.0,
        order: str = "increasing",
        window: int = 10,
        min_batches: int = 1,
        max_batches: int | None = None,
    ):
        super().__init__(num_buckets, seed)
        self.targets = np.broadcast_to(np.asarray(targets, dtype=np.float64), (num_buckets,)).copy()
        if order not in ("increasing", "decreasing"):
            raise ValueError(f"loss_controlled: order={order!r}; expected increasing or decreasing")
        if window < 1 or min_batches < 1 or (max_batches is not None and max_batches < min_batches):
            raise ValueError(
                f"loss_controlled: need window >= 1, min_batches >= 1 and "
                f"max_batches >= min_batches (got {window}, {min_batches}, "
                f"{max_batches})"
            )
        self.order_name, self.window = order, window
        self.min_batches, self.max_batches = min_batches, max_batches
        self.order = (
            np.arange(num_buckets) if order == "increasing" else np.arange(num_buckets)[::-1].copy()
        )
        self.position = 0  # index into self.order of the current bucket
        self.round = 0
        self.visit_batches = 0  # updates received for the current visit
        self.recent: deque[float] = deque(maxlen=window)
        self.pending = _PendingDraws()
        self.visit_log: list[list[int]] = []  # [bucket, batches] of every finished visit

    @property
    def current_bucket(self) -> int:
        return int(self.order[self.position])

    def next_bucket(self, step: int) -> int:
        step = _check_step(step)
        recorded = self.pending.find(step)
        if recorded is not None:
            return recorded[1]
        self.pending.add(step, self.current_bucket, 1.0)
        return self.current_bucket

    def _learn(
        self, bucket: int, prob: float, loss_before: float, loss_after: float | None
    ) -> None:
        if bucket != self.current_bucket:
            return  # a late update from the previous visit (prefetch lag): not this bucket's
        self.visit_batches += 1
        self.recent.append(loss_before)
        if self._visit_done():
            self._advance()

    def _visit_done(self) -> bool:
        if self.visit_batches < self.min_batches:
            return False
        if self.max_batches is not None and self.visit_batches >= self.max_batches:
            return True
        # a full window only: the mean of fewer batches is noisier than the setting promises
        full = len(self.recent) == self.window
        return full and float(np.mean(self.recent)) < self.targets[self.current_bucket]

    def _advance(self) -> None:
        self.visit_log.append([self.current_bucket, self.visit_batches])
        self.position += 1
        if self.position == self.num_buckets:
            self.position, self.round = 0, self.round + 1
        self.visit_batches = 0
        self.recent.clear()

    def config(self) -> dict[str, Any]:
        return {
            **super().config(),
            "targets": self.targets.tolist(),
            "order": self.order_name,
            "window": self.window,
            "min_batches": self.min_batches,
            "max_batches": self.max_batches,
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "position": self.position,
            "round": self.round,
            "visit_batches": self.visit_batches,
            "recent": list(self.recent),
            "pending": [list(i) for i in self.pending.items],
            "visit_log": [list(v) for v in self.visit_log],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.position, self.round = int(state["position"]), int(state["round"])
        self.visit_batches = int(state["visit_batches"])
        self.recent = deque((float(x) for x in state["recent"]), maxlen=self.window)
        self.pending.items = [list(i) for i in state["pending"]]
        self.visit_log = [list(v) for v in state["visit_log"]]

    def describe(self) -> str:
        return (
            f"{super().describe()} at bucket {self.current_bucket} (round {self.round}, "
            f"{self.visit_batches} batches into the visit)"
        )
