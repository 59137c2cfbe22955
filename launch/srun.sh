#!/usr/bin/env bash
# One training run inside a Slurm allocation (salloc, or launch/slurm.sbatch): one task per GPU.
#
#   launch/srun.sh CONFIG [--set key=value ...]
#
# Environment: GPUS_PER_NODE, the tasks started per node (default: the allocation's
# --ntasks-per-node, else its GPUs per node, else nvidia-smi's count, else 1; so a CPU
# allocation made with --gpus-per-node=0 --ntasks-per-node=N gets N tasks per node),
# MASTER_PORT (29500), SRUN_EXTRA_ARGS (e.g. --container-image=... for pyxis), and those of
# launch/common.sh. The page cache is flushed on every node first (one task per node); the
# run logs cache_clear true only if every node flushed.

set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
require_config "$@"

NNODES="${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}"
# SLURM_NTASKS_PER_NODE is set when the allocation asked for --ntasks-per-node; a CPU partition
# (--gpus-per-node=0) may set SLURM_GPUS_ON_NODE=0, which is no task count.
if [[ -z "${GPUS_PER_NODE:-}" ]]; then
  GPUS_PER_NODE="${SLURM_NTASKS_PER_NODE:-}"
  [[ "$GPUS_PER_NODE" =~ ^[1-9][0-9]*$ ]] || GPUS_PER_NODE="${SLURM_GPUS_ON_NODE:-}"
  [[ "$GPUS_PER_NODE" =~ ^[1-9][0-9]*$ ]] || GPUS_PER_NODE="$(gpus_on_this_node)"
fi
read -r -a EXTRA <<< "${SRUN_EXTRA_ARGS:-}"
if [[ -z "${MASTER_ADDR:-}" ]]; then
  # The first node of the allocation hosts the rendezvous.
  MASTER_ADDR="$(scontrol show hostnames "${SLURM_JOB_NODELIST:-}" 2>/dev/null | head -n 1 || true)"
fi
export MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
export MASTER_PORT="${MASTER_PORT:-29500}"

# --ntasks as well: srun inside sbatch/salloc inherits the allocation's SLURM_NTASKS, which
# would otherwise override --ntasks-per-node (one flush per node, not one per task).
clear_cache srun --nodes="$NNODES" --ntasks="$NNODES" --ntasks-per-node=1 "${EXTRA[@]}" \
  "$LAUNCH_DIR/drop_caches.sh"
trainer_cmd "$@"
# --kill-on-bad-exit: a task that exits non-zero ends the step: Slurm sends SIGTERM to the
# others (run_pretraining.py then closes its MLPerf log with run_stop aborted), and SIGKILL
# after KillWait. The trainer's exit status 1 (not converged) is such an exit too: a peer
# still shutting down may then end as "Terminated" (143); its log is complete either way, and
# run_and_time.sh reports each log's run_stop status.
run_cmd srun --nodes="$NNODES" --ntasks="$((NNODES * GPUS_PER_NODE))" \
  --ntasks-per-node="$GPUS_PER_NODE" --cpu-bind=none --kill-on-bad-exit=1 "${EXTRA[@]}" \
  "$LAUNCH_DIR/rank_env.sh" "${TRAINER[@]}"
