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
            raise ModuleNotFoundError(
                f"{name} is hidden by pytest_without.py (the GPU image lacks it)"
            )


def main(argv: list[str] | None = None) -> int:
    """argv: MODULE, then pytest's arguments. Nothing imported here before the finder is in
    place may import MODULE, or the hiding would come too late."""
    argv = sys.argv[1:] if argv is None else argv
    sys.meta_path.insert(0, Hide(argv[0]))
    import pytest

    return pytest.main(argv[1:])
