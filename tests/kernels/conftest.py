"""Fixtures for the kernel tests: GPU gating at run time (helpers live in kernel_checks.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared GPU gates
from gpu_gate import require_kernels  # noqa: E402 (needs the path above)


@pytest.fixture
def cuda_kernels():
    """The kernels package with its extension loaded: skip without a GPU, skip (or, under the
    GPU harness, fail) when the extension does not load.

    A fixture, not a skipif mark: the GPU is queried when a test runs, never at collection.
    """
    return require_kernels()
