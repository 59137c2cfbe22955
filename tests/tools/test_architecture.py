"""The project's shape, checked: imports run down the floors and files stay a readable size.

Every module of the packages sits on one floor, named by its full dotted path (the longest
prefix in FLOORS decides), and imports only its own floor and the ones below: the run-time side
(training, the MLPerf writer, the observer) never reaches up into the offline commands (planner,
submission packaging, conversion) or the developer tools, and the bottom (`bert.core`) imports
nothing of the project. Imports count at any depth (inside functions, `importlib.import_module`
with a literal name) but not under `if TYPE_CHECKING:` (annotations only). No two files import
each other, directly or around a longer loop.

scripts/ holds command lines only: each a thin front end over a package module, none editing
sys.path (nor does any module outside tests/: the project is installed, or on PYTHONPATH). The
facts of the MLPerf log that writer and readers share are stated once (bert/mlperf/constants.py).
No test module imports another: what tests share lives in helper modules (tests/*.py).
"""

from __future__ import annotations

import ast
import re
import io
import subprocess
import tokenize
from pathlib import Path

from bert.mlperf import constants

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 500  # any .py file outside tests/
MAX_ENTRY_LINES = 100  # run_pretraining.py: config -> Trainer -> train()
MAX_SCRIPT_LOGIC_LINES = 100  # any .py under scripts/: code lines, without docstrings/comments
# Bottom to top: a module may import its own floor and the floors below it, never one above.
FLOORS = (
    ("core", ("bert", "bert.core", "bert.build_info")),
    ("kernels and data", ("kernels", "data")),
    ("model and optimizer", ("bert.model", "bert.optim")),
    # bert.config composes every component's section; the run's own sections sit with it
    ("config", ("bert.config", "bert.train.config", "bert.train.graphs.config", "bert.obs.config")),
    ("run", ("bert.train", "bert.obs", "bert.mlperf", "bert.gpu_status")),
    ("offline commands", ("bert.plan", "bert.submission", "bert.convert", "bert.prepare")),
    ("developer tools", ("bert.tools",)),
    ("entry point", ("run_pretraining",)),
)
ROOMS_APART = (("kernels", "data"),)  # one floor, but neither imports the other
# Rooms with one front door: code outside them imports the package (its __init__), never a file
# behind it, so the room can rearrange its files without its users changing.
FRONT_DOORS = ("bert.train.checkpoint",)
# The data-prep benchmarks time the reference algorithm through the tests' own oracles
# (tests/tokenization_oracle.py, reference_instances.py, reference_writer.py: the project keeps the
# oracle in the tests, not in the package), so they put tests/ on sys.path; the only three.
SCRIPT_EXCEPTIONS = {
    "scripts/bench/bench_prepare.py",
    "scripts/bench/compare_tokenizer_library.py",
    "scripts/bench/measure_prepare_sizes.py",
}  # bench_prepare's stand-in text
# The MLPerf log's keys, official and this project's own: every writer and reader names them
# by bert/mlperf/constants.py's names. Words the project also uses for its own things (a
# record's "status", a "seed" option, the "bert" package, the topology keys' namesakes in a
# system description) are not checked; the keys that are also config keys or options elsewhere
# (run.global_batch_size) only in the files of the log.
GENERIC_WORDS = {"seed", "status", "success", "aborted", "bert"}
CONFIG_WORDS = {
    "global_batch_size",
    "gradient_accumulation_steps",
    "eval_samples",
    "start_warmup_step",
}
LOG_KEYS = {getattr(constants, name) for name in constants.OFFICIAL} | {
    constants.DATA_CURRICULUM,
    constants.RESUMED_FROM_CHECKPOINT,
    constants.STOP_REASON,
    constants.TRACKED_STATS,
}
# A fact of the MLPerf log -> whether a string literal states it. Each may appear in one file.
SHARED_FACTS = {
    "ruleset": lambda text: text == "5.0.0",
    "line marker": lambda text: ":::MLLOG" in text,
    "resumed log name": lambda text: "mlperf_resumed_step_" in text,
    "log key": lambda text: text in LOG_KEYS - GENERIC_WORDS - CONFIG_WORDS,
}
# ... and in the files of the log: bert/mlperf/, bert/submission/ and every file that imports
# the constants
LOG_FILE_FACTS = {"log key named like a config key": lambda text: text in CONFIG_WORDS}
LOG_ROOMS = ("bert/mlperf/", "bert/submission/")
FACTS_HOME = "bert/mlperf/constants.py"
FACT_EXCEPTIONS: dict[str, set[str]] = {}
SYS_PATH_EDITS = {"insert", "append", "extend", "remove", "pop", "clear"}


