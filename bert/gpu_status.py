"""Which switches of a config have not been validated on a GPU yet: read from the registries'
own records (attention backends, fused ops, the optimizers' fused kernels, compile_sublayers,
fp8_linear, cuda_graphs), never from prose. The trainer warns once at the start of a CUDA run;
tests/unit/test_gpu_status.py checks that kernels/VALIDATION.md says the same (fp8_linear's
status is in docs/fp8.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bert.model.attention import BACKENDS
from bert.model.config import COMPILE_SUBLAYERS_GPU_VALIDATED
from bert.model.fp8 import FP8_LINEAR_GPU_VALIDATED
from bert.model.fused import FUSED_OPS, enabled
from bert.optim.registry import OPTIMIZERS
from bert.train.graphs.config import CUDA_GRAPHS_GPU_VALIDATED

if TYPE_CHECKING:
    from bert.config import Config


def unvalidated(cfg: "Config") -> list[str]:
    """The switches on in `cfg` that no GPU window has validated, as `section.key[=value]`."""
    found = []
    backend = BACKENDS[cfg.model.attention]
    if not backend.reference and backend.gpu_validated is None:
        found.append(f"model.attention={backend.name}")
    found += [
        f"model.{flag}" for flag in enabled(cfg.model) if FUSED_OPS[flag].gpu_validated is None
    ]
    if cfg.model.compile_sublayers and COMPILE_SUBLAYERS_GPU_VALIDATED is None:
        found.append("model.compile_sublayers")
    if cfg.model.fp8_linear and FP8_LINEAR_GPU_VALIDATED is None:
        found.append("model.fp8_linear")
    if cfg.run.cuda_graphs and CUDA_GRAPHS_GPU_VALIDATED is None:
        found.append("run.cuda_graphs")
    math = OPTIMIZERS[cfg.optim.name].sharded
    if cfg.optim.fused_kernel and math is not None and math.fused_gpu_validated is None:
        found.append("optim.fused_kernel")
    return found


def warning(cfg: "Config") -> str | None:
    """One line for the start of a CUDA run, or None when every switch on is validated."""
    names = unvalidated(cfg)
    if not names:
        return None
    return (
        f"warning: not validated on a GPU yet: {', '.join(names)} "
        f"(kernels/VALIDATION.md; results may be wrong or slow)"
    )
