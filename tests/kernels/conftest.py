"""Fixtures for the kernel tests: GPU gating at run time (helpers live in kernel_checks.py)."""
from __future__ import annotations

import pytest
import torch


@pytest.fixture
def cuda_kernels():
    """Skip unless there is a CUDA device and the compiled extension loads.

    A fixture, not a skipif mark: the GPU is queried when a test runs, never at collection.
    """
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    import kernels

    if not kernels.available():
        pytest.skip(f"CUDA extension not available ({kernels.load_error()}); "
                    "build it with `python -m kernels.build`")
    return kernels
