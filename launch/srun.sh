#!/usr/bin/env bash
# One training run inside a Slurm allocation (salloc, or launch/slurm.sbatch): one task per GPU.
#
#   launch/srun.sh CONFIG [--set key=value ...]
#
# Environment: GPUS_PER_NODE (default: SLURM_GPUS_ON_NODE, else nvidia-smi, else 1),
# MASTER_PORT (29500), SRUN_EXTRA_ARGS (e.g. --container-image=... for pyxis), and those of
# launch/common.sh. The page cache is flushed on every node first (one task per node); the
# run logs cache_clear true only if every node flushed.

set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
require_config "$@"

NNODES="${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}"
GPUS_PER_NODE="${GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-$(gpus_on_this_node)}}"
read -r -a EXTRA <<< "${SRUN_EXTRA_ARGS:-}"
if [[ -z "${MASTER_ADDR:-}" ]]; then
  # The first node of the allocation hosts the rendezvous.
  MASTER_ADDR="$(scontrol show hostnames "${SLURM_JOB_NODELIST:-}" 2>/dev/null | head -n 1 || true)"
fi
export MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
export MASTER_PORT="${MASTER_PORT:-29500}"

clear_cache srun --nodes="$NNODES" --ntasks-per-node=1 "${EXTRA[@]}" "$LAUNCH_DIR/drop_caches.sh"
trainer_cmd "$@"
run_cmd srun --nodes="$NNODES" --ntasks-per-node="$GPUS_PER_NODE" --cpu-bind=none \
  --kill-on-bad-exit=1 "${EXTRA[@]}" "$LAUNCH_DIR/rank_env.sh" "${TRAINER[@]}"
