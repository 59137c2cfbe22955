"""The project's shape, checked: imports run one way and files stay a readable size.

Arrows point from user to used: run_pretraining.py -> bert/ -> data/, kernels/. `data/` and
`kernels/` import nothing of `bert/`, and `kernels/` nothing of `data/`, lazily or not (imports
inside functions, under TYPE_CHECKING and `importlib.import_module("...")` count too).

scripts/ holds command lines only: each a thin front end over a package module, none editing
sys.path (nor does any module outside tests/: the project is installed, or on PYTHONPATH). The
facts of the MLPerf log that writer and readers share are stated once (bert/mlperf/constants.py).
"""
from __future__ import annotations

import ast
import io
import subprocess
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 500  # any .py file outside tests/
MAX_ENTRY_LINES = 100  # run_pretraining.py: config -> Trainer -> train()
MAX_SCRIPT_LOGIC_LINES = 100  # any .py under scripts/: code lines, without docstrings/comments
# package -> the project packages it must not import
FORBIDDEN = {"data": {"bert"}, "kernels": {"bert", "data"}}
# Known exceptions, each to go. scripts/prepare_data.py moves after the tokenizer branch lands
# (data/prepare/ is being changed there).
SCRIPT_EXCEPTIONS = {"scripts/prepare_data.py"}
# A fact of the MLPerf log -> whether a string literal states it. Each may appear in one file.
SHARED_FACTS = {
    "ruleset": lambda text: text == "5.0.0",
    "line marker": lambda text: ":::MLLOG" in text,
    "resumed log name": lambda text: "mlperf_resumed_step_" in text,
}
FACTS_HOME = "bert/mlperf/constants.py"
# bert/train/trainer.py names its logs itself until the trainer branch lands; then it takes
# bert.train.logfile.log_name and this exception goes.
FACT_EXCEPTIONS = {"resumed log name": {"bert/train/trainer.py"}}
SYS_PATH_EDITS = {"insert", "append", "extend", "remove", "pop", "clear"}


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


# -- scripts are thin, nothing edits sys.path, shared facts live once ------------------------------

def docstring_lines(tree: ast.AST) -> set[int]:
    """Line numbers of every module, class and function docstring."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def logic_lines(source: str) -> int:
    """Lines holding code: not blank, not only a comment, not part of a docstring."""
    layout = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
              tokenize.ENCODING, tokenize.ENDMARKER}
    code = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in layout:
            code.update(range(token.start[0], token.end[0] + 1))
    return len(code - docstring_lines(ast.parse(source)))


def is_sys_path(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "path"
            and isinstance(node.value, ast.Name) and node.value.id == "sys")


def sys_path_edits(source: str) -> list[int]:
    """Lines that change sys.path: a mutating call on it, or an assignment to it or its items."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in SYS_PATH_EDITS and is_sys_path(node.func.value)):
            found.append(node.lineno)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(is_sys_path(t) or (isinstance(t, ast.Subscript) and is_sys_path(t.value))
                   for t in targets):
                found.append(node.lineno)
    return sorted(found)


def stated_facts(source: str) -> set[str]:
    """The SHARED_FACTS a file's string literals state (docstrings, which only explain, aside)."""
    tree = ast.parse(source)
    explained = docstring_lines(tree)
    return {fact for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.lineno not in explained
            for fact, states in SHARED_FACTS.items() if states(node.value)}


def outside_tests() -> list[Path]:
    return [p for p in source_files() if p.relative_to(ROOT).parts[0] != "tests"]


def test_scripts_are_thin_front_ends():
    scripts = [p for p in outside_tests() if p.relative_to(ROOT).parts[0] == "scripts"
               and p.relative_to(ROOT).as_posix() not in SCRIPT_EXCEPTIONS]
    assert scripts, "no scripts found"
    thick = [f"{p.relative_to(ROOT)}: {n} lines of logic" for p in scripts
             if (n := logic_lines(p.read_text())) > MAX_SCRIPT_LOGIC_LINES]
    assert thick == []


def test_nothing_outside_tests_edits_sys_path():
    edits = [f"{p.relative_to(ROOT)}:{line}" for p in outside_tests()
             if p.relative_to(ROOT).as_posix() not in SCRIPT_EXCEPTIONS
             for line in sys_path_edits(p.read_text())]
    assert edits == []


def test_shared_mlperf_facts_are_stated_once():
    homes: dict[str, set[str]] = {fact: set() for fact in SHARED_FACTS}
    for path in outside_tests():
        for fact in stated_facts(path.read_text()):
            homes[fact].add(path.relative_to(ROOT).as_posix())
    for fact, files in homes.items():
        assert files - FACT_EXCEPTIONS.get(fact, set()) == {FACTS_HOME}, fact


def test_the_checkers_find_what_they_look_for():
    thick = '"""doc\nstring"""\n# comment\n\n' + "x = 1\n" * (MAX_SCRIPT_LOGIC_LINES + 1)
    assert logic_lines(thick) == MAX_SCRIPT_LOGIC_LINES + 1
    assert logic_lines('def f():\n    """doc."""\n    return (1,\n            2)  # two\n') == 3
    edits = ("import sys\nsys.path.insert(0, 'x')\nsys.path += ['y']\nsys.path[0] = 'z'\n"
             "sys.path = []\nprint(sys.path.index('x'))\n")
    assert sys_path_edits(edits) == [2, 3, 4, 5]
    assert stated_facts('"""ruleset 5.0.0, :::MLLOG"""\nRULESET = "5.0.0"\n') == {"ruleset"}
    assert stated_facts('name = f"mlperf_resumed_step_{n}.log"\nx = ":::MLLOG {"\n') == {
        "resumed log name", "line marker"}
