"""Fixtures that test modules of several files share (plain helper functions live in the
tests/*.py helper modules: a test module imports helpers, never another test module)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory) -> Path:
    """The tiny run's shards and eval file (tests/tiny_run.py, TINY_DATA), once per module."""
    from tiny_run import make_tiny_data  # data.synthetic: only where a test asks for the data

    return make_tiny_data(tmp_path_factory.mktemp("tiny_data"))
