"""Bucket-order curricula (seed 002, section III): which length bucket each training step uses.

Every curriculum answers `next_bucket(step) -> int` and takes `update(bucket, loss_before,
loss_after=None, step=None)` after the step (a no-op for the fixed orders), and saves its
position with `state_dict()/load_state_dict()`. Build one with
`make_curriculum(name, num_buckets, seed, **opts)`:

    increasing       rounds over the buckets, shortest first; bucket b gets batches_per_visit[b]
    decreasing       consecutive steps per visit. The same, longest first.
    random           The same, in a fresh seeded permutation of the buckets each round.
    shuffled         Not in seed 002: each round is a seeded random permutation of its
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

MLPerf division: every curriculum is open division (`division_error`; docs/curriculum.md).
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

    def update(self, bucket: int, loss_before: float, loss_after: float | None = None,
               step: int | None = None) -> None:
        """Fixed orders ignore losses; kept so a trainer can call every curriculum alike."""

    def update_step(self, step: int, loss_before: float, loss_after: float | None = None) -> None:
        """update() for the draw of `step`, whose bucket the curriculum recorded itself (a
        pipeline that learns the loss of a step long after drawing it need not keep it)."""
        pending = getattr(self, "pending", None)
        if pending is None:
            return  # a fixed order: nothing to update
        item = pending.find(step)
        if item is None:
            raise ValueError(f"{self.name}: update_step({step}) without a pending draw for that "
                             f"step (pending: {[i[0] for i in pending.items]})")
        self.update(item[1], loss_before, loss_after, step=step)

    def state_dict(self) -> dict[str, Any]:
        return {"version": STATE_VERSION, "name": self.name, "config": self.config()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("version") != STATE_VERSION or state.get("name") != self.name:
            raise ValueError(f"{self.name}: state of {state.get('name')!r} version "
                             f"{state.get('version')} cannot be loaded")
        if state["config"] != self.config():
            raise ValueError(f"{self.name}: state was saved with config {state['config']}, "
                             f"this curriculum has {self.config()}")

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
        raise ValueError(f"proportional_visits: bucket sizes {list(bucket_sizes)} need at least "
                         f"one positive entry and no negative one")
    if batches_per_round < nonempty:
        raise ValueError(f"batches_per_round={batches_per_round} is less than the "
                         f"{nonempty} non-empty buckets")
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

    def __init__(self, name: str, num_buckets: int, seed: int,
                 batches_per_visit: int | Sequence[int] = 1):
        if name not in ORDERS:
            raise ValueError(f"OrderedCurriculum: unknown order {name!r}")
        self.name = name
        super().__init__(num_buckets, seed)
        visits = np.broadcast_to(np.asarray(batches_per_visit, dtype=np.int64), (num_buckets,))
        if np.any(visits < 0) or visits.sum() == 0:
            raise ValueError(f"{name}: batches_per_visit={batches_per_visit} must be >= 0 with "
                             f"at least one bucket visited")
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
            raise ValueError(f"next_bucket({step}) after next_bucket({self.items[-1][0]}): "
                             f"steps must be asked for in increasing order")
        if len(self.items) >= self.MAX_PENDING:
            raise ValueError(f"{len(self.items)} draws without update(): a loss-driven "
                             f"curriculum needs update() after every step")
        self.items.append([int(step), int(bucket), float(prob)])

    def pop(self, bucket: int, step: int | None) -> list:
        """The draw an update refers to: `step`'s, or the oldest; its bucket must match."""
        if not self.items:
            raise ValueError(f"update(bucket={bucket}) without a pending next_bucket() draw")
        item = self.items[0] if step is None else self.find(step)
        if item is None:
            raise ValueError(f"update(step={step}): no pending draw for that step "
                             f"(pending: {[i[0] for i in self.items]})")
        if item[1] != bucket:
            raise ValueError(f"update(bucket={bucket}) for step {item[0]}, which drew bucket "
                             f"{item[1]}: updates must follow the draws")
        self.items.remove(item)
        return item


# --------------------------------------------------------------------------------------------
# Algorithm 1: loss-controlled
# --------------------------------------------------------------------------------------------

