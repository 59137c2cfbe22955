#!/usr/bin/env bash
# The GPU harness: one command per stage on a lent GPU machine, each well inside 10 minutes,
# each leaving summary.json and one tarball of logs and raw JSON in $OUT (kernels/VALIDATION.md).
#
#   scripts/bench/prepare_gpu_carry.sh             # here, first: wheels + commit into .whl/
#   OUT=DIR scripts/bench/validate_gpu.sh kernels     # build, every GPU test, microbenchmarks
#   OUT=DIR scripts/bench/validate_gpu.sh throughput  # BERT-Large bf16 without custom kernels
#   OUT=DIR scripts/bench/validate_gpu.sh fused       # with the fused switches, per-op profile
#   OUT=DIR scripts/bench/validate_gpu.sh --dry-run kernels   # on a CPU: every step needing no GPU
#
# Environment: OUT (default results/gpu-validation/<stage>), PYTHON (default python3),
# BERT_COMMIT (else .whl/COMMIT, else git), BUDGET_S (seconds for the whole stage, default 540).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
cd "$ROOT"
# The GPU machine's copy of the tree is not installed: every command below (and its
# subprocesses) imports the project from here.
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

# Wheels the bare GPU image lacks (mlperf-logging, pydantic) travel in .whl/; install them
# into a private folder so nothing of the image's own site-packages changes. They are built for
# the image's Python (3.12): a dry run here uses this machine's own packages instead.
dry_run=0
for arg in "$@"; do [[ "$arg" == "--dry-run" ]] && dry_run=1; done
if (( ! dry_run )) && compgen -G ".whl/*.whl" >/dev/null; then
  site="${TMPDIR:-/tmp}/bert-carried-site"
  if ! "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" .whl/*.whl; then
    echo "error: validate_gpu.sh: installing the carried wheels in .whl/ failed" >&2
    exit 2
  fi
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
# The commit the records name: the stamp prepare_gpu_carry.sh wrote beside the wheels, ahead of
# any git the GPU machine's copy may hold (the 2026-11-28b window's records named a stale one).
if (( ! dry_run )) && [[ -z "${BERT_COMMIT:-}" && -f .whl/COMMIT ]]; then
  export BERT_COMMIT="$(cat .whl/COMMIT)"
fi
exec "$PYTHON" scripts/bench/validate_gpu.py "$@"
