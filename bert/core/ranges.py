"""Named ranges around the phases of a step (data_wait, forward, backward, optimizer, exchange,
eval), for torch.profiler traces and for nsys (NVTX).

A range costs nothing while nobody records: `named(name)` returns a shared null context unless
the profiler window is open (bert/obs/profiler.py) or NVTX ranges were asked for
(`profile.nvtx`, for runs under nsys). The switch is a module flag, so that code far from the
trainer (the sharded optimizer's exchange) can mark its ranges without being handed an object.
"""

from __future__ import annotations

import contextlib

import torch

RANGE_NAMES = ("data_wait", "forward", "backward", "optimizer", "exchange", "eval")

_NULL = contextlib.nullcontext()
_record = False  # torch.profiler is recording: record_function ranges
_nvtx = False  # NVTX ranges (CUDA): nsys sees them


def set_recording(on: bool) -> None:
    global _record
    _record = bool(on)


def set_nvtx(on: bool) -> None:
    global _nvtx
    _nvtx = bool(on) and torch.cuda.is_available()


def active() -> bool:
    return _record or _nvtx


def named(name: str):
    """A context manager marking `name`; a no-op (one flag test) when nothing records."""
    if not (_record or _nvtx):
        return _NULL
    return _Range(name)


class _Range:
    def __init__(self, name: str) -> None:
        self.name = name
        self._function = None
        self._pushed = False

    def __enter__(self) -> "_Range":
        if _nvtx:
            torch.cuda.nvtx.range_push(self.name)
            self._pushed = True
        if _record:
            self._function = torch.profiler.record_function(self.name)
            self._function.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._function is not None:
            self._function.__exit__(*exc)
        if self._pushed:
            torch.cuda.nvtx.range_pop()
