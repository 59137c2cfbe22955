"""What the core install does without its extras, and where a config comes from.

mpi4py is the `mpi` extra: only a job an MPI launcher started loads it, and without it that job
(and launch/mpirun.sh before it starts one) stops with one `error:` line naming the extra. Here
mpi4py is hidden: in this process by a None entry in sys.modules, in a child process by a
package of that name first on PYTHONPATH whose import fails, as a missing one would.

A config named by a bare name is a shipped one (configs/ of the checkout here); a file of that
name in the current folder wins; the default's `~` paths are expanded, never a folder named "~".
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bert.config import find_config, load_config, shipped_configs
from bert.core.errors import ConfigError
from bert.tools.common import set_args
from data.comm import mpi

ROOT = Path(__file__).resolve().parents[2]
HINT = "pip install 'open-bert-mlperf[mpi]'"
SMALL_DATA = {
    "data.synthetic.num_shards": 2,
    "data.synthetic.samples_per_shard": 64,
    "data.synthetic.eval_samples": 32,
    "eval.samples": 32,
    "run.max_steps": 1,
}


@pytest.fixture
def no_mpi4py_path(tmp_path) -> str:
    """A PYTHONPATH under which `import mpi4py` fails (the checkout after it)."""
    shadow = tmp_path / "shadow" / "mpi4py"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'mpi4py'\", name='mpi4py')\n"
    )
    return os.pathsep.join([str(shadow.parent), str(ROOT)])


def child_env(**extra: str) -> dict[str, str]:
    launch_vars = {
        name
        for _, names in __import__("bert.train.launch_env", fromlist=["x"]).LAUNCHER_VARS
        for name in names
    } | {"MASTER_ADDR", "MASTER_PORT", "PMIX_RANK"}
    env = {k: v for k, v in os.environ.items() if k not in launch_vars}
    return {**env, "OMP_NUM_THREADS": "1", **extra}


def test_load_mpi_without_mpi4py_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    with pytest.raises(mpi.MPIMissingError, match=r"OMPI_COMM_WORLD_SIZE is set") as caught:
        mpi.load_mpi()
    assert HINT in str(caught.value) and "\n" not in str(caught.value)


def test_an_mpi_job_without_mpi4py_stops_with_one_error_line(tmp_path, no_mpi4py_path):
    """Rank 0 of two under Open MPI's variables, no rendezvous address: the rank asks MPI for
    it, which needs mpi4py. Exit status 2, one line, nothing else on stderr."""
    sets = {
        **SMALL_DATA,
        "data.synthetic.cache_dir": tmp_path / "cache",
        "run.output_dir": tmp_path / "out",
    }
    args = set_args(sets)
    env = child_env(
        PYTHONPATH=no_mpi4py_path,
        OMPI_COMM_WORLD_RANK="0",
        OMPI_COMM_WORLD_SIZE="2",
        OMPI_COMM_WORLD_LOCAL_RANK="0",
        OMPI_COMM_WORLD_LOCAL_SIZE="2",
    )
    proc = subprocess.run(
        [sys.executable, str(ROOT / "run_pretraining.py"), "--quiet", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: an MPI launcher started this job"), (
        proc.stderr
    )
    assert HINT in lines[0]


def launcher(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(ROOT / "launch" / "mpirun.sh"), "c.yaml"],
        cwd=tmp_path,
        env=child_env(PYTHON=sys.executable, CLEAR_CACHE="0", **env),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_mpirun_launcher_without_mpi4py_refuses_to_start(tmp_path, no_mpi4py_path):
    proc = launcher(tmp_path, PYTHONPATH=no_mpi4py_path, MPIRUN="true")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"error: mpirun.sh: {sys.executable} cannot import mpi4py: {HINT} (on a system with "
        f"its own MPI: pip install mpi4py)"
    ]


def test_mpirun_launcher_without_mpirun_refuses_to_start(tmp_path):
    proc = launcher(tmp_path, MPIRUN=str(tmp_path / "no-mpirun"))
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"error: mpirun.sh: no {tmp_path / 'no-mpirun'} on PATH ({HINT} installs Open MPI's; "
        f"or set MPIRUN)"
    ]


# -- configs by name ------------------------------------------------------------------------------


def test_the_checkout_ships_configs_from_configs_folder():
    # bert/configs/ exists only inside a built wheel; in a checkout it would hide configs/
    assert not (ROOT / "bert" / "configs").exists()
    assert shipped_configs() == ROOT / "configs"


@pytest.mark.parametrize("name", ["tiny_cpu", "tiny_cpu.yaml"])
def test_a_bare_name_is_a_shipped_config(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert find_config(name) == ROOT / "configs" / "tiny_cpu.yaml"
    assert load_config(name) == load_config(ROOT / "configs" / "tiny_cpu.yaml")


def test_a_file_in_the_current_folder_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("tiny_cpu.yaml").write_text("run:\n  seed: 7\n")
    assert find_config("tiny_cpu.yaml") == Path("tiny_cpu.yaml")
    assert load_config("tiny_cpu.yaml").run.seed == 7


def test_a_missing_path_or_name_is_one_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^config file 'configs/tiny_cpu.yaml': No such file"):
        load_config("configs/tiny_cpu.yaml")  # a path is read as given, never a shipped file
    shipped = ", ".join(sorted(p.stem for p in (ROOT / "configs").glob("*.yaml")))
    with pytest.raises(ConfigError) as caught:
        load_config("nonesuch")
    assert str(caught.value) == (
        f"config 'nonesuch': no such file here, and no shipped config "
        f"of that name (shipped: {shipped})"
    )


def test_default_paths_expand_the_home_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    cfg = load_config(None)
    assert cfg.data.synthetic.cache_dir == str(tmp_path / ".cache" / "open-bert" / "synthetic")
    assert load_config(None, ["data.synthetic.cache_dir=~/x"]).data.synthetic.cache_dir == str(
        tmp_path / "x"
    )
