"""The optimizer's and the LR schedule's own configs (`optim:` and `schedule:` sections)."""

from __future__ import annotations

from typing import Literal

from bert.core.errors import check
from bert.core.settings import F, RegistryName, section
from bert.optim.specs import OPTIMIZERS

# The optimizer computes in float32 (and fp16/bf16 copies): a hyperparameter beyond this cannot
# even be stored in a tensor, where it failed as "value cannot be converted without overflow"
FLOAT32_SAFE = 1e30


# optim.name: a name of the optimizers' table, read when a config is validated
OptimizerName = RegistryName(lambda: OPTIMIZERS)


@section("optim")
class OptimConfig:
    """The optimizer (`name`: bert/optim/specs.py) and its hyperparameters (MLPerf names in
    the descriptions)."""

    name: OptimizerName = F(
        "lamb",
        "the optimizer (bert/optim/specs.py: its division and its replicated or sharded path)",
    )
    lr: float = F(4.25e-4, "opt_base_learning_rate", gt=0, le=FLOAT32_SAFE)
    beta1: float = F(0.9, "opt_lamb_beta_1", ge=0, lt=1)
    beta2: float = F(0.999, "opt_lamb_beta_2", ge=0, lt=1)
    eps: float = F(1e-6, "opt_lamb_epsilon", gt=0, le=FLOAT32_SAFE)
    weight_decay: float = F(0.01, "opt_lamb_weight_decay_rate", ge=0, le=FLOAT32_SAFE)
    max_grad_norm: float = F(1.0, "global gradient-norm clip", gt=0, le=FLOAT32_SAFE)
    sharded: bool = F(
        False,
        "ShardedOptimizer: sharded fp32 state (ZeRO-2), bucketed "
        "reduce-scatter overlapping the backward, LR and fp16 loss scaling "
        "on the device. Tested on gloo ranks.",
    )
    clip_mode: Literal["after_allreduce", "before_allreduce", "bucketwise"] = F(
        "after_allreduce",
        "where the gradient norm is clipped (sharded only): after_allreduce "
        "(exact global norm), before_allreduce (each rank's local norm, as 1-node MLPerf runs "
        "do) or bucketwise ([Kim]: each bucket to max_grad_norm/sqrt(buckets) before its "
        "reduction)",
    )
    bucket_cap_mb: float = F(25.0, "gradient bucket size for the sharded optimizer", gt=0)
    fused_kernel: bool = F(
        False,
        "Sharded optimizer's norms and update as fused CUDA kernels "
        "(kernels/lamb.py: five launches over the flat shard instead "
        "of dozens of _foreach ops); GPU status: the optimizer's "
        "record (bert/gpu_status.py). On CUDA it needs the compiled "
        "extension (checked when the optimizer is built); on CPU the "
        "ops run their _foreach reference.",
    )

    def __post_init__(self) -> None:
        check(
            self.sharded or not self.fused_kernel,
            "optim.fused_kernel=true needs optim.sharded=true (it updates the flat shards)",
        )
        spec = OPTIMIZERS[self.name]
        check(
            self.sharded or spec.replicated is not None,
            f"optim.name={self.name} needs optim.sharded=true (the replicated path is "
            f"{', '.join(n for n, o in OPTIMIZERS.items() if o.replicated)} only)",
        )
        check(
            not self.sharded or spec.sharded is not None,
            f"optim.name={self.name} has no sharded path: set optim.sharded=false",
        )
        check(
            not self.fused_kernel or spec.sharded is None or spec.sharded.fused is not None,
            f"optim.fused_kernel=true: optim.name={self.name} has no fused kernels",
        )
        check(
            self.sharded or self.clip_mode == "after_allreduce",
            f"optim.clip_mode={self.clip_mode!r} needs optim.sharded=true",
        )


@section("schedule")
class ScheduleConfig:
    """Linear warmup, then polynomial (power 1) decay to zero."""

    total_steps: int = F(6700, "opt_learning_rate_training_steps", gt=0)
    warmup_steps: int = F(0, "opt_learning_rate_warmup_steps / num_warmup_steps", ge=0)
    start_warmup_step: int = F(0, "step at which the warmup starts (start_warmup_step)", ge=0)
    power: float = F(
        1.0,
        "exponent of the decay (opt_lamb_learning_rate_decay_poly_power)",
        gt=0,
        le=FLOAT32_SAFE,
    )

    def __post_init__(self) -> None:
        check(
            self.warmup_steps <= self.total_steps,
            f"schedule.warmup_steps={self.warmup_steps} must be in [0, total_steps]",
        )
