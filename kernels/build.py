"""Build the CUDA extension, ahead of time or just in time.

Ahead of time (Dockerfile, CI compile check, a lent GPU machine):

    python -m kernels.build                      # -> build/kernels/bert_kernels_cuda.so
    python -m kernels.build --check              # clean build in a temp folder, exit 1 on error
    python -m kernels.build --arch "9.0" --build-dir /tmp/k

Just in time (development): `BERT_KERNELS_JIT=1` makes `kernels.require(...)` call `jit_load()`,
which builds into a per-torch-version cache folder and rebuilds only what changed.

Needs a CUDA build of PyTorch, nvcc and ninja; set CUDA_HOME to the toolkit folder whose lib64/
holds libcudart.so. Each op is two translation units: `<op>.cu` (kernels, no torch headers, so nvcc
is quick) and `<op>_api.cpp` (checks and registration, the only files that see torch headers).
The dense op links cuBLASLt: from CUDA_HOME when the toolkit has it, else from the nvidia-* wheels
that a pip-installed PyTorch brings (`cublas_flags()`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from kernels.raise_check import check_library_raises
from kernels._library import DEFAULT_BUILD_DIR, LIB_NAME, OPS, RAW_OPS, library_path, registered_ops

DEFAULT_ARCH_LIST = "8.0;9.0"  # A100, H100/H200
# The C++ runtime the library links: the very libstdc++ this process (torch) has loaded, named
# by path ahead of torch's libraries. Why: on the 2026-11-26 GPU image (torch 2.11, Ubuntu g++
# 13.3) the default link, and one with -lstdc++ first, gave a library that carried its own copy
# of the C++ stream code and listed no libstdc++; formatting an integer into a TORCH_CHECK
# message crashed in that copy (a segfault instead of a RuntimeError). Linked this way the same
# build raised, and 260 GPU kernel tests passed
# (benchmarks/results/gpu/2026-11-26b_window/diag_stdcxx_link.json).
STDCXX_LIBRARY = "libstdc++.so"
CSRC = Path(__file__).resolve().parent / "csrc"

CXX_FLAGS = ["-O3"]
CUDA_FLAGS = ["-O3", "-lineinfo"]
# Headers that the dense op's cuBLASLt calls and torch's ATen/cuda/CUDAContextLight.h include.
CUDA_LIB_HEADERS = ("cublasLt.h", "cublas_v2.h", "cusparse.h", "cusolverDn.h")


def sources(ops: tuple[str, ...] = OPS) -> list[str]:
    """The two translation units of each op, in a fixed order."""
    return [str(CSRC / op / name) for op in ops for name in (f"{op}.cu", f"{op}_api.cpp")]


def cublas_flags() -> tuple[list[str], list[str]]:
    """(compile flags, link flags) for cuBLASLt, the library the dense op calls.

    A full CUDA toolkit has the headers and libcublasLt.so under CUDA_HOME. A pip-installed
    PyTorch instead brings them in its nvidia-* wheels (nvidia/cu13/ for CUDA 13; nvidia/cublas/,
    nvidia/cusparse/, ... for CUDA 12), the very library torch loads; those folders are added as
    -isystem after CUDA_HOME's, so the toolkit's own CUDA runtime headers still win.
    """
    from torch.utils.cpp_extension import CUDA_HOME

    toolkit = Path(CUDA_HOME or "/usr/local/cuda")
    if (toolkit / "include" / "cublasLt.h").is_file() and any(
        (toolkit / lib / "libcublasLt.so").exists() for lib in ("lib64", "lib")
    ):
        return [], ["-lcublasLt"]  # torch's build already adds -L$CUDA_HOME/lib64
    includes, libs = [], []
    for root in _nvidia_wheel_roots():
        for pkg in sorted(p for p in root.iterdir() if p.is_dir()):
            if any((pkg / "include" / h).is_file() for h in CUDA_LIB_HEADERS):
                includes.append(pkg / "include")
            libs += sorted((pkg / "lib").glob("libcublasLt.so*"))
    if not any((inc / "cublasLt.h").is_file() for inc in includes) or not libs:
        raise RuntimeError(
            f"cuBLASLt not found: no cublasLt.h and libcublasLt.so under "
            f"{toolkit} nor in the nvidia-* wheels beside torch; install the "
            "toolkit's cuBLAS or the nvidia-cublas wheel matching torch"
        )
    lib = libs[0]  # versioned (libcublasLt.so.13): wheels ship no unversioned link
    return (
        [f for inc in includes for f in ("-isystem", str(inc))],
        [f"-L{lib.parent}", f"-l:{lib.name}"],
    )


def _nvidia_wheel_roots() -> list[Path]:
    import importlib.util

    spec = importlib.util.find_spec("nvidia")
    return [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []


def jit_cache_dir() -> Path:
    """Per torch/CUDA version, so a build never meets a torch it was not compiled against."""
    import torch

    root = os.environ.get("BERT_KERNELS_CACHE") or Path.home() / ".cache" / "bert_kernels"
    return Path(root) / f"torch{torch.__version__}-cuda{torch.version.cuda}"


def _check_toolchain() -> None:
    import torch

    if torch.version.cuda is None:
        raise RuntimeError(
            f"PyTorch {torch.__version__} is a CPU-only build; building the "
            "kernels needs a CUDA build (e.g. the .venv-cuda environment)"
        )
    if not os.environ.get("CUDA_HOME") and shutil.which("nvcc") is None:
        raise RuntimeError(
            "nvcc not found: set CUDA_HOME to the CUDA toolkit folder "
            "(the one whose lib64/ holds libcudart.so), e.g. /usr/local/cuda"
        )


def loaded_stdcxx(maps: str | os.PathLike = "/proc/self/maps") -> str | None:
    """The path of the libstdc++ this process has mapped (torch loads one), or None where the
    process map cannot tell (not Linux)."""
    try:
        lines = Path(maps).read_text().splitlines()
    except OSError:
        return None
    paths = (line.split()[-1] for line in lines if len(line.split()) >= 6)
    return next((p for p in paths if Path(p).name.startswith(STDCXX_LIBRARY)), None)


def stdcxx_ldflags() -> list[str]:
    """Link flags naming the process's libstdc++ first and keeping it NEEDED (see above)."""
    import torch  # noqa: F401 - maps torch's libstdc++ into this process

    path = loaded_stdcxx()
    return ["-Wl,--no-as-needed", path, "-Wl,--as-needed"] if path else []