def source_files() -> list[Path]:
    """The .py files git knows (tracked or new, not ignored), as the checkout has them; without
    git (a container image), every .py file outside hidden, build and results folders."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        skip = {"build", "results"}
        return sorted(
            p
            for p in ROOT.rglob("*.py")
            if not any(
                part.startswith(".") or part in skip for part in p.relative_to(ROOT).parts[:-1]
            )
        )
    return sorted(ROOT / name for name in listed.stdout.split() if (ROOT / name).is_file())


def floor_of(module: str) -> int | None:
    """The floor (index into FLOORS) of a project module: its longest listed prefix's."""
    best, floor = -1, None
    for index, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, floor = len(prefix), index
    return floor


def floor_violations(files: list[Path], root: Path = ROOT) -> list[str]:
    """Every import of a project module from a floor below the imported one."""
    modules = {module_name(p, root): p for p in files}
    bad = []
    for name, path in sorted(modules.items()):
        own, where = floor_of(name), path.relative_to(root).as_posix()
        for module in sorted(runtime_imports(path, root)):
            target = _owner(module, modules)
            if target is None or target == name:
                continue
            above = floor_of(target)
            if above > own:
                bad.append(f"{where} ({FLOORS[own][0]}) imports {target} ({FLOORS[above][0]})")
            rooms = {name.split(".")[0], target.split(".")[0]}
            if any(rooms == set(pair) for pair in ROOMS_APART):
                bad.append(f"{where} imports {target} (apart)")
    return bad


def package_files() -> list[Path]:
    return [
        p
        for p in source_files()
        if p.relative_to(ROOT).parts[0] in ("bert", "data", "kernels", "run_pretraining.py")
    ]


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_cycles(files: list[Path], root: Path = ROOT) -> list[list[str]]:
    """Loops in the file-level import graph of the project's modules (every import counts,
    lazy ones too): each as the list of modules around it."""
    modules = {module_name(p, root): p for p in files}
    graph = {
        name: sorted({_owner(m, modules) for m in runtime_imports(path, root)} - {None, name})
        for name, path in modules.items()
    }
    cycles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in graph[node]:
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return cycles


def runtime_imports(path: Path, root: Path = ROOT) -> set[str]:
    """The modules `path` imports when it runs (lazy imports and `importlib.import_module` of a
    literal name too; not the type-only ones under `if TYPE_CHECKING:`); `from pkg import sub`
    names the submodule pkg.sub."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            node.body = []
    package = (
        module_name(path, root).rsplit(".", 1)[0]
        if path.name != "__init__.py"
        else module_name(path, root)
    )
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found |= {f"{base}.{alias.name}" for alias in node.names}
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and (
                getattr(node.func, "attr", None) == "import_module"
                or getattr(node.func, "id", None) in ("__import__", "import_module")
            )
        ):
            found.add(node.args[0].value)
    return found


def _owner(module: str, modules: dict) -> str | None:
    """The project file an import names (`a.b.c` may be a name inside module `a.b`)."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return None


def test_every_module_has_a_floor():
    assert [module_name(p) for p in package_files() if floor_of(module_name(p)) is None] == []


def test_imports_run_down_the_floors():
    assert floor_violations(package_files()) == []


def test_no_import_cycles():
    assert import_cycles([p for p in package_files() if p.name != "run_pretraining.py"]) == []


def test_the_cycle_finder_finds_a_lazy_loop(tmp_path):
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "a.py").write_text("from bert import b\n")
    (tmp_path / "bert" / "b.py").write_text("def f():\n    from bert.a import x\n")
    files = sorted((tmp_path / "bert").glob("*.py"))
    assert import_cycles(files, tmp_path) == [["bert.a", "bert.b", "bert.a"]]


def _tree(root: Path, files: dict[str, str]) -> list[Path]:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return sorted(root / name for name in files)


