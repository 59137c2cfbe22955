"""`python scripts/bench/pytest_without.py MODULE [pytest args]`: pytest with MODULE unimportable.

The GPU harness's dry run collects the GPU tests as the bare GPU image would, which has no
mlperf_logging: a module that imports it at module level fails the collection here too.
"""
from __future__ import annotations

import sys


class Hide:
    """A meta-path finder that refuses one top-level module and its submodules."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, name, path=None, target=None):
        if name == self.name or name.startswith(self.name + "."):
            raise ModuleNotFoundError(f"{name} is hidden by pytest_without.py (the GPU image lacks it)")


if __name__ == "__main__":
    sys.meta_path.insert(0, Hide(sys.argv[1]))
    import pytest

    sys.exit(pytest.main(sys.argv[2:]))
