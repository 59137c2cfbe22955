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
