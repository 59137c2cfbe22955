# Sourced by the launchers: dry-run printing, page-cache clearing and the trainer command line.
#
# Environment (all optional):
#   DRY_RUN=1           print the commands (shell-quoted, prefixed with "+") instead of running
#   CLEAR_CACHE=0       do not flush the page cache before the run (logged as cache_clear false)
#   CLEAR_CACHE_SUDO=1  flush with passwordless sudo when not root
#   CACHE_CLEARED_KEY   config key that tells the trainer whether the flush happened
#                       (default run.cache_cleared; empty: not passed)
#   PYTHON              interpreter for run_pretraining.py (default: python)
#   PROGRAM             the training program (default: PROJECT_DIR/run_pretraining.py; the
#                       tests run tests/faults.py, the same program with injected faults)

LAUNCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PROJECT_DIR="${PROJECT_DIR:-$(dirname "$LAUNCH_DIR")}"
PYTHON="${PYTHON:-python}"
PROGRAM="${PROGRAM:-$PROJECT_DIR/run_pretraining.py}"
CACHE_CLEARED_KEY="${CACHE_CLEARED_KEY-run.cache_cleared}"
# The project's modules (launch/torchrun.py imports bert) come from this tree, installed or not.
export PYTHONPATH="$PROJECT_DIR${PYTHONPATH:+:$PYTHONPATH}"

# Run a command, or print it when DRY_RUN=1.
run_cmd() {
  if [[ "${DRY_RUN:-0}" == 1 ]]; then
    printf '+'
    printf ' %q' "$@"
    printf '\n'
    return 0
  fi
  "$@"
}

# clear_cache CMD...: flush the page cache with CMD (which exits 0 only if it flushed) and set
# CACHE_CLEARED to true or false, so the trainer logs `cache_clear` truthfully (MLPerf rule:
# flush before each run). A dry run flushes nothing, so it reports false.
clear_cache() {
  CACHE_CLEARED=false
  if [[ "${CLEAR_CACHE:-1}" != 1 ]]; then
    echo "page cache: not cleared (CLEAR_CACHE=${CLEAR_CACHE})" >&2
    return 0
  fi
  if [[ "${DRY_RUN:-0}" == 1 ]]; then
    run_cmd "$@"
    return 0
  fi
  if "$@"; then
    CACHE_CLEARED=true
  fi
}

# trainer_cmd CONFIG [ARGS...]: fills the array TRAINER with the trainer's command line.
trainer_cmd() {
  local config="$1"
  shift
  TRAINER=("$PYTHON" "$PROGRAM" --config "$config" "$@")
  if [[ -n "$CACHE_CLEARED_KEY" ]]; then
    TRAINER+=(--set "$CACHE_CLEARED_KEY=$CACHE_CLEARED")
  fi
}

# usage_if_no_config "$@": the launchers all take CONFIG first.
require_config() {
  if [[ $# -lt 1 || "$1" == -h || "$1" == --help ]]; then
    sed -n '2,/^$/s/^# \{0,1\}//p' "$0" >&2
    exit 2
  fi
}

# run_stop_status LOG: the status of LOG's run_stop line (success, aborted), or "none" when the
# log has none (a run killed before it could close it) or does not exist.
run_stop_status() {
  local status
  status="$({ grep -h '"key": "run_stop"' "$1" 2>/dev/null || true; } | tail -n 1 \
    | sed -n 's/.*"status": "\([a-z_]*\)".*/\1/p')"
  echo "${status:-none}"
}

gpus_on_this_node() {
  local n
  n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  echo "${n:-0}" | awk '{print ($1 > 0) ? $1 : 1}'
}