class LossControlledCurriculum(Curriculum):
    """Seed 002, Algorithm 1: train bucket i until its loss is below targets[i], then i+1.

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

    def __init__(self, num_buckets: int, seed: int, targets: float | Sequence[float] = 2.0,
                 order: str = "increasing", window: int = 10, min_batches: int = 1,
                 max_batches: int | None = None):
        super().__init__(num_buckets, seed)
        self.targets = np.broadcast_to(np.asarray(targets, dtype=np.float64),
                                       (num_buckets,)).copy()
        if order not in ("increasing", "decreasing"):
            raise ValueError(f"loss_controlled: order={order!r}; expected increasing or "
                             f"decreasing")
        if window < 1 or min_batches < 1 or (max_batches is not None
                                             and max_batches < min_batches):
            raise ValueError(f"loss_controlled: need window >= 1, min_batches >= 1 and "
                             f"max_batches >= min_batches (got {window}, {min_batches}, "
                             f"{max_batches})")
        self.order_name, self.window = order, window
        self.min_batches, self.max_batches = min_batches, max_batches
        self.order = (np.arange(num_buckets) if order == "increasing"
                      else np.arange(num_buckets)[::-1].copy())
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

    def update(self, bucket: int, loss_before: float, loss_after: float | None = None,
               step: int | None = None) -> None:
        self.pending.pop(bucket, step)
        if bucket != self.current_bucket:
            return  # a late update from the previous visit (prefetch lag): not this bucket's
        self.visit_batches += 1
        self.recent.append(float(loss_before))
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
        return {**super().config(), "targets": self.targets.tolist(), "order": self.order_name,
                "window": self.window, "min_batches": self.min_batches,
                "max_batches": self.max_batches}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "position": self.position, "round": self.round,
                "visit_batches": self.visit_batches, "recent": list(self.recent),
                "pending": [list(i) for i in self.pending.items],
                "visit_log": [list(v) for v in self.visit_log]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.position, self.round = int(state["position"]), int(state["round"])
        self.visit_batches = int(state["visit_batches"])
        self.recent = deque((float(x) for x in state["recent"]), maxlen=self.window)
        self.pending.items = [list(i) for i in state["pending"]]
        self.visit_log = [list(v) for v in state["visit_log"]]

    def describe(self) -> str:
        return (f"{super().describe()} at bucket {self.current_bucket} (round {self.round}, "
                f"{self.visit_batches} batches into the visit)")


# --------------------------------------------------------------------------------------------
# Algorithm 2: Exp3.S bandit
# --------------------------------------------------------------------------------------------

def exp3s_probabilities(weights: np.ndarray, gamma: float) -> np.ndarray:
    """Equation (1): pi (K,) = (1 - gamma) softmax(weights) + gamma / K, weights (K,)."""
    w = np.asarray(weights, dtype=np.float64)
    e = np.exp(w - w.max())  # shift-invariant; keeps exp() finite for large weights
    return (1.0 - gamma) * e / e.sum() + gamma / w.size


def exp3s_update(weights: np.ndarray, arm: int, reward: float, prob: float, eta: float,
                 alpha: float) -> np.ndarray:
    """Equations (2), (3), (5): the weights (K,) after reward r in [-1, 1] for `arm`.

    r~_i = r 1(i = arm) / pi(arm)   with pi(arm) the probability the arm was drawn with,
    v_i  = w_i + eta r~_i,
    w'_i = log[(1 - alpha) e^{v_i} + alpha / (K - 1) sum_{j != i} e^{v_j}].

    The log spans both terms, as in Graves et al. 2017 (seed 002's [4]); seed 002's typeset
    equation (2) closes the bracket before the sharing term, which would add a probability-like
    quantity to a log-weight. Computed with the max of v factored out (no overflow).
    """
    v = np.asarray(weights, dtype=np.float64).copy()
    k = v.size
    v[arm] += eta * reward / prob
    if k == 1:
        return v
    m = v.max()
    e = np.exp(v - m)
    others = e.sum() - e  # sum over j != i; exact enough for K of a few dozen
    return m + np.log((1.0 - alpha) * e + alpha / (k - 1) * others)


class QuantileRewardScaler:
    """Equation (4): raw reward -> [-1, 1] by the running low/high quantiles of raw rewards.

    The history is the last `window` raw rewards *including* the current one (so the first
    reward maps to 0); quantiles by numpy's default linear interpolation. Below q_lo -> -1,
    above q_hi -> +1, in between linear. When q_lo == q_hi, a reward equal to them maps to 0.
    """

    def __init__(self, window: int = 1000, low: float = 0.2, high: float = 0.8):
        if window < 1 or not 0.0 <= low < high <= 1.0:
            raise ValueError(f"reward scaler: need window >= 1 and 0 <= low < high <= 1 (got "
                             f"{window}, {low}, {high})")
        self.window, self.low, self.high = window, low, high
        self.history: deque[float] = deque(maxlen=window)

    def scale(self, raw: float) -> float:
        self.history.append(float(raw))
        q_lo, q_hi = np.quantile(np.asarray(self.history), [self.low, self.high])
        return map_reward(float(raw), float(q_lo), float(q_hi))


def map_reward(raw: float, q_lo: float, q_hi: float) -> float:
    """Equation (4) for given quantiles."""
    if raw < q_lo:
        return -1.0
    if raw > q_hi:
        return 1.0
    if q_hi == q_lo:
        return 0.0
    return 2.0 * (raw - q_lo) / (q_hi - q_lo) - 1.0


EXP3S_REWARDS = ("prediction_gain", "visit_gain")


class Exp3SCurriculum(Curriculum):
    """Seed 002, Algorithm 2 (after Graves et al. 2017): an Exp3.S bandit over the buckets.

    Per step t: pi_t from the weights (eq. 1); bucket ~ pi_t, drawn with a generator seeded by
    (seed, t); after training, a raw reward r^ (below); eq. (4) maps it to [-1, 1] with the
    20%/80% quantiles of the last `window` raw rewards; eqs. (2), (3), (5) update the weights
    with the probability the bucket was drawn with.

    reward, the raw r^ (all losses global, i.e. all-reduced):
      "prediction_gain"  loss_before - loss_after of the same batch, before and after this
                         step's update (Graves' prediction gain; seed 002's "loss reduction").
                         Needs loss_after: a second forward of the batch after the step.
      "visit_gain"       the bucket's previous batch loss minus this batch's loss (both
                         loss_before): how much the bucket's loss fell since it was last
                         trained, as in Matiisen et al.'s teacher-student curricula. No extra
                         forward; the first batch of each bucket has no gain and leaves the
                         weights alone. Noisier: two different batches are compared.

    alpha: the weight-sharing term, a constant, or "1/t" for seed 002's alpha_t = 1/t, where t
    is the index of the weights being computed (the initial weights are w_1, so the first
    update uses 1/2).
    """

    name = "exp3s"
    uses_losses = True

    def __init__(self, num_buckets: int, seed: int, eta: float = 0.1, gamma: float = 0.1,
                 alpha: float | str = 0.01, window: int = 1000, low_quantile: float = 0.2,
                 high_quantile: float = 0.8, reward: str = "prediction_gain"):
        super().__init__(num_buckets, seed)
        if not 0.0 < gamma <= 1.0 or eta <= 0.0:
            raise ValueError(f"exp3s: need 0 < gamma <= 1 and eta > 0 (got {gamma}, {eta})")
        if alpha != "1/t" and not 0.0 <= float(alpha) <= 1.0:
            raise ValueError(f"exp3s: alpha={alpha!r} must be in [0, 1] or '1/t'")
        if reward not in EXP3S_REWARDS:
            raise ValueError(f"exp3s: reward={reward!r}; choose from {EXP3S_REWARDS}")
        self.eta, self.gamma, self.alpha = float(eta), float(gamma), alpha
        self.reward = reward
        self.needs_loss_after = reward == "prediction_gain"
        self.scaler = QuantileRewardScaler(window, low_quantile, high_quantile)
        self.weights = np.zeros(num_buckets, dtype=np.float64)
        self.updates = 0
        self.pending = _PendingDraws()
        self.last_loss: list[float | None] = [None] * num_buckets  # visit_gain: per bucket

    def probabilities(self) -> np.ndarray:
        """(K,) the current pi (eq. 1)."""
        return exp3s_probabilities(self.weights, self.gamma)

    def next_bucket(self, step: int) -> int:
        step = _check_step(step)
        recorded = self.pending.find(step)
        if recorded is not None:
            return recorded[1]
        probs = self.probabilities()
        u = np.random.default_rng([self.seed, step]).random()
        arm = min(int(np.searchsorted(np.cumsum(probs), u, side="right")), self.num_buckets - 1)
        self.pending.add(step, arm, probs[arm])
        return arm

    def update(self, bucket: int, loss_before: float, loss_after: float | None = None,
               step: int | None = None) -> None:
        if self.needs_loss_after and loss_after is None:
            raise ValueError("exp3s: update() needs loss_after (the batch's loss after the step)")
        _, arm, prob = self.pending.pop(bucket, step)
        raw = self._raw_reward(arm, float(loss_before), loss_after)
        if raw is not None:
            self.apply_reward(arm, self.scaler.scale(raw), prob)

    def _raw_reward(self, arm: int, loss_before: float, loss_after: float | None):
        """r^ of this update, or None (visit_gain on a bucket's first batch)."""
        if self.reward == "prediction_gain":
            return loss_before - float(loss_after)
        previous, self.last_loss[arm] = self.last_loss[arm], loss_before
        return None if previous is None else previous - loss_before

    def apply_reward(self, arm: int, reward: float, prob: float) -> None:
        """Eqs. (2), (3), (5) with an already mapped reward and the arm's draw probability."""
        self.updates += 1
        alpha = 1.0 / (self.updates + 1) if self.alpha == "1/t" else float(self.alpha)
        self.weights = exp3s_update(self.weights, arm, reward, prob, self.eta, alpha)

    def config(self) -> dict[str, Any]:
        s = self.scaler
        return {**super().config(), "eta": self.eta, "gamma": self.gamma, "alpha": self.alpha,
                "window": s.window, "low_quantile": s.low, "high_quantile": s.high,
                "reward": self.reward}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "weights": self.weights.tolist(),
                "updates": self.updates, "history": list(self.scaler.history),
                "pending": [list(i) for i in self.pending.items],
                "last_loss": list(self.last_loss)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        weights = np.asarray(state["weights"], dtype=np.float64)
        if weights.shape != (self.num_buckets,):
            raise ValueError(f"exp3s: saved weights {weights.shape}, expected "
                             f"({self.num_buckets},)")
        self.weights, self.updates = weights, int(state["updates"])
        self.scaler.history = deque((float(x) for x in state["history"]),
                                    maxlen=self.scaler.window)
        self.pending.items = [list(i) for i in state["pending"]]
        self.last_loss = [None if x is None else float(x) for x in state["last_loss"]]

    def describe(self) -> str:
        probs = ", ".join(f"{p:.3f}" for p in self.probabilities())
        return f"{super().describe()} after {self.updates} updates, pi=[{probs}]"


# --------------------------------------------------------------------------------------------
# Factory
# --------------------------------------------------------------------------------------------

CURRICULA = (*ORDERS, "loss_controlled", "exp3s")


def make_curriculum(name: str, num_buckets: int, seed: int, **opts) -> Curriculum:
    """A curriculum by name (CURRICULA); opts are the class's keyword settings."""
    if name in ORDERS:
        cls, args = OrderedCurriculum, (name, num_buckets, seed)
    elif name == "loss_controlled":
        cls, args = LossControlledCurriculum, (num_buckets, seed)
    elif name == "exp3s":
        cls, args = Exp3SCurriculum, (num_buckets, seed)
    else:
        raise ValueError(f"unknown curriculum {name!r}; choose from {', '.join(CURRICULA)}")
    try:
        return cls(*args, **opts)
    except TypeError as err:  # an option the curriculum does not have
        raise ValueError(f"curriculum {name!r}: {err}") from None


# --------------------------------------------------------------------------------------------
# From the run's config (bert.config.DataConfig), and the MLPerf division
# --------------------------------------------------------------------------------------------

def curriculum_from_config(data_cfg: Any, bucket_shares: Sequence[float],
                           seed: int) -> Curriculum:
    """The curriculum a DataConfig asks for (its `curriculum` is not "none").

    bucket_shares (M,): each bucket's share of the data, the same on every rank; the fixed
    orders split `curriculum_round_batches` steps per round in proportion to it.
    """
    d, m = data_cfg, len(bucket_shares)
    if d.curriculum in ORDERS:
        visits = proportional_visits(bucket_shares, d.curriculum_round_batches)
        return make_curriculum(d.curriculum, m, seed, batches_per_visit=visits)
    if d.curriculum == "loss_controlled":
        return make_curriculum(d.curriculum, m, seed, targets=d.loss_targets,
                               window=d.curriculum_loss_window,
                               max_batches=d.curriculum_max_batches or None)
    alpha = d.curriculum_alpha if d.curriculum_alpha == "1/t" else float(d.curriculum_alpha)
    return make_curriculum(d.curriculum, m, seed, eta=d.curriculum_eta,
                           gamma=d.curriculum_gamma, alpha=alpha, reward=d.curriculum_reward)


def division_error(curriculum: str, division: str) -> str | None:
    """Why `curriculum` cannot run in `division`, or None.

    docs/curriculum.md, "Which MLPerf division": seed 002's curricula order the data to change
    convergence (open division outright); `shuffled` (bucketing in a random order) might pass
    as closed-division "arbitrary batching" only with a ruling of the review committee, so
    until then every curriculum is open division.
    """
    if curriculum == "none" or division == "open":
        return None
    return (f"data.curriculum={curriculum!r} is open division only (length-bucketed batches "
            f"are not the reference's random order; docs/curriculum.md, 'Which MLPerf "
            f"division'); set run.submission_division=open")
