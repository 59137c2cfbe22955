"""Names and paths of the compiled extension, shared by the loader and the build.

The ops are read from their own sources, so adding one never edits a list here: an op is a
folder kernels/csrc/<op>/ holding <op>.cu and <op>_api.cpp, and its raw C++ ops are the
`m.def("name(...` schemas of that binding (shipped with the package: setup.py package_data).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

LIB_NAME = "bert_kernels_cuda"  # also the torch.ops namespace of the raw C++ ops
CSRC = Path(__file__).resolve().parent / "csrc"
SHARED_FOLDER = "common"  # helpers every op includes, not an op
_SCHEMA = re.compile(r'm\.def\(\s*"(\w+)\(')


def _ops() -> tuple[str, ...]:
    return tuple(
        sorted(
            d.name
            for d in CSRC.iterdir()
            if d.is_dir() and d.name != SHARED_FOLDER and (d / f"{d.name}_api.cpp").is_file()
        )
    )


def _raw_ops(ops: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(
        name for op in ops for name in _SCHEMA.findall((CSRC / op / f"{op}_api.cpp").read_text())
    )


OPS = _ops()  # the kernels/ ops, e.g. "dense" (kernels/dense.py, kernels/csrc/dense/)
RAW_OPS = _raw_ops(OPS)  # what the library registers under torch.ops.bert_kernels_cuda
DEFAULT_BUILD_DIR = Path(__file__).resolve().parent.parent / "build" / "kernels"


def library_path(build_dir: str | os.PathLike = DEFAULT_BUILD_DIR) -> Path:
    return Path(build_dir) / f"{LIB_NAME}.so"


def registered_ops() -> list[str]:
    """The raw ops the loaded library registered (after a build or torch.ops.load_library)."""
    import torch

    namespace = getattr(torch.ops, LIB_NAME)
    return [name for name in RAW_OPS if hasattr(namespace, name)]
