"""`import kernels` needs no build; a missing build fails only when a fused op is asked for."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import kernels
from kernels import _loader, build


def test_import_needs_no_build_and_no_gpu():
    # A fresh interpreter: importing must not initialize CUDA nor load the extension.
    code = ("import torch, kernels; "
            "assert not torch.cuda.is_initialized(); "
            "assert kernels.load_error() is None; "
            "assert hasattr(torch.ops.bert_kernels, 'bdrln_forward')")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_require_raises_clearly_without_a_build(monkeypatch, tmp_path):
    monkeypatch.setenv(_loader.ENV_LIB, str(tmp_path / "missing.so"))
    monkeypatch.delenv(_loader.ENV_JIT, raising=False)
    monkeypatch.setattr(_loader, "_loaded", False)
    monkeypatch.setattr(_loader, "_error", None)
    assert not kernels.available()
    with pytest.raises(RuntimeError, match="python -m kernels.build") as info:
        kernels.require("bias_dropout_residual_layernorm")
    assert info.value.__cause__ is kernels.load_error()
    assert "CPU-only" in str(info.value) or "missing.so" in str(info.value)


def test_require_rejects_unknown_ops():
    with pytest.raises(ValueError, match="unknown fused op"):
        kernels.require("flash_attention")


def test_build_lists_two_translation_units_per_op():
    sources = build.sources()
    assert len(sources) == 2 * len(build.OPS)
    assert all(Path(s).is_file() for s in sources)


def test_build_without_cuda_torch_fails_with_exit_status(monkeypatch, capsys):
    import torch

    if torch.version.cuda is not None:
        pytest.skip("this PyTorch can build the extension")
    assert build.main(["--check"]) == 1
    assert "CPU-only" in capsys.readouterr().err


def test_cpu_fallback_runs_reference_even_without_a_build(monkeypatch):
    import torch

    monkeypatch.setattr(_loader, "_error", RuntimeError("not built"))
    x = torch.randn(3, 1024)
    y = torch.ops.bert_kernels.bdrln_forward(x, torch.zeros(1024), x, torch.ones(1024),
                                             torch.zeros(1024), 0.0, 1e-5, 0, 0)[0]
    torch.testing.assert_close(y, torch.nn.functional.layer_norm(2 * x, (1024,), eps=1e-5))


def test_raise_check_fails_a_library_that_cannot_raise(tmp_path, capsys):
    """kernels.build refuses a library whose rejected inputs do not become RuntimeError (the
    2026-11-26 H100 build died with a segfault instead): here the 'library' cannot even load,
    so the child exits 1, and the error names what happened and prints the diagnostics."""
    from kernels.raise_check import check_library_raises

    not_a_library = tmp_path / "bert_kernels_cuda.so"
    not_a_library.write_bytes(b"not an ELF file")
    with pytest.raises(RuntimeError, match="does not raise on a rejected input: the check "
                                           "exited 1"):
        check_library_raises(not_a_library)
    assert "kernels.raise_check diagnostics:" in capsys.readouterr().err


def test_ops_are_read_from_their_own_sources():
    """A fused op is its own files plus one registration (bert/model/fused.py's FUSED_OPS, or
    an optimizer record's fused_op): the kernel lists are read from kernels/csrc, never kept."""
    import re

    import kernels
    from kernels import _library

    for op in _library.OPS:
        folder = _library.CSRC / op
        assert (folder / f"{op}.cu").is_file() and (folder / f"{op}_api.cpp").is_file()
        assert (_library.CSRC.parent / f"{op}.py").is_file()
        assert getattr(kernels, op).__name__ == f"kernels.{op}"  # imported by the package
    schemas = [name for path in sorted(_library.CSRC.glob("*/*_api.cpp"))
               for name in re.findall(r'm\.def\(\s*"(\w+)\(', path.read_text())]
    assert sorted(_library.RAW_OPS) == sorted(schemas) and len(set(schemas)) == len(schemas)
    from bert.model.fused import FUSED_OPS
    from bert.optim.registry import OPTIMIZERS

    registered = {op.kernel for op in FUSED_OPS.values()}
    registered |= {spec.sharded.fused_op for spec in OPTIMIZERS.values()
                   if spec.sharded is not None and spec.sharded.fused_op}
    assert registered == set(_library.OPS)  # every kernel is registered once, and only those


def test_a_library_that_cannot_raise_is_relinked_once_with_libstdcxx_first(monkeypatch, capsys):
    """The fallback of the 2026-11-26 H100 crash: when the built library cannot raise, the build
    relinks it with libstdc++ ahead of torch's libraries in a child process (this one has the
    first library loaded), and fails for good when that link cannot raise either."""
    from kernels import raise_check

    builds = []

    def fake_build(build_dir, arch, jobs, verbose, ninja=None, extra_ldflags=None):
        builds.append(extra_ldflags)
        return Path(build_dir) / "bert_kernels_cuda.so"

    def cannot_raise(path):
        raise raise_check.LibraryCannotRaise("the library does not raise on a rejected input")

    children = []
    monkeypatch.setattr(build, "build", fake_build)
    monkeypatch.setattr(build, "registered_ops", lambda: list(build.RAW_OPS))
    monkeypatch.setattr(build, "check_library_raises", cannot_raise)
    monkeypatch.setattr(build.subprocess, "call", lambda argv: children.append(argv) or 0)
    assert build.main(["--arch", "9.0"]) == 0  # the child's verdict
    assert builds == [None]
    assert children == [[sys.executable, "-m", "kernels.build", "--arch", "9.0",
                         "--link-stdcxx-first"]]
    assert "relinking with libstdc++" in capsys.readouterr().err
    assert build.main(["--arch", "9.0", "--link-stdcxx-first"]) == 1  # no second fallback
    assert builds[-1] == build.STDCXX_FIRST and len(children) == 1
    assert "with libstdc++ linked first too" in capsys.readouterr().err
