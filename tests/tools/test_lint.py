"""ruff holds on the whole tree: its small lint rule set (pyproject.toml [tool.ruff.lint]:
syntax errors, pyflakes' unused and undefined names, 100-character lines) and its formatter.
The README's test command runs it; ruff comes with the dev extra."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def ruff() -> list[str]:
    found = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    assert Path(found).is_file(), "ruff is missing: pip install -e '.[dev]'"
    return [found]


def test_ruff_check_passes():
    run = subprocess.run(
        [*ruff(), "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]


def test_ruff_would_catch_an_unused_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n")
    run = subprocess.run(
        [*ruff(), "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"), str(bad)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1 and "F401" in run.stdout


def test_ruff_format_leaves_the_tree_as_it_is():
    """The tree is as `ruff format .` writes it (pyproject.toml [tool.ruff.format]; the ruff
    version is pinned there, since the formatter's output changes between versions)."""
    run = subprocess.run(
        [*ruff(), "format", "--check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == 0, "run `ruff format .`: " + run.stdout[-4000:] + run.stderr[-2000:]


def test_ruff_format_check_would_catch_an_unformatted_file(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("x = {  'a':1 }\n")
    run = subprocess.run(
        [
            *ruff(),
            "format",
            "--check",
            "--no-cache",
            "--config",
            str(ROOT / "pyproject.toml"),
            str(bad),
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1 and "bad.py" in run.stdout
