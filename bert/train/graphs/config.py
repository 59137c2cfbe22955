"""run.cuda_graphs against the rest of the config: what it cannot run with, checked when the
config loads (bert/config.py)."""

from __future__ import annotations

from bert.train.config import run_device_type

# The GPU window record whose tests validated run.cuda_graphs (bert/gpu_status.py warns while
# None). Its GPU tests passed on an H200 (2026-11-28b window), not yet on an H100, the target,
# and no benchmark has shown a gain yet: kernels/VALIDATION.md.
CUDA_GRAPHS_GPU_VALIDATED: str | None = None


def graphs_config_error(cfg) -> str | None:
    """Why this Config cannot run with run.cuda_graphs=true; None when it can (or it is off)."""
    run, model = cfg.run, cfg.model
    if not run.cuda_graphs:
        return None
    device = run_device_type(run.device)
    if device != "cuda":
        return (
            f"run.cuda_graphs=true needs CUDA (torch.cuda.CUDAGraph), but run.device="
            f"{run.device} resolves to {device}: set run.cuda_graphs=false"
        )
    setting = refused_setting(
        precision=run.precision,
        sharded=cfg.optim.sharded,
        attention=model.attention,
        last_layer_subset=model.last_layer_subset,
    )
    if setting is not None:
        return (
            f"run.cuda_graphs=true cannot run with {setting} yet (docs/cuda_graphs.md); "
            f"set run.cuda_graphs=false"
        )
    return None


def refused_setting(
    *, precision: str, sharded: bool, attention: str, last_layer_subset: bool
) -> str | None:
    """The first setting CUDA graphs cannot run with yet, as `key=value`; None when none. Read
    by the config check above and by the throughput bench's `+graphs` variants, so both refuse
    the same combinations."""
    refused = {
        "run.precision=fp16": precision == "fp16",  # the loss scaler is not captured yet
        "optim.sharded=true": sharded,  # reduce-scatter hooks during backward
        "model.attention=grouped_flash": attention == "grouped_flash",  # per-batch shapes
        "model.last_layer_subset=true": last_layer_subset,  # query shapes not bucketed
    }
    return next((setting for setting, on in refused.items() if on), None)
