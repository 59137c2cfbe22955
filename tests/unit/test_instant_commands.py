"""Commands that answer at once: every console command's --help, open-bert-train's
--help-config and --print-config, and the planner's input errors import no torch (it takes
seconds). The registries' records carry what these read; their implementations are loaded
when a model or optimizer is built (bert/core/lazy.py).

Each command runs in a fresh interpreter, as its console script does (sys.argv, then the
pyproject entry point), and reports whether torch was imported: a list of imports, not a time,
so the test is as steady on a loaded machine as on an idle one."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]

# Runs the entry point as its console script would; prints the exit status and the project's
# modules that imported torch is the one fact checked.
RUNNER = """
import importlib, json, sys
module, func = sys.argv[1].split(":")
sys.argv = sys.argv[2:]
try:
    code = getattr(importlib.import_module(module), func)()
except SystemExit as stop:
    code = stop.code
print(json.dumps({"code": code, "torch": "torch" in sys.modules}), file=sys.__stderr__)
"""


def run_command(name: str, *args: str, cwd: Path = ROOT) -> tuple[int, bool, str]:
    """(exit status, whether torch was imported, stdout) of console command `name`."""
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, SCRIPTS[name], name, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["code"] or 0, report["torch"], done.stdout


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_command_help_imports_no_torch(name):
    code, torch_imported, out = run_command(name, "--help")
    assert code == 0 and "usage:" in out
    assert not torch_imported, f"{name} --help imported torch"


@pytest.mark.parametrize(
    "name, args, expected_code",
    [
        ("open-bert-train", ["--help-config"], 0),
        ("open-bert-train", ["--help-config", "--config", "bert_large_1x8xh100_lb96_ga1"], 0),
        ("open-bert-train", ["--print-config"], 0),
        ("open-bert-train", ["--print-config", "--config", "bert_large_1x8xh100_lb96_ga1"], 0),
        ("open-bert-train", ["--print-config", "--config", "no_such_config"], 2),
        ("open-bert-plan", ["--gpus", "0", "--gpu", "h100"], 2),
        ("open-bert-plan", ["--gpus", "8", "--gpu", "no_such_gpu"], 2),
        ("open-bert-plan", [], 2),
        ("open-bert-convert", ["nvidia", "in.pt"], 2),
    ],
)
def test_config_listings_and_input_errors_import_no_torch(name, args, expected_code, tmp_path):
    code, torch_imported, _ = run_command(name, *args, cwd=tmp_path)
    assert code == expected_code
    assert not torch_imported, f"{name} {' '.join(args)} imported torch"


def test_help_config_shows_the_configs_values_beside_the_defaults(tmp_path):
    code, _, out = run_command("open-bert-train", "--help-config", "--config", "tiny_cpu")
    assert code == 0
    lines = out.splitlines()
    assert "model.vocab_size (int) = 30522 -> 1024  # real vocabulary" in out
    assert "run.output_dir (str) = 'results/run' -> 'results/tiny_cpu'" in out
    # a key the config leaves at its default shows the default alone
    assert any(line.startswith("model.type_vocab_size (int) = 2  # ") for line in lines)
    assert "tiny_cpu" in lines[0]  # the header names the config whose values these are
    shipped = lines[-1]
    assert shipped.startswith("# shipped configs (--config NAME): ")
    assert "tiny_cpu" in shipped and "bert_large_1x8xh100_lb96_ga1" in shipped


def test_help_config_applies_set_and_refuses_an_unknown_config(tmp_path, capsys):
    from bert.train.cli import main

    assert main(["--help-config", "--set", "optim.lr=0.5"]) == 0
    assert "optim.lr (float) = 0.000425 -> 0.5  # " in capsys.readouterr().out
    assert main(["--help-config", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "error:" in capsys.readouterr().err


def test_describe_fields_without_a_config_lists_the_defaults():
    from bert.config import describe_fields, load_config

    assert "model.vocab_size (int) = 30522  # " in "\n".join(describe_fields())
    values = describe_fields(values=load_config())  # the defaults themselves: no arrows
    assert not any(" -> " in line.split("  # ")[0] for line in values)