def test_the_floor_check_reads_full_paths(tmp_path):
    """A run-time module reaching up into a tool, the bottom importing the data layer, and a
    section importing the trainer are caught; a type-only import and a downward one are not;
    a module's floor is its longest listed prefix (bert.train.config is not bert.train)."""
    files = _tree(
        tmp_path,
        {
            "bert/train/trainer.py": (
                "from bert.tools.gpu import window\nfrom bert.core import files\n"
            ),
            "bert/core/files.py": "def f():\n    from data.packing import pack\n",
            "bert/train/config.py": "from bert.train.trainer import Trainer\n",
            "bert/obs/observer.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                "    from bert.submission.package import Run\nfrom bert.train import trainer\n"
            ),
            "bert/tools/gpu/window.py": "from bert.train.trainer import Trainer\n",
            "bert/submission/package.py": "",
            "data/packing.py": "",
        },
    )
    assert floor_violations(files, tmp_path) == [
        "bert/core/files.py (core) imports data.packing (kernels and data)",
        "bert/train/config.py (config) imports bert.train.trainer (run)",
        "bert/train/trainer.py (run) imports bert.tools.gpu.window (developer tools)",
    ]


def test_the_checker_sees_lazy_relative_and_dynamic_imports(tmp_path):
    files = _tree(
        tmp_path,
        {
            "kernels/probe.py": (
                "import importlib\nfrom . import _loader\n"
                "def f():\n    from bert.model import fused\n"
                "    importlib.import_module('data.packing')\n"
            ),
            "kernels/_loader.py": "",
            "bert/model/fused.py": "",
            "data/packing.py": "",
        },
    )
    assert floor_violations(files, tmp_path) == [
        "kernels/probe.py (kernels and data) imports bert.model.fused (model and optimizer)",
        "kernels/probe.py imports data.packing (apart)",
    ]
    assert "kernels._loader" in runtime_imports(files[-1], tmp_path)  # relative: its package


def front_door_violations(files: list[Path], root: Path = ROOT) -> list[str]:
    """Every import, from outside a FRONT_DOORS room, of a module inside it but its __init__."""
    modules = {module_name(p, root): p for p in files}
    bad = []
    for name, path in sorted(modules.items()):
        for module in sorted(runtime_imports(path, root)):
            target = _owner(module, modules) or ""
            bad += [
                f"{path.relative_to(root).as_posix()} imports {target} (behind {door})"
                for door in FRONT_DOORS
                if target.startswith(door + ".") and not (name + ".").startswith(door + ".")
            ]
    return bad


def test_rooms_are_entered_by_their_front_door():
    assert front_door_violations(package_files()) == []


def test_the_front_door_check_finds_a_side_entrance(tmp_path):
    files = _tree(
        tmp_path,
        {
            "bert/train/checkpoint/__init__.py": "from bert.train.checkpoint.save import save\n",
            "bert/train/checkpoint/save.py": "from bert.train.checkpoint import layout\n",
            "bert/train/checkpoint/layout.py": "",
            "bert/train/trainer.py": (
                "from bert.train.checkpoint import Checkpointer\n"
                "def f():\n    from bert.train.checkpoint.layout import step_dir\n"
            ),
        },
    )
    assert front_door_violations(files, tmp_path) == [
        "bert/train/trainer.py imports bert.train.checkpoint.layout (behind bert.train.checkpoint)"
    ]


def test_no_file_over_500_lines_outside_tests():
    long = [
        f"{p.relative_to(ROOT)}: {n} lines"
        for p in source_files()
        if p.relative_to(ROOT).parts[0] != "tests"
        and (n := len(p.read_text().splitlines())) > MAX_LINES
    ]
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
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def logic_lines(source: str) -> int:
    """Lines holding code: not blank, not only a comment, not part of a docstring."""
    layout = {
        tokenize.COMMENT,
        tokenize.NL,
        tokenize.NEWLINE,
        tokenize.INDENT,
        tokenize.DEDENT,
        tokenize.ENCODING,
        tokenize.ENDMARKER,
    }
    code = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in layout:
            code.update(range(token.start[0], token.end[0] + 1))
    return len(code - docstring_lines(ast.parse(source)))


def is_sys_path(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )


