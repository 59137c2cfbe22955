"""bert.train.launch_env: the rank layout from each launcher's variables, and the rendezvous
checks."""

from __future__ import annotations

import os

import pytest

from bert.train.launch_env import LAUNCHER_VARS, abort_mpi_job, export_rendezvous, launch_layout

ALL_VARS = [name for _, names in LAUNCHER_VARS for name in names] + [
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",
    "PMIX_RANK",
]


@pytest.fixture
def clean_env(monkeypatch):
    for name in ALL_VARS:
        # set first so that teardown restores the original state of variables the code sets
        monkeypatch.setenv(name, "unset")
        monkeypatch.delenv(name)
    return monkeypatch


@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, ("single", 0, 1, 0, 1)),
        (
            {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "4"},
            ("torchrun", 3, 8, 3, 4),
        ),
        (
            {
                "OMPI_COMM_WORLD_RANK": "5",
                "OMPI_COMM_WORLD_SIZE": "16",
                "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
            },
            ("Open MPI", 5, 16, 1, 4),
        ),
        (
            {"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"},
            ("PMI", 2, 4, 0, 2),
        ),
        (
            {
                "SLURM_PROCID": "9",
                "SLURM_STEP_NUM_TASKS": "16",
                "SLURM_LOCALID": "1",
                "SLURM_STEP_TASKS_PER_NODE": "8(x2)",
            },
            ("srun", 9, 16, 1, 8),
        ),
        # launch/rank_env.sh under mpirun: torch variables win, the node size comes from Open MPI
        (
            {
                "RANK": "1",
                "WORLD_SIZE": "4",
                "LOCAL_RANK": "1",
                "OMPI_COMM_WORLD_RANK": "1",
                "OMPI_COMM_WORLD_SIZE": "4",
                "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
            },
            ("torchrun", 1, 4, 1, 2),
        ),
        # a batch script without srun: SLURM_PROCID alone does not make a multi-rank job
        ({"SLURM_PROCID": "0", "SLURM_NTASKS": "8"}, ("single", 0, 1, 0, 1)),
    ],
)
def test_layout_from_each_launcher(clean_env, env, expected):
    for name, value in env.items():
        clean_env.setenv(name, value)
    assert tuple(launch_layout()) == expected


def test_rendezvous_needs_master_addr_without_mpi(clean_env):
    clean_env.setenv("SLURM_PROCID", "0")
    clean_env.setenv("SLURM_STEP_NUM_TASKS", "2")
    with pytest.raises(RuntimeError, match="MASTER_ADDR and MASTER_PORT"):
        export_rendezvous(launch_layout())
    assert os.environ["RANK"] == "0" and os.environ["WORLD_SIZE"] == "2"


def test_rendezvous_keeps_given_address(clean_env):
    for name, value in {
        "SLURM_PROCID": "1",
        "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_LOCALID": "1",
        "MASTER_ADDR": "node7",
        "MASTER_PORT": "29511",
    }.items():
        clean_env.setenv(name, value)
    export_rendezvous(launch_layout())
    assert (os.environ["RANK"], os.environ["LOCAL_RANK"]) == ("1", "1")
    assert (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]) == ("node7", "29511")


def test_abort_is_a_no_op_without_mpi():
    abort_mpi_job(1, RuntimeError("not under mpirun"))  # returns: nothing to abort


def test_error_is_printed_once_per_shared_folder(tmp_path, monkeypatch, capsys):
    """Every rank meets the same bad input; the first to create the status file prints and
    leaves the status for the launcher (launch/torchrun.py), the others stay quiet."""
    from bert.train.launch_env import EXIT_DIR_VAR, STATUS_FILE, report_error

    monkeypatch.setenv(EXIT_DIR_VAR, str(tmp_path))
    report_error("bad input", 2)
    report_error("bad input", 2)  # a second rank
    assert capsys.readouterr().err == "error: bad input\n"
    assert (tmp_path / STATUS_FILE).read_text() == "2\n"
    monkeypatch.setenv(EXIT_DIR_VAR, str(tmp_path / "on_another_node"))
    report_error("bad input", 2)  # no shared folder here: this rank reports for itself
    assert capsys.readouterr().err == "error: bad input\n"


def test_torchrun_attempt_folder_is_shared_without_the_launcher(monkeypatch):
    from bert.train.launch_env import EXIT_DIR_VAR, error_dir

    monkeypatch.delenv(EXIT_DIR_VAR, raising=False)
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", "/tmp/te_x/none_y/attempt_0/1/error.json")
    assert str(error_dir()) == "/tmp/te_x/none_y/attempt_0"
    monkeypatch.delenv("TORCHELASTIC_ERROR_FILE")
    assert error_dir() is None
