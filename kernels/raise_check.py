"""After a build: does the library turn a rejected input into a Python RuntimeError?

Why: on the 2026-11-26 H100 window (torch 2.11, the image's g++ 13.3), every kernel binding's
first TORCH_CHECK failure killed the process with a segmentation fault instead of raising, so a
user's bad tensor would end a run without a word (benchmarks/results/gpu/2026-11-26_window/
diag_extension_throw.json). A library that cannot raise must fail its build, not a training run.

The check needs no GPU: it calls the dense op's CUDA kernel directly through the dispatcher with
CPU tensors, twice: a 2-D one fails the first device check (a message with a Device in it), a
1-D one the first shape check (a message with a list of integers). The second case is the one
that crashed on the 2026-11-26 window (benchmarks/results/gpu/2026-11-26b_window/
diag_stdcxx_link.json): the library's own copy of the C++ stream code died formatting an
integer, while messages without one raised, so a check of the first case alone passed a
broken library. It runs in a child process, since a broken library takes its process down.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

EXPECTED = ("must be a CUDA tensor", "must be 2-D [tokens, features], got [8]")
CHILD = """
import sys, torch
torch.ops.load_library(sys.argv[1])
op = torch.ops.bert_kernels_cuda.dense_forward.default
cuda = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
w = torch.zeros(8, 8, dtype=torch.float16)
for x in (w, w[0]):  # a device message, then a shape message (integers)
    try:
        op.redispatch(cuda, x, w, None, False)
    except RuntimeError as err:
        print("raised:", str(err).splitlines()[0], flush=True)
    else:
        print("did not raise", flush=True)
"""


class LibraryCannotRaise(RuntimeError):
    """The built library dies (or stays silent) instead of raising on a rejected input."""


def check_library_raises(library: Path, timeout_s: float = 120) -> None:
    """Raise RuntimeError, with what the build's link produced, unless the library raises."""
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(library)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    if child.returncode == 0 and all(e in child.stdout for e in EXPECTED):
        return
    how = (
        f"died with signal {-child.returncode}"
        if child.returncode < 0
        else f"exited {child.returncode}"
        if child.returncode
        else f"printed {child.stdout.strip()!r}"
    )
    print(diagnostics(library), file=sys.stderr)
    raise LibraryCannotRaise(
        f"the library does not raise on a rejected input: the check {how} "
        "instead of raising RuntimeError (diagnostics above)"
    )


def diagnostics(library: Path) -> str:
    """What decides how exceptions cross the library: its linked libraries, whether it carries
    its own C++ runtime, the compiler and link line the build used, and a backtrace where
    cuda-gdb can take one."""
    lines = ["kernels.raise_check diagnostics:"]
    lines += _tool_lines(["readelf", "-d", str(library)], r"NEEDED|RPATH|RUNPATH")
    lines += _tool_lines(
        ["nm", "-D", "--defined-only", str(library)],
        r"__cxa_throw|__gxx_personality|_Unwind_RaiseException",
    )
    lines += _tool_lines(["c++", "--version"], r".", limit=1)
    ninja_file = library.parent / "build.ninja"
    if ninja_file.is_file():
        lines += [
            f"  {line}"
            for line in ninja_file.read_text().splitlines()
            if re.match(r"\s*(cxx|ldflags|rule link|  command = \$cxx)\b", line)
        ]
    if shutil.which("cuda-gdb"):
        lines += _tool_lines(
            [
                "cuda-gdb",
                "-batch",
                "-ex",
                "run",
                "-ex",
                "bt 25",
                "--args",
                sys.executable,
                "-c",
                CHILD,
                str(library),
            ],
            r"^#\d+",
            limit=25,
        )
    return "\n".join(lines)


def _tool_lines(argv: list[str], pattern: str, limit: int = 40) -> list[str]:
    if shutil.which(argv[0]) is None:
        return [f"  ({argv[0]} not installed)"]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return [f"  ({argv[0]} timed out)"]
    matched = [
        f"  {' '.join(argv[:2])}: {line.strip()}"
        for line in (out.stdout + out.stderr).splitlines()
        if re.search(pattern, line)
    ]
    return matched[:limit] or [f"  {' '.join(argv[:2])}: nothing matched {pattern!r}"]
