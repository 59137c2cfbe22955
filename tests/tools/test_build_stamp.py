"""An installed copy knows its commit: setup.py stamps it into the build (bert/_build_info.py),
and run.json and the tools' result files read it where there is no git to ask."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from bert.obs import run_record
from bert.tools import common

from commands import run_python

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_git(monkeypatch):
    """A machine without git: every subprocess that would run it fails to start."""

    def missing(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(subprocess, "run", missing)
    monkeypatch.delenv("BERT_COMMIT", raising=False)
    monkeypatch.setattr(common, "ROOT", Path("/nonexistent"))  # no .whl/COMMIT either


def stamp(monkeypatch, commit: str | None) -> None:
    monkeypatch.setitem(sys.modules, "bert._build_info", types.SimpleNamespace(COMMIT=commit))


def test_without_git_the_build_stamp_is_the_commit(no_git, monkeypatch):
    stamp(monkeypatch, "0123abcd")
    assert run_record.code_version()["git_commit"] == "0123abcd"
    assert run_record.code_version()["package_version"]  # the installed version beside it
    assert common.git_commit() == "0123abcd"


def test_without_git_or_stamp_the_commit_is_unknown(no_git, monkeypatch):
    monkeypatch.setitem(sys.modules, "bert._build_info", None)  # import fails: no stamp
    assert run_record.code_version()["git_commit"] is None
    assert common.git_commit() == "unknown"


def test_the_stamp_wins_over_a_git_folder_around_an_installed_copy(monkeypatch):
    monkeypatch.delenv("BERT_COMMIT", raising=False)
    stamp(monkeypatch, "feedbeef")
    assert run_record.code_version()["git_commit"] == "feedbeef"
    assert common.git_commit() == "feedbeef"


def test_the_build_writes_the_stamp(tmp_path):
    """setup.py's build_py writes bert/_build_info.py into the build, never into the tree."""
    env = {**os.environ, "BERT_COMMIT": "cafe0123"}
    built = run_python("setup.py", "-q", "build_py", "--build-lib", tmp_path, timeout=300, env=env)
    assert built.returncode == 0, built.stderr
    info = (tmp_path / "bert" / "_build_info.py").read_text()
    assert "COMMIT = 'cafe0123'" in info
    assert not (ROOT / "bert" / "_build_info.py").exists()
