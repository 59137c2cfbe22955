"""The commit an installed copy was built from: bert/_build_info.py, which setup.py writes into
the wheel at build time (a checkout has none: git answers there instead)."""

from __future__ import annotations

import importlib


def stamped_commit() -> str | None:
    """The build's commit, or None when this copy was not built by setup.py (a checkout, an
    editable install) or was built without git."""
    try:
        info = importlib.import_module("bert._build_info")
    except ImportError:
        return None
    return getattr(info, "COMMIT", None)
