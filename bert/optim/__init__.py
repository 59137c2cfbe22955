"""Optimizer pieces: LAMB, the distributed fused LAMB, loss scaling, the MLPerf LR schedule, and
LAMB parameter groups."""
from bert.optim.distributed_lamb import DistributedFusedLAMB
from bert.optim.lamb import LAMB
from bert.optim.loss_scale import DynamicLossScaler
from bert.optim.params import param_groups
from bert.optim.schedule import PolyWarmupScheduler, lr_at

__all__ = ["DistributedFusedLAMB", "DynamicLossScaler", "LAMB", "PolyWarmupScheduler", "lr_at",
           "param_groups"]
