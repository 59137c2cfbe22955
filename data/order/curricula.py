"""The curricula by name: what `data.curriculum.name` chooses, built from the data config, and
the MLPerf division rule that applies to all of them (docs/curriculum.md)."""

from __future__ import annotations

from typing import Any, Sequence

from data.order.curriculum import (
    ORDERS,
    Curriculum,
    LossControlledCurriculum,
    OrderedCurriculum,
    proportional_visits,
)
from data.order.exp3s import Exp3SCurriculum

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


def curriculum_from_config(cfg: Any, bucket_shares: Sequence[float], seed: int) -> Curriculum:
    """The curriculum a `data.curriculum` section (data/config.py: CurriculumConfig) asks for.

    bucket_shares (M,): each bucket's share of the data, the same on every rank; the fixed
    orders split `round_batches` steps per round in proportion to it.
    """
    m = len(bucket_shares)
    if cfg.name in ORDERS:
        visits = proportional_visits(bucket_shares, cfg.round_batches)
        return make_curriculum(cfg.name, m, seed, batches_per_visit=visits)
    if cfg.name == "loss_controlled":
        return make_curriculum(
            cfg.name,
            m,
            seed,
            targets=cfg.loss_targets,
            window=cfg.loss_window,
            max_batches=cfg.max_batches or None,
        )
    return make_curriculum(
        cfg.name, m, seed, eta=cfg.eta, gamma=cfg.gamma, alpha=cfg.alpha, reward=cfg.reward
    )


def division_error(curriculum: str, division: str) -> str | None:
    """Why `curriculum` cannot run in `division`, or None.

    docs/curriculum.md, "Which MLPerf division": [Zhang]'s curricula order the data to change
    convergence (open division outright); `shuffled` (bucketing in a random order) might pass
    as closed-division "arbitrary batching" only with a ruling of the review committee, so
    until then every curriculum is open division.
    """
    if curriculum == "none" or division == "open":
        return None
    return (
        f"data.curriculum.name={curriculum!r} is open division only (length-bucketed "
        f"batches are not the reference's random order; docs/curriculum.md, 'Which MLPerf "
        f"division'); set submission.division=open"
    )