def build(
    build_dir: str | os.PathLike = DEFAULT_BUILD_DIR,
    arch_list: str | None = None,
    jobs: int | None = None,
    verbose: bool = False,
    ninja: bool | None = None,
) -> Path:
    """Compile and load the extension; returns the .so path.

    arch_list: TORCH_CUDA_ARCH_LIST syntax ("8.0;9.0"); default: $TORCH_CUDA_ARCH_LIST if set,
    else sm_80 and sm_90. Never inferred from a local GPU, so the result does not depend on
    the machine that built it. ninja: incremental, parallel build through
    torch.utils.cpp_extension.load (default when ninja is installed); False compiles serially
    with setuptools, for machines without ninja.
    """
    _check_toolchain()
    os.environ["TORCH_CUDA_ARCH_LIST"] = (
        arch_list or os.environ.get("TORCH_CUDA_ARCH_LIST") or DEFAULT_ARCH_LIST
    )
    if jobs is not None:
        os.environ["MAX_JOBS"] = str(jobs)
    import torch
    from torch.utils.cpp_extension import is_ninja_available, load

    build_dir = Path(build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    if ninja is None:
        ninja = is_ninja_available()
    blas_cflags, blas_ldflags = cublas_flags()
    blas_ldflags = [*stdcxx_ldflags(), *blas_ldflags]  # first: ahead of torch's libraries
    if ninja:
        load(
            name=LIB_NAME,
            sources=sources(),
            extra_cflags=CXX_FLAGS + blas_cflags,
            extra_cuda_cflags=CUDA_FLAGS + blas_cflags,
            extra_ldflags=blas_ldflags,
            extra_include_paths=[str(CSRC / "common")],
            build_directory=str(build_dir),
            is_python_module=False,
            verbose=verbose,
        )
    else:
        _build_with_setuptools(build_dir, verbose, blas_cflags, blas_ldflags)
        torch.ops.load_library(str(library_path(build_dir)))
    return library_path(build_dir)


def _build_with_setuptools(
    build_dir: Path, verbose: bool, blas_cflags: list[str], blas_ldflags: list[str]
) -> None:
    """Serial fallback: setuptools' build_ext with torch's CUDAExtension, no ninja needed."""
    from setuptools import Distribution
    from torch.utils.cpp_extension import BuildExtension, CUDAExtension

    ext = CUDAExtension(
        LIB_NAME,
        sources(),
        include_dirs=[str(CSRC / "common")],
        extra_compile_args={"cxx": CXX_FLAGS + blas_cflags, "nvcc": CUDA_FLAGS + blas_cflags},
        extra_link_args=blas_ldflags,
    )
    dist = Distribution(
        {
            "name": LIB_NAME,
            "ext_modules": [ext],
            "cmdclass": {"build_ext": BuildExtension.with_options(use_ninja=False)},
        }
    )
    dist.verbose = int(verbose)
    cmd = dist.get_command_obj("build_ext")
    cmd.build_lib = str(build_dir / "setuptools")
    cmd.build_temp = str(build_dir / "setuptools" / "tmp")
    dist.run_command("build_ext")
    built = Path(cmd.get_ext_fullpath(LIB_NAME))
    shutil.copyfile(built, library_path(build_dir))


def jit_load(verbose: bool = False) -> Path:
    """Build into the JIT cache (no-op when up to date) and load into this process."""
    return build(jit_cache_dir(), verbose=verbose)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kernels.build",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--build-dir", default=str(DEFAULT_BUILD_DIR), help="output folder (default: build/kernels)"
    )
    parser.add_argument(
        "--arch",
        default=None,
        help=f"TORCH_CUDA_ARCH_LIST, e.g. '8.0;9.0' (default {DEFAULT_ARCH_LIST})",
    )
    parser.add_argument("--jobs", type=int, default=None, help="parallel compile jobs (MAX_JOBS)")
    parser.add_argument(
        "--check",
        action="store_true",
        help="compile check for CI: clean build in a temporary folder, verify the "
        "ops registered, delete it; exit 1 on any failure",
    )
    parser.add_argument(
        "--no-ninja",
        action="store_true",
        help="compile serially with setuptools (when ninja is not installed)",
    )
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    tmp = tempfile.mkdtemp(prefix="bert_kernels_check_") if args.check else None
    try:
        path = build(
            tmp or args.build_dir,
            args.arch,
            args.jobs,
            args.verbose,
            ninja=False if args.no_ninja else None,
        )
        ops = registered_ops()
        if len(ops) != len(RAW_OPS):
            raise RuntimeError(f"library built but only registered {ops}")
        check_library_raises(Path(path))
    except Exception as err:  # noqa: BLE001 - report any build failure as exit status 1
        print(
            f"kernels.build: FAILED after {time.perf_counter() - start:.0f}s: {err}",
            file=sys.stderr,
        )
        return 1
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    where = "checked (temporary build removed)" if args.check else str(path)
    print(
        f"kernels.build: OK, archs {os.environ['TORCH_CUDA_ARCH_LIST']}, ops {', '.join(ops)}; "
        f"{where}; {time.perf_counter() - start:.0f}s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
