"""Optimizers: the registry keyed by optim.name and the trainer's wrappers (registry.py), LAMB,
the sharded ZeRO-2 optimizer and its shard math, loss scaling, the MLPerf LR schedule, LAMB
parameter groups, and their configs (config.py)."""

from bert.optim.lamb import LAMB
from bert.optim.loss_scale import DynamicLossScaler
from bert.optim.params import param_groups
from bert.optim.schedule import PolyWarmupScheduler, lr_at
from bert.optim.sharded import ShardedOptimizer

__all__ = [
    "DynamicLossScaler",
    "LAMB",
    "PolyWarmupScheduler",
    "ShardedOptimizer",
    "lr_at",
    "param_groups",
]
