"""Run-time gates of the GPU tests: skip on a machine without a GPU, fail where the GPU harness
asks for everything (scripts/bench/validate_gpu.py sets the variables below).

Gates are called inside tests, never at collection: the GPU is queried only when a test runs.
"""

from __future__ import annotations

import os

import pytest
import torch

# Set by the GPU harness: a missing GPU or a missing/failing kernel build is then a failure,
# so a broken build cannot look green by skipping every kernel test.
REQUIRE_GPU = "BERT_REQUIRE_GPU"
REQUIRE_KERNELS = "BERT_REQUIRE_KERNELS"


def _required(variable: str) -> bool:
    return os.environ.get(variable) == "1"


def require_cuda() -> None:
    if not torch.cuda.is_available():
        if _required(REQUIRE_GPU):
            pytest.fail(f"no CUDA GPU, but {REQUIRE_GPU}=1", pytrace=False)
        pytest.skip("needs a CUDA GPU")


def require_kernels():
    """The `kernels` package with its CUDA extension loaded, on a machine with a GPU."""
    require_cuda()
    import kernels

    if not kernels.available():
        message = (
            f"CUDA extension not available ({kernels.load_error()}); "
            "build it with `python -m kernels.build`"
        )
        if _required(REQUIRE_KERNELS):
            pytest.fail(f"{message} [{REQUIRE_KERNELS}=1]", pytrace=False)
        pytest.skip(message)
    return kernels
