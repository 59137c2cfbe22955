"""Implementations named by a dotted path and imported when first used.

A registry's records (attention backends, fused ops, optimizers) carry what the config layer
reads: names, descriptions, shape checks, GPU status. Their implementations need torch, which
takes seconds to import; a record that names its implementation as "package.module:function"
lets the config, `--help-config`, `--print-config` and the planner read the records without
it (tests/unit/test_instant_commands.py). The model and optimizer builders `load` them.
"""

from __future__ import annotations

import importlib
from typing import Callable, Union

# A function, or where one is: "package.module:function".
Ref = Union[Callable, str]


def load(ref: Ref) -> Callable:
    """The function `ref` is or names (importing its module on first use)."""
    if callable(ref):
        return ref
    module, sep, name = ref.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"implementation {ref!r}: expected 'package.module:function'")
    return getattr(importlib.import_module(module), name)


def lazy_exports(
    package: str, modules: dict[str, tuple[str, ...]]
) -> tuple[list[str], Callable[[str], object]]:
    """A package's `__all__` and its `__getattr__` (PEP 562), which imports each name of
    `modules` (a module -> the names it defines) on first use, so importing the package itself
    stays light."""
    exports = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(exports[name]), name)

    return sorted(exports), __getattr__
