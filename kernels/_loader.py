"""Loads the compiled extension on first request; importing `kernels` never needs it.

Where the library comes from, in order:
1. BERT_KERNELS_JIT=1: compile (or reuse) it in the JIT cache with `kernels.build.jit_load()`;
2. $BERT_KERNELS_LIB: path to a prebuilt bert_kernels_cuda.so;
3. build/kernels/bert_kernels_cuda.so, what `python -m kernels.build` writes.
A failure is stored and raised, with the original error chained, by `require()`, i.e. only when a
configuration asks for a fused op. Nothing here touches the GPU: loading the library only
registers the raw ops under torch.ops.bert_kernels_cuda.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from kernels import _library

if TYPE_CHECKING:
    from torch import Tensor

ENV_JIT = "BERT_KERNELS_JIT"
ENV_LIB = "BERT_KERNELS_LIB"

_lock = threading.Lock()
_loaded = False
_error: BaseException | None = None


def _load_library() -> None:
    import torch

    if torch.version.cuda is None:
        raise RuntimeError(f"PyTorch {torch.__version__} is a CPU-only build")
    if os.environ.get(ENV_JIT) == "1":
        from kernels import build

        build.jit_load()
    else:
        path = Path(os.environ.get(ENV_LIB) or _library.library_path())
        if not path.is_file():
            raise FileNotFoundError(f"no compiled extension at {path}")
        torch.ops.load_library(str(path))
    found = _library.registered_ops()
    if len(found) != len(_library.RAW_OPS):
        raise RuntimeError(f"the extension registered only {found}; rebuild it")


def load() -> bool:
    """Load the extension once; True on success. Failures are remembered, not raised."""
    global _loaded, _error
    if _loaded:  # without the lock: torch.compile traces this call, and cannot trace a lock
        return True
    with _lock:
        if not _loaded and _error is None:
            try:
                _load_library()
                _loaded = True
            except Exception as err:  # noqa: BLE001 - stored and re-raised by require()
                _error = err
        return _loaded


def available() -> bool:
    """Whether the fused CUDA kernels can be used in this process (loads them if needed)."""
    return load()


def load_error() -> BaseException | None:
    """Why the extension could not be loaded (None if it loaded or was never tried)."""
    return _error


def require(op: str) -> None:
    """Raise a RuntimeError, with the original error chained, unless `op` can run on CUDA."""
    if op not in _library.OPS:
        raise ValueError(f"unknown fused op {op!r}; the kernels are {', '.join(_library.OPS)}")
    if load():
        return
    raise RuntimeError(
        f"fused kernel {op!r} was requested but the CUDA extension is unavailable: {_error}. "
        "Build it with `python -m kernels.build` (CUDA PyTorch, nvcc and ninja; CUDA_HOME set, "
        f"see kernels/README.md), point {ENV_LIB} at a prebuilt .so, or set {ENV_JIT}=1 to "
        "compile on first use; otherwise turn the fused option off in the config."
    ) from _error


def implementation(on: Tensor, op: str, raw: str, reference: Callable) -> Callable:
    """What a custom op's body calls for tensors on the device of `on`: on CUDA the extension's
    raw op `raw` of kernel `op` (`require`d first), elsewhere its plain-PyTorch `reference`."""
    if not on.is_cuda:
        return reference
    require(op)
    import torch  # the caller's tensors have imported it; the loader itself stays light

    return getattr(getattr(torch.ops, _library.LIB_NAME), raw)


def reset() -> None:
    """Forget a stored failure so the next request tries again (tests, after a build)."""
    global _error
    with _lock:
        _error = None
