"""How the GPU harness (validate.py) launches a step: in its own process group, killed whole
past its timeout, and the GPU tests with their pytest arguments and environment.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from bert.tools.common import ROOT

TEST_TIMEOUT_S = 180  # per GPU test (pytest-timeout)


def run_capped(argv: list[str], env: dict, log, timeout: float) -> int:
    """Run a command in its own process group; past `timeout` the whole group is killed (a
    pytest's or a build's children too, so nothing outlives its step); 124 then."""
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        return 124


def pytest_timeout_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("pytest_timeout") is not None


def gpu_pytest_args(target: str, junit: Path) -> list[str]:
    """pytest's arguments for the GPU tests of `target` (a file or a folder)."""
    return ["-m", "gpu", target, "-q", "-rfEs", "-p", "no:cacheprovider", f"--junitxml={junit}"]


def timeout_args() -> list[str]:
    """A per-test limit, where the image has pytest-timeout."""
    return ["-p", "timeout", f"--timeout={TEST_TIMEOUT_S}"] if pytest_timeout_available() else []


def gpu_test_env(require_kernels: bool) -> dict[str, str]:
    """A missing GPU fails the GPU tests; a missing kernel build too once the build passed."""
    return {"BERT_REQUIRE_GPU": "1", "BERT_REQUIRE_KERNELS": "1" if require_kernels else "0"}
