"""Process-group wiring for the training step (device collectives).

torchrun, mpirun/mpiexec or srun give a multi-rank job (bert/train/launch_env.py reads whichever
launcher's variables are present, and under MPI broadcasts the rendezvous address from rank 0);
without them the run is a single process and needs no process group. NCCL is used when training
on CUDA, gloo on CPU. Host-side collectives of the data pipeline live in data/comm/host.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from bert.core.errors import ConfigError
from bert.train.config import run_device_type
from bert.train.launch_env import export_rendezvous, launch_layout


@dataclass(frozen=True)
class DistContext:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    local_world_size: int = 1  # ranks on this node

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1


def pick_device(requested: str, local_rank: int) -> torch.device:
    if run_device_type(requested) == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():  # run.device=cuda (auto would have resolved to cpu)
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        raise ConfigError(
            f"run.device=cuda: PyTorch ({torch.__version__}, {build}) sees no "
            f"CUDA device; use run.device=cpu or auto"
        )
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def init_distributed(requested_device: str, timeout_s: float = 600.0) -> DistContext:
    """Start the default process group if the launcher asked for more than one rank.
    `timeout_s` (dist.timeout_s): how long a collective waits for the slowest rank."""
    layout = launch_layout()
    device = pick_device(requested_device, layout.local_rank)
    if layout.world_size > 1 and not dist.is_initialized():
        if layout.launcher != "torchrun":
            export_rendezvous(layout)
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(
            backend=backend,
            device_id=device if backend == "nccl" else None,
            timeout=timedelta(seconds=timeout_s),
        )
    return DistContext(
        layout.rank, layout.world_size, layout.local_rank, device, layout.local_world_size
    )


def shutdown_distributed() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(tensor: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    """In-place sum over ranks (a no-op for one rank)."""
    if ctx.is_distributed:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def broadcast_int(value: int, ctx: DistContext) -> int:
    """Rank 0's value on every rank (used for the run seed). Syncs; call at init only."""
    if not ctx.is_distributed:
        return value
    holder = torch.tensor([value], dtype=torch.int64, device=ctx.device)
    dist.broadcast(holder, src=0)
    return int(holder.item())
