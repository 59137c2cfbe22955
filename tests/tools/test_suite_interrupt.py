"""The README's test command prints its counts even when stopped by SIGTERM (`timeout`, a CI
limit): the root conftest.py turns the signal into a KeyboardInterrupt, after which pytest
reports what ran. Without it (the control below) a killed session prints no counts."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SESSION = """
import pathlib, time

def test_fast():
    pass

def test_waits(tmp_path_factory):
    pathlib.Path({started!r}).write_text("x")
    time.sleep(120)
"""


def stopped_session(folder: Path, with_conftest: bool, workers: list[str] = ()) -> str:
    """A pytest session in `folder` (one quick test, one that waits), sent SIGTERM once the
    waiting test has started; its output. `workers`: pytest-xdist's options, as the README's
    command gives them."""
    folder.mkdir()
    started = folder / "started"
    (folder / "test_session.py").write_text(SESSION.format(started=str(started)))
    if with_conftest:
        shutil.copy(ROOT / "conftest.py", folder / "conftest.py")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            *workers,
            "test_session.py",
        ],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    for _ in range(600):
        if started.exists():
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("workers", [[], ["-n", "2", "--dist", "loadfile"]], ids=["one", "xdist"])
def test_a_terminated_session_prints_its_counts(tmp_path, workers):
    out = stopped_session(tmp_path / "ours", with_conftest=True, workers=workers)
    assert "stopped by SIGTERM" in out and "1 passed" in out, out
    # the control: the same session without the hook dies without a summary
    bare = stopped_session(tmp_path / "bare", with_conftest=False, workers=workers)
    assert "passed" not in bare, bare
