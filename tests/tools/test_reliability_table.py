"""The README's "Reliability" section names the tests that keep each promise: every test file it
names exists under tests/ and holds tests, and every test it names by `::name` (or by a
`…fragment…` of a name, after the file it follows) is one of that file's test functions. The
class-by-class table covers each input class of the hardening issue.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# a backticked reference: a test file (with its path, or by name), maybe `::` a test
REFERENCE = re.compile(r"`((?:tests/[\w/]+/)?test_\w+\.py)(?:::([^`]+))?`|`(…[^`]+)`")
# what the class-by-class table must cover (the input classes of the hardening issue)
CLASSES = ["Numbers", "NUL", "YAML", "JSON", "no file", "output path", "checkpoint", "Logs"]


def section(text: str) -> str:
    start = text.index("## Reliability")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def find_test_file(name: str, root: Path = ROOT) -> Path | None:
    """`tests/...py` as written, or the one file of that name under tests/."""
    if name.startswith("tests/"):
        path = root / name
        return path if path.is_file() else None
    found = sorted((root / "tests").rglob(name))
    return found[0] if len(found) == 1 else None


def functions_in(path: Path) -> list[str]:
    return re.findall(r"^def (test_\w+)", path.read_text(), re.M)


def problems(text: str, root: Path = ROOT) -> list[str]:
    """What is wrong with the references of a Reliability section's `text` (tests under
    `root`)."""
    found = []
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        current: Path | None = None  # a bare `…fragment…` refers to the file before it
        for match in REFERENCE.finditer(line):
            name, test, fragment = match.groups()
            if name:
                current = find_test_file(name, root)
                if current is None:
                    found.append(f"{name}: no such test file under tests/")
                    continue
                if not functions_in(current):
                    found.append(f"{name}: holds no tests")
                    continue
            if current is None:
                continue  # a fragment with no file before it: reported where the file is
            wanted = test or fragment
            if wanted and not _names_a_test(current, wanted):
                found.append(f"{current.relative_to(root)}: no test matches {wanted!r}")
    return found


def _names_a_test(path: Path, wanted: str) -> bool:
    """`wanted` ("test_x", "…part…", "…[param]") names one of `path`'s tests."""
    param = re.search(r"\[([^\]]+)\]", wanted)  # a row of a parametrized table; * a wildcard
    if param:
        row = r"\w*".join(map(re.escape, param.group(1).split("*")))
        if not re.search(rf"\b{row}\b", path.read_text()):
            return False
    core = re.sub(r"\[[^\]]*\]", "", wanted).strip("…")
    parts = [p for p in core.split("…") if p]
    return any(all(p in name for p in parts) for name in functions_in(path)) if parts else True


def test_every_named_test_file_exists_and_holds_tests():
    text = section(README.read_text())
    assert REFERENCE.search(text), "the Reliability section names no tests"
    assert problems(text) == []


def test_every_input_class_has_a_row():
    text = section(README.read_text())
    table = text[text.index("| Input class |") :].split("\n\n")[0]
    rows = [line for line in table.splitlines()[2:] if line.startswith("|")]
    for name in CLASSES:
        assert any(name in row.split("|")[1] for row in rows), name
    for row in rows:
        assert REFERENCE.search(row.split("|")[2]), f"no test named for: {row[:80]}"


def test_the_check_finds_a_missing_file_a_file_without_tests_and_a_wrong_name(tmp_path):
    tests = tmp_path / "tests" / "unit"
    tests.mkdir(parents=True)
    (tests / "test_empty.py").write_text("def helper():\n    pass\n")
    (tests / "test_some.py").write_text(
        "ROWS = ['yaml_alias_bomb']\n\ndef test_stale_lock_is_taken():\n    pass\n"
    )
    text = (
        "| a | `tests/integration/test_nope.py`, `test_empty.py` |\n"
        "| b | `test_some.py::test_not_there`, `test_some.py::test_stale_lock_is_taken` |\n"
        "| c | `test_some.py`, `…stale_lock…`, `…no_such_fragment…` |\n"
        "| d | `test_some.py::…[yaml_alias_*]`, `test_some.py::…[no_row]` |\n"
    )
    assert problems(text, tmp_path) == [
        "tests/integration/test_nope.py: no such test file under tests/",
        "test_empty.py: holds no tests",
        "tests/unit/test_some.py: no test matches 'test_not_there'",
        "tests/unit/test_some.py: no test matches '…no_such_fragment…'",
        "tests/unit/test_some.py: no test matches '…[no_row]'",
    ]
