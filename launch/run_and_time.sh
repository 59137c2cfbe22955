#!/usr/bin/env bash
# NUM_RUNS training runs with distinct seeds, collected for submission:
# RESULTS_DIR/run_<i>/ holds each run's output, RESULTS_DIR/result_<i>.txt its MLPerf log.
#
#   launch/run_and_time.sh CONFIG [--set key=value ...]
#   NUM_RUNS=10 LAUNCHER=launch/mpirun.sh launch/run_and_time.sh CONFIG
#
# Environment: NUM_RUNS (10: a BERT submission), RESULTS_DIR (results/<config name>_<date>),
# LAUNCHER (launch/torchrun.sh; any script taking CONFIG [ARGS...]), SEEDS (space-separated,
# one per run) or SEED_BASE (seed of run i is SEED_BASE + i; default random), DRY_RUN=1,
# RECORD_SAMPLES=1 (each run writes its audit trail, `--record-samples`, to
# RESULTS_DIR/run_<i>/samples; one --record-samples DIR for the series would keep only the
# last run's trail, as a run starting at step 0 rewrites it).
# A run that does not converge (exit status 1) is kept (MLPerf allows one per submission); bad
# input (exit status 2) stops the series. The summary gives each run's exit status and its
# log's run_stop status (success: converged; under srun.sh a run that did not converge may
# also end with 143, see there).

set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
require_config "$@"
CONFIG="$1"
shift

NUM_RUNS="${NUM_RUNS:-10}"
LAUNCHER="${LAUNCHER:-$LAUNCH_DIR/torchrun.sh}"
STAMP="$(date +%Y%m%d_%H%M%S)"
RESULTS_DIR="${RESULTS_DIR:-$PROJECT_DIR/results/$(basename "$CONFIG" .yaml)_$STAMP}"
read -r -a SEED_LIST <<< "${SEEDS:-}"
if [[ ${#SEED_LIST[@]} -eq 0 ]]; then
  SEED_BASE="${SEED_BASE:-$(( $(od -An -N4 -tu4 /dev/urandom) % 1000000000 ))}"
  for ((i = 0; i < NUM_RUNS; i++)); do SEED_LIST+=($((SEED_BASE + i))); done
elif [[ ${#SEED_LIST[@]} -ne $NUM_RUNS ]]; then
  echo "run_and_time.sh: SEEDS has ${#SEED_LIST[@]} seeds for NUM_RUNS=$NUM_RUNS" >&2
  exit 2
fi
if [[ $(printf '%s\n' "${SEED_LIST[@]}" | sort -u | wc -l) -ne $NUM_RUNS ]]; then
  echo "run_and_time.sh: seeds must differ between runs (${SEED_LIST[*]})" >&2
  exit 2
fi

run_cmd mkdir -p "$RESULTS_DIR"
STATUSES=()
OUTCOMES=()
for ((i = 0; i < NUM_RUNS; i++)); do
  RUN_DIR="$RESULTS_DIR/run_$i"
  echo "=== run $i of $NUM_RUNS: seed ${SEED_LIST[$i]}, output $RUN_DIR" >&2
  PER_RUN=(--set "run.seed=${SEED_LIST[$i]}" --set "run.output_dir=$RUN_DIR")
  if [[ "${RECORD_SAMPLES:-0}" == 1 ]]; then
    PER_RUN+=(--record-samples "$RUN_DIR/samples")
  fi
  status=0
  "$LAUNCHER" "$CONFIG" "$@" "${PER_RUN[@]}" || status=$?
  STATUSES+=("$status")
  if [[ "$status" == 2 ]]; then
    echo "run_and_time.sh: run $i stopped on bad input; not starting the others" >&2
    exit 2
  fi
  OUTCOMES+=("$(run_stop_status "$RUN_DIR/mlperf.log")")
  if [[ "${DRY_RUN:-0}" == 1 || -f "$RUN_DIR/mlperf.log" ]]; then
    run_cmd cp "$RUN_DIR/mlperf.log" "$RESULTS_DIR/result_$i.txt"
  else
    echo "run_and_time.sh: run $i wrote no $RUN_DIR/mlperf.log (exit status $status)" >&2
  fi
done
echo "run_and_time.sh: exit statuses ${STATUSES[*]}, run_stop ${OUTCOMES[*]}" \
  "(success: converged), results in $RESULTS_DIR" >&2
echo "  package them: open-bert-package $RESULTS_DIR --system NAME --out DIR" >&2
