"""An installed copy speaks of itself: every console command's --help (and each subcommand's)
and the downloader's "next:" block name the console commands and the package's extras, never
the checkout's `python scripts/...`, `python -m ...` or a bare `pip install tensorflow-cpu`."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = (ROOT / "pyproject.toml").read_text()
PACKAGE = re.search(r'^name = "([^"]+)"', PYPROJECT, re.M).group(1)
SCRIPTS = dict(
    re.findall(r'^(open-bert-[a-z]+) = "([^"]+)"', PYPROJECT.split("[project.scripts]")[1], re.M)
)
# what a user of the installed program cannot run, or should not install that way
CHECKOUT_ONLY = [
    re.compile(r"python3? scripts/"),
    re.compile(r"python3? -m (?!mlperf_logging)"),  # the official checker is a module
    re.compile(r"pip install tensorflow"),
    re.compile(r"pip install '?\.\["),
]


def help_text(command: str, args: list[str], capsys, monkeypatch) -> str:
    """What `command ARGS --help` prints, run as the console script runs it."""
    module, function = SCRIPTS[command].split(":")
    monkeypatch.setattr(sys, "argv", [command, *args, "--help"])
    entry = getattr(importlib.import_module(module), function)
    with pytest.raises(SystemExit) as stop:
        entry() if not args else entry([*args, "--help"])
    assert stop.value.code == 0
    return capsys.readouterr().out


def subcommands(text: str) -> list[str]:
    """The choices of the first positional argument that has them ({a,b,c})."""
    found = re.search(r"^\s*\{([a-z0-9,-]+)\}", text, re.M)
    return found.group(1).split(",") if found else []


def test_every_console_command_is_found():
    assert PACKAGE == "open-bert-mlperf"
    assert {"open-bert-train", "open-bert-prepare", "open-bert-download", "open-bert-plan"} <= set(
        SCRIPTS
    )


@pytest.mark.parametrize("command", sorted(SCRIPTS))
def test_help_names_console_commands_not_the_checkout(command, capsys, monkeypatch):
    top = help_text(command, [], capsys, monkeypatch)
    texts = {command: top}
    for sub in subcommands(top):
        texts[f"{command} {sub}"] = help_text(command, [sub], capsys, monkeypatch)
    for name, text in texts.items():
        assert text.startswith(f"usage: {command}"), f"{name}: {text.splitlines()[0]}"
        for pattern in CHECKOUT_ONLY:
            assert not pattern.search(text), f"{name} --help says {pattern.pattern!r}"


def test_download_next_steps_name_the_commands_and_the_extra(tmp_path):
    from data.download import published
    from data.download.__main__ import next_steps

    folders = {published.INPUT_FILES: tmp_path / "in", published.TEXT_DATASET: tmp_path / "text"}
    steps = next_steps(tmp_path, folders)
    assert steps.startswith("next:")
    for pattern in CHECKOUT_ONLY:
        assert not pattern.search(steps), pattern.pattern
    assert "open-bert-prepare all" in steps and "open-bert-convert tf" in steps
    assert f"pip install '{PACKAGE}[tf]'" in steps
    assert str(tmp_path / "in" / "vocab.txt") in steps  # MLPerf's vocabulary, named


# the one bare install a hint may name: mpi4py alone, for a system with its own MPI (the `mpi`
# extra would bring a second MPI; data/comm/mpi.py names the extra first)
BARE_INSTALLS = {"mpi4py"}
HINT = re.compile(r"pip install ('[^'\n]*'|[^\s'\"(),`]+)")
HINT_CALL = re.compile(r"install_hint\(\s*['\"]([^'\"]*)['\"]")


def extras() -> set[str]:
    section = PYPROJECT.split("[project.optional-dependencies]")[1].split("\n[")[0]
    return set(re.findall(r"^([a-z][a-z0-9-]*) = \[", section, re.M))


def install_hints(text: str) -> list[str]:
    """What each `pip install` in `text` installs: a literal's argument, or the extra an
    install_hint() call names (as the `'PACKAGE[extra]'` it prints)."""
    found = [m.group(1).strip("'") for m in HINT.finditer(text)]
    found += [f"{PACKAGE}[{name}]" for name in HINT_CALL.findall(text)]
    return found


def test_install_hints_name_the_package_and_an_extra():
    """A missing optional package is named with the extra that installs it (`pip install
    'open-bert-mlperf[hf]'`), in every message of the program, never a bare `pip install NAME`
    that an installed copy would get in an untested version."""
    known, wrong = extras(), []
    sources = [p for part in ("bert", "data", "kernels") for p in (ROOT / part).rglob("*.py")]
    for path in sources:
        for hint in install_hints(path.read_text()):
            name = hint.split("[")[1].rstrip("]") if hint.startswith(f"{PACKAGE}[") else None
            if hint in BARE_INSTALLS or hint.startswith("{") or name in known:
                continue  # "{PACKAGE}[...]" is install_hint's own body
            wrong.append(f"{path.relative_to(ROOT)}: pip install {hint}")
    assert not wrong, wrong


def test_the_hint_check_finds_a_bare_install():
    assert install_hints("raise X('needs safetensors (pip install safetensors)')") == [
        "safetensors"
    ]
    assert install_hints("f'{install_hint(\"hf\")}'") == [f"{PACKAGE}[hf]"]
    assert {"hf", "tf", "plot", "mpi", "track"} <= extras()
