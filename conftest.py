"""Repository root on sys.path, so tests import `bert`, `data` and `kernels` as a user would.

A test session stopped by SIGTERM (`timeout`, a CI job's limit) still prints its counts: the
signal becomes a KeyboardInterrupt, after which pytest reports what ran (passed, failed) before
it exits. Without this, a killed suite left no summary at all (a suite killed at 322 of 1,545
tests with no counts)."""

from __future__ import annotations

import signal


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")


def pytest_configure(config):
    # only in the session's own process (workers a test starts keep their own handlers)
    signal.signal(signal.SIGTERM, _interrupt)
