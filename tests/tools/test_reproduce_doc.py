"""docs/reproduce.md's commands run as written: every `open-bert-*` line parses with its tool's
own argument parser, the plan line writes the config the launch lines name, and the torchrun
launch line passes a dry run (DRY_RUN=1) on that config."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from bert.submission import compliance, package, plot
from bert.plan.cli import build_parser as plan_parser
from bert.plan.cli import main as plan_main
from bert.convert import cli as convert_checkpoint
from bert.train.cli import build_parser as train_parser
from data.download.__main__ import parse_args as download_args
from data.prepare.cli import parse_args as prepare_args

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "reproduce.md"
PARSERS = {
    "open-bert-download": download_args,
    "open-bert-prepare": prepare_args,
    "open-bert-convert": convert_checkpoint.parse_args,
    "open-bert-train": lambda argv: train_parser().parse_args(argv),
    "open-bert-plan": lambda argv: plan_parser().parse_args(argv),
    "open-bert-check": compliance.parse_args,
    "open-bert-package": package.parse_args,
    "open-bert-plot": plot.parse_args,
}
ENV = re.compile(r"^[A-Z_]+=")


def commands() -> list[list[str]]:
    """Every line of the document's bash blocks, split as a shell would."""
    blocks = re.findall(r"```bash\n(.*?)```", DOC.read_text(), re.S)
    lines = re.sub(r"\\\n\s*", " ", "".join(blocks)).splitlines()
    return [shlex.split(line) for line in lines if line.strip()]


def program(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """(VAR=value assignments before it, the command itself)."""
    env = {}
    while argv and ENV.match(argv[0]):
        name, value = argv[0].split("=", 1)
        env[name], argv = value, argv[1:]
    return env, argv


def test_the_document_has_every_step():
    tools = [program(argv)[1][0] for argv in commands()]
    for tool in ("open-bert-download", "open-bert-prepare", "open-bert-convert", "open-bert-plan"):
        assert tool in tools
    assert "launch/run_and_time.sh" in tools and "sbatch" in tools
    assert {"open-bert-check", "open-bert-package"} <= set(tools)


@pytest.mark.parametrize("argv", [a for a in commands() if a[0].startswith("open-bert-")])
def test_every_command_parses_with_its_tool(argv):
    PARSERS[argv[0]](argv[1:])  # argparse exits 2 on a flag the tool does not know


def test_the_plan_writes_the_config_the_launch_lines_run(tmp_path):
    (plan,) = [a for a in commands() if a[0] == "open-bert-plan"]
    written = plan[plan.index("--write-config") + 1]
    launches = [program(a)[1] for a in commands() if "launch/" in " ".join(a)]
    assert launches and all(argv[-1] == written for argv in launches)
    for argv in launches:
        assert (ROOT / next(a for a in argv if a.startswith("launch/"))).is_file()

    # the plan as documented, into a temporary folder; then the torchrun series, dry
    config = tmp_path / Path(written).name
    assert plan_main([*plan[1:-1], str(config)]) == 0 and config.is_file()
    env, argv = program(next(a for a in commands() if "launch/run_and_time.sh" in a))
    env.update(DRY_RUN="1", RESULTS_DIR=str(tmp_path / "results"))
    done = subprocess.run(
        [str(ROOT / argv[0]), *argv[1:-1], str(config)],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("run_pretraining.py --config") == int(env["NUM_RUNS"])
