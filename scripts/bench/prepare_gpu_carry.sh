#!/usr/bin/env bash
# Before a GPU window, on this (networked) machine: fill the git-ignored .whl/ folder with what
# the bare GPU image lacks, and the commit the results will be recorded under.
#
#   scripts/bench/prepare_gpu_carry.sh      # then pass carry=[".whl"] to the device call
#
# The GPU image has Python 3.12 with torch, pytest, pytest-timeout, h5py, numpy, pandas, scipy
# and pyyaml, but no mlperf-logging, no pydantic (bert/core/settings.py) and no .git
# (../.library/device/KINDS.md). pydantic's own dependencies travel with it (--no-deps there).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
WHEELS=(mlperf-logging==4.1.68 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0
        typing-inspection==0.4.5 typing-extensions==4.16.0)
cd "$ROOT"
mkdir -p .whl
rm -f .whl/*.whl
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
  -d .whl "${WHEELS[@]}"
commit="$(git rev-parse HEAD)"
[[ -z "$(git status --porcelain --untracked-files=no)" ]] || commit="$commit-dirty"
echo "$commit" > .whl/COMMIT.tmp && mv .whl/COMMIT.tmp .whl/COMMIT
echo "prepare_gpu_carry: .whl/ holds $(ls .whl/*.whl | wc -l) wheel(s), commit $commit"
