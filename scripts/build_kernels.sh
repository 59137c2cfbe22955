#!/usr/bin/env bash
# Build the CUDA kernels ahead of time, or (--check) compile-check them for CI.
#
#   scripts/build_kernels.sh            # -> build/kernels/bert_kernels_cuda.so
#   scripts/build_kernels.sh --check    # clean build in a temp folder; exit 1 on any failure
#   TORCH_CUDA_ARCH_LIST="9.0" scripts/build_kernels.sh --build-dir /tmp/k
#
# Needs a CUDA build of PyTorch matching nvcc (here: .venv-cuda with torch 2.14.1 + CUDA 13.0;
# override with PYTHON=...), nvcc and ninja. Other arguments go to `python -m kernels.build`.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv-cuda/bin/python}"
if [[ ! -x "$PYTHON" ]]; then
  echo "build_kernels.sh: $PYTHON not found. Create it with:" >&2
  echo "  python3 -m venv .venv-cuda && .venv-cuda/bin/pip install torch==2.14.1 numpy pytest ninja" >&2
  exit 1
fi
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
export PATH="$CUDA_HOME/bin:$(dirname "$PYTHON"):$PATH"  # nvcc, and the venv's ninja
export MAX_JOBS="${MAX_JOBS:-2}"
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-8.0;9.0}"

cd "$ROOT"
exec "$PYTHON" -m kernels.build "$@"
