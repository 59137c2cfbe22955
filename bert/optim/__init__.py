"""Optimizers: the registry keyed by optim.name and the trainer's wrappers (registry.py), LAMB,
the sharded ZeRO-2 optimizer and its shard math, loss scaling, the MLPerf LR schedule, LAMB
parameter groups, and their configs (config.py).

The names below are imported when first used, not with the package: the config (config.py,
specs.py) is read without torch by the commands that answer at once (--help-config, the
planner), and these need it.
"""

from bert.core.lazy import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "bert.optim.lamb": ("LAMB",),
        "bert.optim.loss_scale": ("DynamicLossScaler",),
        "bert.optim.params": ("param_groups",),
        "bert.optim.schedule": ("PolyWarmupScheduler", "lr_at"),
        "bert.optim.sharded": ("ShardedOptimizer",),
    },
)
