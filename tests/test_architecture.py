"""The project's shape, checked: imports run one way and files stay a readable size.

Arrows point from user to used: run_pretraining.py -> bert/ -> data/, kernels/. `data/` and
`kernels/` import nothing of `bert/`, and `kernels/` nothing of `data/`, lazily or not (imports
inside functions, under TYPE_CHECKING and `importlib.import_module("...")` count too).
"""
from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 500  # any .py file outside tests/
MAX_ENTRY_LINES = 100  # run_pretraining.py: config -> Trainer -> train()
# package -> the project packages it must not import
FORBIDDEN = {"data": {"bert"}, "kernels": {"bert", "data"}}


def source_files() -> list[Path]:
    """The .py files git knows (tracked or new, not ignored), as the checkout has them; without
    git (a container image), every .py file outside hidden, build and results folders."""
    try:
        listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                                 "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        skip = {"build", "results"}
        return sorted(p for p in ROOT.rglob("*.py") if not any(
            part.startswith(".") or part in skip for part in p.relative_to(ROOT).parts[:-1]))
    return sorted(ROOT / name for name in listed.stdout.split() if (ROOT / name).is_file())


def imported_modules(path: Path, root: Path = ROOT) -> set[str]:
    """Every module `path` imports, at any depth: statements and importlib calls."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this file's package
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                found.add(".".join(base + ([node.module] if node.module else [])))
            else:
                found.add(node.module)
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and (getattr(node.func, "attr", None) == "import_module"
                   or getattr(node.func, "id", None) in ("__import__", "import_module"))):
            found.add(node.args[0].value)
    return found


def violations(package: str, files: list[Path], root: Path = ROOT) -> list[str]:
    bad = []
    for path in files:
        if path.relative_to(root).parts[0] != package:
            continue
        for module in sorted(imported_modules(path, root)):
            if module.split(".")[0] in FORBIDDEN[package]:
                bad.append(f"{path.relative_to(root).as_posix()} imports {module}")
    return bad


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_run_one_way(package):
    assert violations(package, source_files()) == []


def test_the_checker_sees_lazy_relative_and_dynamic_imports(tmp_path):
    probe = tmp_path / "kernels" / "probe.py"
    probe.parent.mkdir()
    probe.write_text("import importlib\nfrom . import _loader\n"
                     "def f():\n    from bert.model import fused\n"
                     "    importlib.import_module('data.packing')\n")
    assert violations("kernels", [probe], tmp_path) == [
        "kernels/probe.py imports bert.model", "kernels/probe.py imports data.packing"]
    assert "kernels" in imported_modules(probe, tmp_path)  # relative: its own package


def test_no_file_over_500_lines_outside_tests():
    long = [f"{p.relative_to(ROOT)}: {n} lines" for p in source_files()
            if p.relative_to(ROOT).parts[0] != "tests"
            and (n := len(p.read_text().splitlines())) > MAX_LINES]
    assert long == []


def test_the_entry_point_stays_thin():
    assert len((ROOT / "run_pretraining.py").read_text().splitlines()) < MAX_ENTRY_LINES
