#!/usr/bin/env bash
# One command on a machine with a GPU: build the kernels against that machine's PyTorch, run
# every GPU test (kernels, the fused model against the reference model, the CUDA attention
# backends, the sync-free step, the pinned/side-stream data copy, the fused LAMB), then every
# kernel microbenchmark. Logs, JUnit XML and benchmark JSON go to $OUT_DIR.
#
#   scripts/bench/validate_gpu.sh                   # -> results/kernels-validation/
#   OUT_DIR=/tmp/v PYTHON=python3 scripts/bench/validate_gpu.sh
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
OUT_DIR="${OUT_DIR:-$ROOT/results/kernels-validation}"
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
export PATH="$CUDA_HOME/bin:$PATH"
mkdir -p "$OUT_DIR"
cd "$ROOT"

"$PYTHON" -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())" \
  | tee "$OUT_DIR/device.txt"
{ date -u +%Y-%m-%dT%H:%M:%SZ; git rev-parse HEAD 2>/dev/null; } | tee -a "$OUT_DIR/device.txt"
if ! "$PYTHON" -m kernels.build --build-dir build/kernels 2>&1 | tee "$OUT_DIR/build.log"; then
  echo "validate_gpu.sh: build failed, see $OUT_DIR/build.log" >&2
  exit 1
fi
status=0
"$PYTHON" -m pytest -m gpu tests -q -rs --junitxml="$OUT_DIR/gpu-tests.xml" 2>&1 \
  | tee "$OUT_DIR/gpu-tests.log" || status=1
for bench in scripts/bench/bench_*.py; do
  name="$(basename "$bench" .py)"
  "$PYTHON" "$bench" --out "$OUT_DIR/$name.json" 2>&1 | tee "$OUT_DIR/$name.log" || status=1
done
exit $status
