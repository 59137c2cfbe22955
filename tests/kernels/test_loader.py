"""`import kernels` needs no build; a missing build fails only when a fused op is asked for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import kernels
from kernels import _library, _loader, build


def test_import_needs_no_build_and_no_gpu():
    # A fresh interpreter: importing must not initialize CUDA nor load the extension.
    code = (
        "import torch, kernels; "
        "assert not torch.cuda.is_initialized(); "
        "assert kernels.load_error() is None; "
        "assert hasattr(torch.ops.bert_kernels, 'bdrln_forward')"
    )
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
    y = torch.ops.bert_kernels.bdrln_forward(
        x, torch.zeros(1024), x, torch.ones(1024), torch.zeros(1024), 0.0, 1e-5, 0, 0
    )[0]
    torch.testing.assert_close(y, torch.nn.functional.layer_norm(2 * x, (1024,), eps=1e-5))


def test_raise_check_fails_a_library_that_cannot_raise(tmp_path, capsys):
    """kernels.build refuses a library whose rejected inputs do not become RuntimeError (the
    2026-11-26 H100 build died with a segfault instead): here the 'library' cannot even load,
    so the child exits 1, and the error names what happened and prints the diagnostics."""
    from kernels.raise_check import check_library_raises

    not_a_library = tmp_path / "bert_kernels_cuda.so"
    not_a_library.write_bytes(b"not an ELF file")
    with pytest.raises(
        RuntimeError, match="does not raise on a rejected input: the check exited 1"
    ):
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
    schemas = [
        name
        for path in sorted(_library.CSRC.glob("*/*_api.cpp"))
        for name in re.findall(r'm\.def\(\s*"(\w+)\(', path.read_text())
    ]
    assert sorted(_library.RAW_OPS) == sorted(schemas) and len(set(schemas)) == len(schemas)
    from bert.model.fused import FUSED_OPS
    from bert.optim.registry import OPTIMIZERS

    registered = {op.kernel for op in FUSED_OPS.values()}
    registered |= {
        spec.sharded.fused_op
        for spec in OPTIMIZERS.values()
        if spec.sharded is not None and spec.sharded.fused_op
    }
    assert registered == set(_library.OPS)  # every kernel is registered once, and only those


def test_a_library_that_cannot_raise_fails_its_build(monkeypatch, capsys):
    """kernels.build exits 1 with the check's one-line reason when the library cannot raise."""
    from kernels import raise_check

    def cannot_raise(path):
        raise raise_check.LibraryCannotRaise("the library does not raise on a rejected input")

    monkeypatch.setattr(build, "build", lambda *a, **k: Path(a[0]) / "bert_kernels_cuda.so")
    monkeypatch.setattr(build, "registered_ops", lambda: list(build.RAW_OPS))
    monkeypatch.setattr(build, "check_library_raises", cannot_raise)
    assert build.main(["--arch", "9.0"]) == 1
    assert "FAILED" in capsys.readouterr().err


def test_the_library_links_the_processs_own_libstdcxx_first(tmp_path):
    """The fix of the 2026-11-26 crash (kernels/build.py STDCXX_LIBRARY): the link names, by
    path, the libstdc++ this process has mapped, and keeps it NEEDED."""
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r--p 00000000 fd:01 11 /usr/lib/libc10.so\n"
        "7f01-7f02 r-xp 00001000 fd:01 12 /opt/x/lib/libstdc++.so.6.0.33\n"
        "7f02-7f03 rw-p 00000000 00:00 0\n"
    )
    assert build.loaded_stdcxx(maps) == "/opt/x/lib/libstdc++.so.6.0.33"
    assert build.loaded_stdcxx(tmp_path / "absent") is None
    flags = build.stdcxx_ldflags()  # this process: torch is imported, so one is mapped
    assert flags[0] == "-Wl,--no-as-needed" and flags[2] == "-Wl,--as-needed"
    assert Path(flags[1]).name.startswith("libstdc++.so") and Path(flags[1]).is_file()


def test_require_traces_under_torch_compile_once_loaded(monkeypatch):
    """The fused ops call require() inside the model, which torch.compile traces with
    fullgraph=True; the 2026-11-26 window's compile tests failed because dynamo cannot enter
    the loader's lock. Once loaded, require() must not touch it."""
    import torch

    monkeypatch.setattr(_loader, "_loaded", True)

    def f(x):
        _loader.require(_library.OPS[0])
        return x * 2

    x = torch.ones(3)
    torch._dynamo.reset()
    assert torch.equal(torch.compile(f, backend="eager", fullgraph=True)(x), x * 2)
