#!/usr/bin/env bash
# One training run under torchrun, on one node or as one node of a multi-node job.
#
#   launch/torchrun.sh CONFIG [--set key=value ...]
#   NNODES=2 NODE_RANK=0 MASTER_ADDR=node0 launch/torchrun.sh CONFIG    # on node0
#   NNODES=2 NODE_RANK=1 MASTER_ADDR=node0 launch/torchrun.sh CONFIG    # on node1
#
# Environment: NPROC_PER_NODE (default: GPUs seen by nvidia-smi, else 1), NNODES (1),
# NODE_RANK (0), MASTER_ADDR (127.0.0.1), MASTER_PORT (29500), TORCHRUN (default: torchrun
# through launch/torchrun.py, which exits with the workers' own status: 2 for bad input, where
# torchrun alone says 1), and those of launch/common.sh (DRY_RUN, CLEAR_CACHE, PYTHON, ...).
# Each node flushes its own page cache first; the trainer logs rank 0's result.

set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
require_config "$@"

NNODES="${NNODES:-1}"
NODE_RANK="${NODE_RANK:-0}"
NPROC_PER_NODE="${NPROC_PER_NODE:-$(gpus_on_this_node)}"
MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
MASTER_PORT="${MASTER_PORT:-29500}"
read -r -a TORCHRUN_CMD <<< "${TORCHRUN:-$PYTHON $LAUNCH_DIR/torchrun.py}"

if [[ "$NNODES" == 1 ]]; then
  # --standalone: a local rendezvous on a free port, no master address needed.
  WIRING=(--standalone --nnodes=1)
else
  WIRING=(--nnodes="$NNODES" --node_rank="$NODE_RANK" --master_addr="$MASTER_ADDR"
          --master_port="$MASTER_PORT")
fi

clear_cache "$LAUNCH_DIR/drop_caches.sh"
trainer_cmd "$@"
# torchrun starts the script itself; drop the interpreter from the trainer command.
run_cmd "${TORCHRUN_CMD[@]}" "${WIRING[@]}" --nproc_per_node="$NPROC_PER_NODE" "${TRAINER[@]:1}"
