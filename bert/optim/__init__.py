"""Optimizers: the registry keyed by optim.name and the trainer's wrappers (registry.py), LAMB,
the sharded ZeRO-2 optimizer and its shard math, loss scaling, the MLPerf LR schedule, LAMB
parameter groups, and their configs (config.py).

The names below are imported when first used, not with the package: the config (config.py,
specs.py) is read without torch by the commands that answer at once (--help-config, the
planner), and these need it.
"""

from bert.core.lazy import module_getattr

_EXPORTS = {
    "DynamicLossScaler": "bert.optim.loss_scale",
    "LAMB": "bert.optim.lamb",
    "PolyWarmupScheduler": "bert.optim.schedule",
    "ShardedOptimizer": "bert.optim.sharded",
    "lr_at": "bert.optim.schedule",
    "param_groups": "bert.optim.params",
}

__all__ = sorted(_EXPORTS)

__getattr__ = module_getattr(__name__, _EXPORTS)
