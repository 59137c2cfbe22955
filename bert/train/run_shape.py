"""The run shape: everything a run's shape fixes, derived once from the config and the job's size
(world and node), frozen, and passed to whoever needs it. Nothing else recomputes these.

    batch geometry      global / local / micro batch and accumulation (data/config.py)
    max_steps           run.max_steps, else the schedule's total_steps; capped by max_samples
    budget_stop         the run's steps end before the schedule's: the user's step budget, whose
                        end without the target is how the run was told to end (exit 0)
    eval interval       eval.interval_samples, else the MLPerf formula (REFERENCE 1)
    steps per block     an eval point rounds up to a whole global batch (REFERENCE 1)
    node size           data.ranks_per_node, else the launcher's ranks per node
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from bert.train.config import mlperf_eval_interval
from data.config import BatchGeometry

if TYPE_CHECKING:
    from bert.config import Config


@dataclass(frozen=True)
class RunShape:
    geometry: BatchGeometry
    max_steps: int  # optimizer steps of the whole run
    budget_stop: bool  # max_steps (run.max_steps or max_samples) ends before the schedule
    eval_interval_samples: int  # samples between eval points, as configured or by MLPerf's rule
    steps_per_eval_block: int  # optimizer steps between eval points
    ranks_per_node: int  # the node size the node-local strategies and node_swap deal within
    # what sets max_steps, as the time left names it: "the schedule's end", "run.max_steps" or
    # "run.max_samples"
    last_step_name: str = "the schedule's end"

    @property
    def global_batch_size(self) -> int:
        return self.geometry.global_batch_size

    @classmethod
    def build(cls, cfg: "Config", world_size: int, local_world_size: int = 0) -> "RunShape":
        """ConfigError (from BatchGeometry) when the batch does not split over the job."""
        geometry = BatchGeometry.build(cfg.run, world_size)
        gbs = geometry.global_batch_size
        steps = cfg.run.max_steps or cfg.schedule.total_steps
        by_samples = bool(cfg.run.max_samples) and -(-cfg.run.max_samples // gbs) < steps
        if by_samples:
            steps = -(-cfg.run.max_samples // gbs)
        budget_stop = steps < cfg.schedule.total_steps
        last = "run.max_samples" if by_samples else "run.max_steps"
        interval = cfg.eval.interval_samples or mlperf_eval_interval(gbs)
        return cls(
            geometry=geometry,
            max_steps=steps,
            budget_stop=budget_stop,
            eval_interval_samples=interval,
            steps_per_eval_block=max(1, -(-interval // gbs)),
            ranks_per_node=cfg.data.ranks_per_node or local_world_size or world_size,
            last_step_name=last if budget_stop else "the schedule's end",
        )

    def end(self, status: str) -> str:
        """How a run that ended by itself ended: the target, or else whose steps ran out (the
        user's budget before the schedule's end is no failure; the schedule's end is)."""
        if status == "success":
            return "target_reached"
        return "step_budget" if self.budget_stop else "target_missed"
