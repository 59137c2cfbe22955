#!/usr/bin/env bash
# One training run under mpirun (Open MPI; one rank per GPU), on one node or several.
#
#   launch/mpirun.sh CONFIG [--set key=value ...]
#   HOSTFILE=hosts NNODES=2 launch/mpirun.sh CONFIG
#
# Environment: NPROC_PER_NODE (default: GPUs seen by nvidia-smi, else 1), NNODES (1),
# HOSTFILE (Open MPI hostfile; needed for NNODES > 1), MASTER_ADDR (default: first host of
# HOSTFILE, else 127.0.0.1), MASTER_PORT (29500), MPIRUN (mpirun), MPI_EXTRA_ARGS, and those
# of launch/common.sh. Ranks get RANK/WORLD_SIZE/LOCAL_RANK through launch/rank_env.sh; the
# data pipeline's host collectives can then use MPI (mpi4py) as well.

set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
require_config "$@"

NNODES="${NNODES:-1}"
NPROC_PER_NODE="${NPROC_PER_NODE:-$(gpus_on_this_node)}"
NP=$((NNODES * NPROC_PER_NODE))
read -r -a MPIRUN_CMD <<< "${MPIRUN:-mpirun}"
read -r -a EXTRA <<< "${MPI_EXTRA_ARGS:-}"
# The MPI pieces are the `mpi` extra: without them every rank would fail alike once started.
if [[ "${DRY_RUN:-0}" != 1 ]]; then
  if ! command -v "${MPIRUN_CMD[0]}" >/dev/null; then
    echo "error: mpirun.sh: no ${MPIRUN_CMD[0]} on PATH (pip install 'open-bert-mlperf[mpi]'" \
      "installs Open MPI's; or set MPIRUN)" >&2
    exit 2
  fi
  if ! "$PYTHON" -c "import mpi4py" 2>/dev/null; then
    echo "error: mpirun.sh: $PYTHON cannot import mpi4py: pip install 'open-bert-mlperf[mpi]'" \
      "(on a system with its own MPI: pip install mpi4py)" >&2
    exit 2
  fi
fi

HOSTS=()
if [[ -n "${HOSTFILE:-}" ]]; then
  HOSTS=(--hostfile "$HOSTFILE")
  MASTER_ADDR="${MASTER_ADDR:-$(awk 'NF && $1 !~ /^#/ {print $1; exit}' "$HOSTFILE")}"
elif [[ "$NNODES" != 1 ]]; then
  echo "mpirun.sh: NNODES=$NNODES needs HOSTFILE" >&2
  exit 2
fi
export MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
export MASTER_PORT="${MASTER_PORT:-29500}"
if [[ "$(id -u)" == 0 ]]; then
  EXTRA+=(--allow-run-as-root)  # Open MPI refuses root without it (containers run as root)
fi

# One flush per node: through mpirun with one process per node when there are several.
if [[ "$NNODES" == 1 ]]; then
  clear_cache "$LAUNCH_DIR/drop_caches.sh"
else
  clear_cache "${MPIRUN_CMD[@]}" "${HOSTS[@]}" -np "$NNODES" --map-by ppr:1:node "${EXTRA[@]}" \
    "$LAUNCH_DIR/drop_caches.sh"
fi
trainer_cmd "$@"
# One `error:` line for the job, not one per rank: the ranks of this node agree through a fresh
# folder (bert/train/launch_env.py: report_error); ranks on other nodes report for themselves.
export OPEN_BERT_EXIT_DIR="$(mktemp -d "${TMPDIR:-/tmp}/open-bert-exit.XXXXXX")"
trap 'rm -rf "$OPEN_BERT_EXIT_DIR"' EXIT
run_cmd "${MPIRUN_CMD[@]}" "${HOSTS[@]}" -np "$NP" --map-by "ppr:$NPROC_PER_NODE:node" \
  --bind-to none -x MASTER_ADDR -x MASTER_PORT -x PATH -x PYTHONPATH -x OPEN_BERT_EXIT_DIR \
  "${EXTRA[@]}" \
  "$LAUNCH_DIR/rank_env.sh" "${TRAINER[@]}"
