"""The package as a user installs it: `pip install .` builds a wheel, not a link to the checkout.

The checkout's files are copied to a temporary folder and built into a wheel there, which goes
into a fresh virtual environment; the project's dependencies (torch and the rest) come from
the environment running the tests, through a .pth file naming its site-packages (which leaves
that environment's own .pth files, an editable install of the project among them, unread).
Every command then runs from another temporary folder with PYTHONPATH unset, so nothing can
come from the checkout: each console command answers --help, `open-bert-train` trains from the
shipped default config and writes its results under the current folder, and the installed
`bert` is the venv's. An editable install of the same copy finds the same configs in configs/.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import zipfile
from configparser import ConfigParser
from pathlib import Path

import pytest

from bert.submission.reader import mllog_records

ROOT = Path(__file__).resolve().parents[2]
# The console commands ([project.scripts]), one family; a new one is a decision, made here too.
COMMANDS = [
    "open-bert-check",
    "open-bert-convert",
    "open-bert-download",
    "open-bert-package",
    "open-bert-plan",
    "open-bert-plot",
    "open-bert-prepare",
    "open-bert-train",
]
SKIP_DIRS = {".git", "build", "results", "__pycache__", ".pytest_cache", ".hypothesis"}
# a run that stops after two steps, on synthetic data small enough to write in a second
TINY_RUN = [
    "--quiet",
    "--set",
    "run.max_steps=2",
    "--set",
    "data.synthetic.num_shards=2",
    "--set",
    "data.synthetic.samples_per_shard=128",
    "--set",
    "data.synthetic.eval_samples=64",
    "--set",
    "eval.samples=64",
]
TIMEOUT_S = 300


def copy_checkout(dest: Path) -> None:
    """The files git sees (tracked or new, not ignored); without git, all but build output,
    results, caches and hidden folders (virtualenvs)."""
    try:
        listed = (
            subprocess.run(
                ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                cwd=ROOT,
                capture_output=True,
                check=True,
            )
            .stdout.decode()
            .split("\0")
        )
        names = [n for n in listed if n and (ROOT / n).is_file()]
    except (OSError, subprocess.CalledProcessError):
        names = [
            p.relative_to(ROOT).as_posix()
            for p in ROOT.rglob("*")
            if p.is_file()
            and not any(
                part in SKIP_DIRS or part.startswith(".") for part in p.relative_to(ROOT).parts[:-1]
            )
        ]
    for name in names:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, dest / name)


def make_venv(folder: Path) -> Path:
    """A new venv whose dependencies resolve to this interpreter's site-packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "_test_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python


def pip_install(python: Path, *args: str) -> None:
    """This interpreter's pip, installing into `python`'s environment without fetching anything:
    the build runs in that environment (no build isolation), with the setuptools it sees."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            *args,
        ],
        check=True,
        capture_output=True,
        text=True,
    )


def clean_env(home: Path) -> dict[str, str]:
    """No PYTHONPATH (it would put a checkout first), HOME in the test's folder."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return {**env, "HOME": str(home), "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("install")
    src, wheels, elsewhere = work / "src", work / "wheels", work / "elsewhere"
    for folder in (src, wheels, elsewhere):
        folder.mkdir()
    copy_checkout(src)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(src),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    (wheel,) = wheels.glob("open_bert_mlperf-*.whl")
    python = make_venv(work / "venv")
    pip_install(python, str(wheel))
    return {
        "wheel": wheel,
        "python": python,
        "bin": python.parent,
        "cwd": elsewhere,
        "src": src,
        "work": work,
        "env": clean_env(work / "home"),
    }