def sys_path_edits(source: str) -> list[int]:
    """Lines that change sys.path: a mutating call on it, or an assignment to it or its items."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in SYS_PATH_EDITS
            and is_sys_path(node.func.value)
        ):
            found.append(node.lineno)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(
                is_sys_path(t) or (isinstance(t, ast.Subscript) and is_sys_path(t.value))
                for t in targets
            ):
                found.append(node.lineno)
    return sorted(found)


def descriptions(tree: ast.AST) -> set[int]:
    """The ids of the string nodes that describe a config field (`F(default, doc)`): help text,
    which explains, as docstrings do ("opt_base_learning_rate" names optim.lr's log key)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "F":
            found |= {id(arg) for arg in node.args[1:2]}
            found |= {id(k.value) for k in node.keywords if k.arg == "doc"}
    return found


def imports_log_constants(tree: ast.AST) -> bool:
    return any(
        isinstance(node, ast.ImportFrom)
        and (
            node.module == "bert.mlperf.constants"
            or (node.module == "bert.mlperf" and any(a.name == "constants" for a in node.names))
        )
        for node in ast.walk(tree)
    )


def stated_facts(source: str, log_room: bool = False) -> set[str]:
    """The SHARED_FACTS a file's string literals state (docstrings and field descriptions,
    which only explain, aside); in a file of the log (`log_room`, or one that imports the
    constants) the LOG_FILE_FACTS too."""
    tree = ast.parse(source)
    explained, described = docstring_lines(tree), descriptions(tree)
    facts = dict(SHARED_FACTS)
    if log_room or imports_log_constants(tree):
        facts.update(LOG_FILE_FACTS)
    return {
        fact
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.lineno not in explained
        and id(node) not in described
        for fact, states in facts.items()
        if states(node.value)
    }


def outside_tests() -> list[Path]:
    return [p for p in source_files() if p.relative_to(ROOT).parts[0] != "tests"]


def test_scripts_are_thin_front_ends():
    scripts = [
        p
        for p in outside_tests()
        if p.relative_to(ROOT).parts[0] == "scripts"
        and p.relative_to(ROOT).as_posix() not in SCRIPT_EXCEPTIONS
    ]
    assert scripts, "no scripts found"
    thick = [
        f"{p.relative_to(ROOT)}: {n} lines of logic"
        for p in scripts
        if (n := logic_lines(p.read_text())) > MAX_SCRIPT_LOGIC_LINES
    ]
    assert thick == []


def test_nothing_outside_tests_edits_sys_path():
    edits = [
        f"{p.relative_to(ROOT)}:{line}"
        for p in outside_tests()
        if p.relative_to(ROOT).as_posix() not in SCRIPT_EXCEPTIONS
        for line in sys_path_edits(p.read_text())
    ]
    assert edits == []


def test_shared_mlperf_facts_are_stated_once():
    homes: dict[str, set[str]] = {fact: set() for fact in {**SHARED_FACTS, **LOG_FILE_FACTS}}
    for path in outside_tests():
        name = path.relative_to(ROOT).as_posix()
        for fact in stated_facts(path.read_text(), name.startswith(LOG_ROOMS)):
            homes[fact].add(name)
    for fact, files in homes.items():
        assert files - FACT_EXCEPTIONS.get(fact, set()) == {FACTS_HOME}, fact


def test_the_checkers_find_what_they_look_for():
    thick = '"""doc\nstring"""\n# comment\n\n' + "x = 1\n" * (MAX_SCRIPT_LOGIC_LINES + 1)
    assert logic_lines(thick) == MAX_SCRIPT_LOGIC_LINES + 1
    assert logic_lines('def f():\n    """doc."""\n    return (1,\n            2)  # two\n') == 3
    edits = (
        "import sys\nsys.path.insert(0, 'x')\nsys.path += ['y']\nsys.path[0] = 'z'\n"
        "sys.path = []\nprint(sys.path.index('x'))\n"
    )
    assert sys_path_edits(edits) == [2, 3, 4, 5]
    assert stated_facts('"""ruleset 5.0.0, :::MLLOG"""\nRULESET = "5.0.0"\n') == {"ruleset"}
    assert stated_facts('name = f"mlperf_resumed_step_{n}.log"\nx = ":::MLLOG {"\n') == {
        "resumed log name",
        "line marker",
    }
    # a log key read as a bare string; a config key's namesake only where the log is read
    assert stated_facts('if line.key == "eval_accuracy":\n    pass\n') == {"log key"}
    assert stated_facts('tree = {"run": {"global_batch_size": 8}}\n') == set()
    reader = 'from bert.mlperf.constants import LOG_NAME\nbatch = first["global_batch_size"]\n'
    assert stated_facts(reader) == {"log key named like a config key"}
    assert stated_facts('batch = first["global_batch_size"]\n', log_room=True) != set()
    # what explains is no statement: a docstring, a field's description
    explained = '"""Reads eval_accuracy."""\nlr: float = F(4e-4, "opt_base_learning_rate")\n'
    assert stated_facts(explained) == set()
    assert stated_facts('x = F("run_stop", "doc")\n') == {"log key"}  # a default states it


def test_every_cited_source_is_defined_in_docs_references():
    """Comments and docs cite outside sources by the names docs/references.md defines: the seed
    papers by first author in brackets ([Zeng], ...), the project's facts as REFERENCE n."""

    references = (ROOT / "docs" / "references.md").read_text()
    papers = set(re.findall(r"^\| (\[[\w.]+\]) \|", references, re.M))
    facts = set(re.findall(r"^\| REFERENCE (\d+) \|", references, re.M))
    assert papers == {"[Zeng]", "[Kim]", "[Zhang]", "[Paddle]", "[LightSeq2]"}
    assert facts == {str(n) for n in range(1, 9)}
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    undefined = []
    for name in tracked:
        path = ROOT / name
        if path.suffix not in (".py", ".md", ".yaml", ".cu", ".cpp", ".h") or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        undefined += [f"{name}: {m}" for m in re.findall(r"\b[Ss]eed 00\d\b", text)]
        undefined += [
            f"{name}: REFERENCE {n}"
            for n in re.findall(r"\bREFERENCE (\d+)", text)
            if n not in facts
        ]
    assert undefined == []


# -- names that explain themselves ----------------------------------------------------------------

ISSUE_NUMBER = re.compile(r"\b[Ii]ssues? #?\d+")
CODE_SUFFIXES = (".py", ".sh", ".cu", ".cpp", ".h", ".yaml")


def issue_numbers(text: str) -> list[str]:
    """Mentions of this project's issue tracker by number (a PyTorch issue, named with its
    repository, is a source and stays)."""
    return [
        m.group(0)
        for line in text.splitlines()
        if "pytorch/pytorch issue" not in line
        for m in ISSUE_NUMBER.finditer(line)
    ]


def test_code_says_what_not_which_issue():
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    found = [
        f"{name}: {mention}"
        for name in tracked
        if name.endswith(CODE_SUFFIXES) and (ROOT / name).is_file()
        for mention in issue_numbers((ROOT / name).read_text(errors="replace"))
    ]
    assert found == []
    said = "# " + "issue" + " 35's order\nx = 1  # " + "Issues" + " 22 and 35\n"  # not itself
    assert issue_numbers(said) == ["issue" + " 35", "Issues" + " 22"]
    assert issue_numbers("# cuDNN NaN, pytorch/pytorch issue 196678\n") == []


def test_only_tests_are_named_like_tests():
    """pytest collects test_*.py: a product or tool module so named reads as a test."""
    assert [p for p in outside_tests() if p.name.startswith("test_")] == []


def imports_of_test_modules(files: list[Path], root: Path = ROOT) -> list[str]:
    """Every import, in `files`, of a module that is a test module of the tree (a file
    test_*.py under tests/), at any depth: what tests share lives in a helper module (tests/*.py
    not named test_*, or tests/conftest.py for fixtures), so a test module is only collected."""
    test_names = {p.stem for p in files if p.name.startswith("test_")}
    bad = []
    for path in files:
        for module in sorted(runtime_imports(path, root)):
            if test_names & set(module.split(".")):
                bad.append(f"{path.relative_to(root).as_posix()} imports {module}")
    return bad


def test_no_test_module_imports_another():
    tests = [p for p in source_files() if p.relative_to(ROOT).parts[0] == "tests"]
    assert imports_of_test_modules(tests) == []


def test_the_test_import_check_finds_each_way_in(tmp_path):
    """A lazy import, importlib, a package path and a helper that reaches into a test module;
    a helper, a fixture module and a library whose name merely contains `test_` are fine."""
    files = _tree(
        tmp_path,
        {
            "tests/unit/test_a.py": "def test_x():\n    from test_b import helper\n",
            "tests/unit/test_b.py": "import importlib\nm = importlib.import_module('test_a')\n",
            "tests/integration/test_c.py": "from tests.unit import test_a\nfrom shared import x\n",
            "tests/shared.py": "import test_c\nimport conftest\nfrom latest_tools import y\n",
            "tests/conftest.py": "import shared\n",
        },
    )
    assert imports_of_test_modules(files, tmp_path) == [
        "tests/integration/test_c.py imports tests.unit.test_a",
        "tests/shared.py imports test_c",
        "tests/unit/test_a.py imports test_b.helper",
        "tests/unit/test_b.py imports test_a",
    ]
