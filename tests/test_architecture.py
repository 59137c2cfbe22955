"""The project's shape, checked: imports run one way and files stay a readable size.

Arrows point from user to used: run_pretraining.py -> bert/ -> data/, kernels/ -> bert/core/.
`data/` and `kernels/` import nothing of `bert/` but its bottom layer `bert.core` (the bad-input
errors, atomic writes), `kernels/` nothing of `data/`, and `bert.core` nothing of the project,
lazily or not (imports inside functions, under TYPE_CHECKING and
`importlib.import_module("...")` count too). No two files import each other, directly or
around a longer loop.
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
FORBIDDEN = {"data": {"bert"}, "kernels": {"bert", "data"}, "bert.core": {"bert", "data", "kernels"}}
BOTTOM = "bert.core"  # the one part of bert/ that every package may import


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
        if not module_name(path, root).startswith(package + "."):
            continue
        for module in sorted(imported_modules(path, root)):
            below = module == BOTTOM or module.startswith(BOTTOM + ".")  # itself, for bert.core
            if module.split(".")[0] in FORBIDDEN[package] and not below:
                bad.append(f"{path.relative_to(root).as_posix()} imports {module}")
    return bad


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_cycles(files: list[Path], root: Path = ROOT) -> list[list[str]]:
    """Loops in the file-level import graph of the project's modules (every import counts,
    lazy ones too): each as the list of modules around it."""
    modules = {module_name(p, root): p for p in files}
    graph = {name: sorted({_owner(m, modules) for m in runtime_imports(path, root)} - {None,
                                                                                      name})
             for name, path in modules.items()}
    cycles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in graph[node]:
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return cycles


def runtime_imports(path: Path, root: Path = ROOT) -> set[str]:
    """The modules `path` imports when it runs (lazy imports too; not the type-only ones under
    `if TYPE_CHECKING:`); `from pkg import sub` names the submodule pkg.sub."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            node.body = []
    package = module_name(path, root).rsplit(".", 1)[0] if path.name != "__init__.py" else \
        module_name(path, root)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return found


def _owner(module: str, modules: dict) -> str | None:
    """The project file an import names (`a.b.c` may be a name inside module `a.b`)."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return None


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_run_one_way(package):
    assert violations(package, source_files()) == []


def test_no_import_cycles():
    package_files = [p for p in source_files()
                     if p.relative_to(ROOT).parts[0] in ("bert", "data", "kernels")]
    assert import_cycles(package_files) == []


def test_the_cycle_finder_finds_a_lazy_loop(tmp_path):
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "a.py").write_text("from bert import b\n")
    (tmp_path / "bert" / "b.py").write_text("def f():\n    from bert.a import x\n")
    files = sorted((tmp_path / "bert").glob("*.py"))
    assert import_cycles(files, tmp_path) == [["bert.a", "bert.b", "bert.a"]]


def test_the_bottom_layer_is_below_everything(tmp_path):
    """data/ may import bert.core, bert.core may import nothing of the project."""
    (tmp_path / "data").mkdir()
    (tmp_path / "bert" / "core").mkdir(parents=True)
    ok = tmp_path / "data" / "x.py"
    ok.write_text("from bert.core.errors import DataError\nfrom bert.model import m\n")
    core = tmp_path / "bert" / "core" / "y.py"
    core.write_text("import data.packing\n")
    assert violations("data", [ok], tmp_path) == ["data/x.py imports bert.model"]
    assert violations("bert.core", [core], tmp_path) == ["bert/core/y.py imports data.packing"]


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
