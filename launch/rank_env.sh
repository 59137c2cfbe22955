#!/usr/bin/env bash
# Run a command with the torch.distributed variables the trainer reads (RANK, WORLD_SIZE,
# LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), taken from whichever launcher
# started this process: Open MPI (OMPI_COMM_WORLD_*), MPICH/Hydra (PMI_*, MPI_LOCALRANKID) or
# Slurm srun (SLURM_*).
# MPI variables win over Slurm's: an mpirun inside a Slurm batch script still sees SLURM_PROCID=0.
#
#   srun launch/rank_env.sh python run_pretraining.py ...
set -euo pipefail
export RANK="${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${SLURM_PROCID:-${RANK:-0}}}}"
export WORLD_SIZE="${OMPI_COMM_WORLD_SIZE:-${PMI_SIZE:-${SLURM_NTASKS:-${WORLD_SIZE:-1}}}}"
LOCAL="${OMPI_COMM_WORLD_LOCAL_RANK:-${MPI_LOCALRANKID:-${SLURM_LOCALID:-}}}"
export LOCAL_RANK="${LOCAL:-${LOCAL_RANK:-0}}"
# Slurm writes tasks per node as e.g. "8(x2)": keep the leading count.
SLURM_LOCAL="${SLURM_STEP_TASKS_PER_NODE:-}"
LOCAL="${OMPI_COMM_WORLD_LOCAL_SIZE:-${MPI_LOCALNRANKS:-${SLURM_LOCAL%%[^0-9]*}}}"
export LOCAL_WORLD_SIZE="${LOCAL:-${LOCAL_WORLD_SIZE:-$WORLD_SIZE}}"
export MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
export MASTER_PORT="${MASTER_PORT:-29500}"
exec "$@"
