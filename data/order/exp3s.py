"""[Zhang]'s Algorithm 2: an Exp3.S bandit over the length buckets (data/order/curriculum.py
has the common interface and the other curricula)."""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from data.order.curriculum import Curriculum, _check_step, _PendingDraws


def exp3s_probabilities(weights: np.ndarray, gamma: float) -> np.ndarray:
    """Equation (1): pi (K,) = (1 - gamma) softmax(weights) + gamma / K, weights (K,)."""
    w = np.asarray(weights, dtype=np.float64)
    e = np.exp(w - w.max())  # shift-invariant; keeps exp() finite for large weights
    return (1.0 - gamma) * e / e.sum() + gamma / w.size


def exp3s_update(
    weights: np.ndarray, arm: int, reward: float, prob: float, eta: float, alpha: float
) -> np.ndarray:
    """Equations (2), (3), (5): the weights (K,) after reward r in [-1, 1] for `arm`.

    r~_i = r 1(i = arm) / pi(arm)   with pi(arm) the probability the arm was drawn with,
    v_i  = w_i + eta r~_i,
    w'_i = log[(1 - alpha) e^{v_i} + alpha / (K - 1) sum_{j != i} e^{v_j}].

    The log spans both terms, as in Graves et al. 2017 ([Zhang]'s [4]); [Zhang]'s typeset
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
            raise ValueError(
                f"reward scaler: need window >= 1 and 0 <= low < high <= 1 (got "
                f"{window}, {low}, {high})"
            )
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
# What the training pipeline can feed: visit_gain needs no second forward of the batch.
TRAINED_REWARDS = ("visit_gain",)


class Exp3SCurriculum(Curriculum):
    """[Zhang], Algorithm 2 (after Graves et al. 2017): an Exp3.S bandit over the buckets.

    Per step t: pi_t from the weights (eq. 1); bucket ~ pi_t, drawn with a generator seeded by
    (seed, t); after training, a raw reward r^ (below); eq. (4) maps it to [-1, 1] with the
    20%/80% quantiles of the last `window` raw rewards; eqs. (2), (3), (5) update the weights
    with the probability the bucket was drawn with.

    reward, the raw r^ (all losses global, i.e. all-reduced):
      "prediction_gain"  loss_before - loss_after of the same batch, before and after this
                         step's update (Graves' prediction gain; [Zhang]'s "loss reduction").
                         Needs loss_after: a second forward of the batch after the step.
      "visit_gain"       the bucket's previous batch loss minus this batch's loss (both
                         loss_before): how much the bucket's loss fell since it was last
                         trained, as in Matiisen et al.'s teacher-student curricula. No extra
                         forward; the first batch of each bucket has no gain and leaves the
                         weights alone. Noisier: two different batches are compared.

    alpha: the weight-sharing term, a constant, or "1/t" for [Zhang]'s alpha_t = 1/t, where t
    is the index of the weights being computed (the initial weights are w_1, so the first
    update uses 1/2).
    """

    name = "exp3s"
    uses_losses = True

    def __init__(
        self,
        num_buckets: int,
        seed: int,
        eta: float = 0.1,
        gamma: float = 0.1,
        alpha: float | str = 0.01,
        window: int = 1000,
        low_quantile: float = 0.2,
        high_quantile: float = 0.8,
        reward: str = "prediction_gain",
    ):
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

    def _learn(self, arm: int, prob: float, loss_before: float, loss_after: float | None) -> None:
        raw = self._raw_reward(arm, loss_before, loss_after)
        if raw is not None:
            self.apply_reward(arm, self.scaler.scale(raw), prob)

    def _raw_reward(self, arm: int, loss_before: float, loss_after: float | None) -> None:
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
        return {
            **super().config(),
            "eta": self.eta,
            "gamma": self.gamma,
            "alpha": self.alpha,
            "window": s.window,
            "low_quantile": s.low,
            "high_quantile": s.high,
            "reward": self.reward,
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "weights": self.weights.tolist(),
            "updates": self.updates,
            "history": list(self.scaler.history),
            "pending": [list(i) for i in self.pending.items],
            "last_loss": list(self.last_loss),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        weights = np.asarray(state["weights"], dtype=np.float64)
        if weights.shape != (self.num_buckets,):
            raise ValueError(
                f"exp3s: saved weights {weights.shape}, expected ({self.num_buckets},)"
            )
        self.weights, self.updates = weights, int(state["updates"])
        self.scaler.history = deque((float(x) for x in state["history"]), maxlen=self.scaler.window)
        self.pending.items = [list(i) for i in state["pending"]]
        self.last_loss = [None if x is None else float(x) for x in state["last_loss"]]

    def describe(self) -> str:
        probs = ", ".join(f"{p:.3f}" for p in self.probabilities())
        return f"{super().describe()} after {self.updates} updates, pi=[{probs}]"
