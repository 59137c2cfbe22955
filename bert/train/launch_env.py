"""Which launcher started this process, and the rank layout it gives.

torch.distributed's env:// rendezvous reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
torchrun sets them all; MPI launchers and srun set their own variables instead. `launch_layout`
reads whichever set is present, in this order (the first match wins):

    torchrun / launch/rank_env.sh   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
    Open MPI (mpirun, mpiexec)      OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
    MPICH / Hydra, srun --mpi=pmi2  PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS
    Slurm srun step                 SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID,
                                    SLURM_STEP_TASKS_PER_NODE

(srun sets SLURM_STEP_NUM_TASKS, a batch script alone does not: a `python` run inside an
allocation stays a single process.) `export_rendezvous` then fills in the torch variables;
under MPI, rank 0 picks a free port and broadcasts it, so MASTER_ADDR/MASTER_PORT are optional.

Errors (`report_error`): a bad input usually fails every rank alike, so each rank would print
the same `error:` line; the ranks of a node agree on one printer through a status file in a
folder new to the launch ($OPEN_BERT_EXIT_DIR from launch/torchrun.py, else torchrun's own
attempt folder). The status in it is the one the launcher reports (torchrun alone says 1).
"""

from __future__ import annotations

import os
import re
import socket
import sys
import traceback
from pathlib import Path
from typing import NamedTuple

# (rank, world size, local rank, local world size) variables of each launcher, in priority order
LAUNCHER_VARS = (
    ("torchrun", ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")),
    (
        "Open MPI",
        (
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE",
        ),
    ),
    ("PMI", ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")),
    (
        "srun",
        ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE"),
    ),
)


EXIT_DIR_VAR = "OPEN_BERT_EXIT_DIR"  # set by launch/torchrun.py, read back after the job
STATUS_FILE = "status"  # in that folder: the exit status of the rank that reported an error


class LaunchLayout(NamedTuple):
    launcher: str  # "single", "torchrun", "Open MPI", "PMI" or "srun"
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int


def _leading_int(text: str | None, default: int) -> int:
    """First integer of a variable such as SLURM_STEP_TASKS_PER_NODE="4(x2)"."""
    found = re.match(r"\d+", text or "")
    return int(found.group()) if found else default


def launch_layout() -> LaunchLayout:
    env = os.environ
    for launcher, (rank, size, local, _) in LAUNCHER_VARS:
        if rank in env and size in env:
            world = int(env[size])
            return LaunchLayout(
                launcher, int(env[rank]), world, int(env.get(local, "0")), _local_world_size(world)
            )
    return LaunchLayout("single", 0, 1, 0, 1)


def _local_world_size(world: int) -> int:
    """Ranks on this node from any launcher that says (launch/rank_env.sh exports no
    LOCAL_WORLD_SIZE but leaves mpirun's); the whole world if none does."""
    for _, (*_, local_size) in LAUNCHER_VARS:
        if local_size in os.environ:
            return _leading_int(os.environ[local_size], world)
    return world


def export_rendezvous(layout: LaunchLayout) -> None:
    """Set the torch env:// variables for a multi-rank job not started by torchrun."""
    os.environ.update(
        RANK=str(layout.rank),
        WORLD_SIZE=str(layout.world_size),
        LOCAL_RANK=str(layout.local_rank),
        LOCAL_WORLD_SIZE=str(layout.local_world_size),
    )
    if "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ:
        return
    from data.comm.mpi import load_mpi, mpi_launched

    if not mpi_launched():
        raise RuntimeError(
            f"launched by {layout.launcher} with {layout.world_size} ranks: set "
            f"MASTER_ADDR and MASTER_PORT (rank 0's host and a free port) for the "
            f"torch.distributed rendezvous"
        )
    address = _rank0_address(layout) if layout.rank == 0 else None
    address = load_mpi().COMM_WORLD.bcast(address, root=0)
    os.environ.setdefault("MASTER_ADDR", address[0])
    os.environ.setdefault("MASTER_PORT", str(address[1]))


def _rank0_address(layout: LaunchLayout) -> tuple[str, int]:
    """Rank 0's host (loopback when the job is on one node) and a port free right now."""
    host = os.environ.get("MASTER_ADDR")
    if host is None:
        host = "127.0.0.1" if layout.local_world_size == layout.world_size else socket.getfqdn()
    if "MASTER_PORT" in os.environ:
        return host, int(os.environ["MASTER_PORT"])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return host, probe.getsockname()[1]


def error_dir() -> Path | None:
    """A folder that every rank on this node sees and that is new to this launch, or None."""
    if os.environ.get(EXIT_DIR_VAR):
        return Path(os.environ[EXIT_DIR_VAR])
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if error_file:  # torchrun's <log dir>/<run id>/attempt_<n>/<local rank>/error.json
        return Path(error_file).parent.parent
    return None


def report_error(message: str, status: int) -> None:
    """Print `error: message` once per job (per node across nodes) and leave `status` for
    the launcher. The first rank to create the status file prints; the others stay quiet, as
    the same bad input fails them alike, or their peer's failure ends them."""
    folder = error_dir()
    if folder is not None:
        try:
            fd = os.open(folder / STATUS_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return
        except OSError:
            pass  # the folder is on another node (or gone): this rank reports for itself
        else:
            with os.fdopen(fd, "w") as f:
                f.write(f"{status}\n")
    print(f"error: {message}", file=sys.stderr, flush=True)


def abort_mpi_job(code: int, err: BaseException | None = None) -> None:
    """End every rank of an MPI job now (after printing `err`'s traceback); no-op unless MPI
    is running with several ranks.

    A failed rank must not just exit: on exit mpi4py finalizes MPI, which waits for the peers,
    and they wait in a collective for the failed rank. MPI_Abort makes the launcher end them.
    """
    MPI = sys.modules.get("mpi4py.MPI")
    if MPI is None or not MPI.Is_initialized() or MPI.Is_finalized():
        return
    if MPI.COMM_WORLD.Get_size() > 1:
        if err is not None:  # a bad input (err None) has had its one `error:` line already
            traceback.print_exception(err)
            print(
                f"error: rank {MPI.COMM_WORLD.Get_rank()} failed; aborting the MPI job",
                file=sys.stderr,
            )
        sys.stdout.flush()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(code)


def peer_reported_error() -> bool:
    """Whether a rank of this job (on this node) has printed its `error:` line already: what
    this rank then fails with is a consequence (a peer gone), and stays unprinted."""
    folder = error_dir()
    return folder is not None and (folder / STATUS_FILE).exists()