def run(installed: dict, *cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        list(cmd),
        cwd=installed["cwd"],
        env=installed["env"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def test_the_installed_package_is_the_wheel_not_the_checkout(installed):
    where = run(
        installed,
        str(installed["python"]),
        "-c",
        "import bert, data, kernels; "
        "print(bert.__file__, data.__file__, kernels.__file__, sep='\\n')",
    )
    assert where.returncode == 0, where.stderr
    venv = installed["python"].parents[1].resolve()
    for path in where.stdout.split():
        assert Path(path).resolve().is_relative_to(venv), path
        assert "site-packages" in Path(path).parts, path


# What a user runs, and nothing that needs a checkout: bert/tools/ (the GPU window harness,
# benchmarks, experiments) reads git, benchmarks/results/ and scripts/, so it stays out.
SHIPPED_PACKAGES = {
    "bert", "bert.configs", "bert.convert", "bert.core", "bert.mlperf", "bert.model", "bert.obs",
    "bert.optim", "bert.plan", "bert.submission", "bert.train", "bert.train.checkpoint",
    "bert.train.graphs",
    "data", "data.comm", "data.download", "data.order", "data.prepare", "data.sources",
    "kernels",
}  # fmt: skip


def wheel_packages(wheel: Path) -> set[str]:
    """The Python packages a wheel holds: the folders of its .py files (and the configs)."""
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if ".dist-info/" not in n]
    return {
        ".".join(Path(n).parent.parts)
        for n in names
        if n.endswith(".py") or (n.endswith(".yaml") and Path(n).parent.name == "configs")
    }


def test_the_wheel_holds_the_product_and_no_developer_tools(installed):
    assert wheel_packages(installed["wheel"]) == SHIPPED_PACKAGES


def test_the_wheel_listing_sees_a_tools_folder(tmp_path):
    fake = tmp_path / "fake.whl"
    with zipfile.ZipFile(fake, "w") as archive:
        archive.writestr("bert/tools/gpu/window.py", "")
        archive.writestr("bert/configs/tiny.yaml", "")
        archive.writestr("open_bert_mlperf-0.1.0.dist-info/RECORD", "")
    assert wheel_packages(fake) == {"bert.tools.gpu", "bert.configs"}


def test_the_wheel_ships_the_configs(installed):
    listing = run(
        installed,
        str(installed["python"]),
        "-c",
        "from bert.config import shipped_configs; print(shipped_configs())",
    )
    shipped = Path(listing.stdout.strip())
    assert shipped.is_relative_to(installed["python"].parents[1]), listing.stderr
    ours = {p.name: p.read_bytes() for p in (ROOT / "configs").glob("*.yaml")}
    assert {p.name: p.read_bytes() for p in shipped.glob("*.yaml")} == ours


def test_the_wheel_installs_the_console_commands(installed):
    purelib = installed["python"].parents[1].glob("lib/python*/site-packages")
    (entry_points,) = (
        p
        for folder in purelib
        for p in folder.glob("open_bert_mlperf-*.dist-info/entry_points.txt")
    )
    table = ConfigParser()
    table.read(entry_points)
    assert sorted(table["console_scripts"]) == COMMANDS
    assert all((installed["bin"] / name).is_file() for name in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_each_console_command_answers_help(installed, command):
    proc = run(installed, str(installed["bin"] / command), "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage:") and proc.stderr == ""


def test_open_bert_train_runs_the_default_config_from_another_folder(installed):
    """The shipped tiny_cpu config, cut to two steps: results land under the current folder,
    the synthetic data in the (test's) home cache; two steps of the schedule's 800 are a budget
    stop, ended as told: 0."""
    proc = run(installed, str(installed["bin"] / "open-bert-train"), *TINY_RUN)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    log = installed["cwd"] / "results" / "tiny_cpu" / "mlperf.log"
    assert "MLPerf log: results/tiny_cpu/mlperf.log" in proc.stdout and log.is_file()
    batch = [r for r in mllog_records(log.read_text()) if r["key"] == "global_batch_size"]
    assert [r["value"] for r in batch] == [32]  # configs/tiny_cpu.yaml's (the default: 448)
    cache = installed["work"] / "home" / ".cache" / "open-bert" / "synthetic"
    assert any(cache.iterdir()), "the synthetic data is not in ~/.cache/open-bert/synthetic"
    assert sorted(p.name for p in installed["cwd"].iterdir()) == ["results"]


def test_a_bare_config_name_finds_the_shipped_config(installed):
    """--config NAME: the shipped file of that name; an unknown name lists the shipped ones."""
    proc = run(installed, str(installed["bin"] / "open-bert-train"), "--config", "nonesuch")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "error: config 'nonesuch': no such file here, and no shipped config of that name "
        "(shipped: bert_large_1x1xgpu_lb28_ga16, bert_large_1x8xa100_lb56_ga1, "
        "bert_large_1x8xh100_lb96_ga1, tiny_cpu)"
    ]


def test_an_editable_install_finds_the_configs_in_the_checkout(installed):
    python = make_venv(installed["work"] / "venv-editable")
    pip_install(python, "-e", str(installed["src"]))
    proc = run(
        installed,
        str(python),
        "-c",
        "import bert; from bert.config import find_config; "
        "print(bert.__file__); print(find_config('tiny_cpu'))",
    )
    assert proc.returncode == 0, proc.stderr
    package, config = map(Path, proc.stdout.split())
    assert package == installed["src"] / "bert" / "__init__.py"
    assert config == installed["src"] / "configs" / "tiny_cpu.yaml"
