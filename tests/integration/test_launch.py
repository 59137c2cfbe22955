"""System configs (configs/*.yaml) and launchers (launch/), without GPUs or a scheduler.

Config names follow bert_large_<nodes>x<gpus per node>x<system>_lb<micro-batch>_ga<accum>.yaml,
and the name must agree with the content: nodes x gpus x lb x ga = run.global_batch_size.
Launchers are checked with `bash -n` and in dry-run mode (DRY_RUN=1 prints the commands).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from bert.model.attention import BACKENDS
from bert.model.fused import FUSED_OPS, enabled
from bert.optim.registry import OPTIMIZERS

from bert.config import BatchGeometry, load_config
from bert.train.run_shape import RunShape

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
NAME = re.compile(r"bert_large_(\d+)x(\d+)x([a-z0-9]+)_lb(\d+)_ga(\d+)")
SIZE_NAMED = {"tiny_cpu"}  # configs named by model size, not by system
SCRIPTS = sorted(
    [
        *(ROOT / "launch").glob("*.sh"),
        ROOT / "launch" / "slurm.sbatch",
        ROOT / "scripts" / "download_data.sh",
    ]
)
# REFERENCE 3: (lr, steps, beta1, beta2, weight decay) per system.
HYPERPARAMETERS = {
    "a100": (4.25e-4, 6700, 0.9, 0.999, 0.01),
    "gpu": (4.25e-4, 6700, 0.9, 0.999, 0.01),
    "h100": (9.6e-4, 3680, 0.60466, 0.85437, 0.1),
}


# -- configs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_config_loads_and_name_matches_content(path):
    cfg = load_config(path)
    if path.stem in SIZE_NAMED:
        return
    match = NAME.fullmatch(path.stem)
    assert match, f"{path.name} does not follow {NAME.pattern}.yaml"
    nodes, gpus, system, local, accum = match.groups()
    world = int(nodes) * int(gpus)
    assert world * int(local) * int(accum) == cfg.run.global_batch_size
    assert cfg.run.gradient_accumulation_steps == int(accum)
    assert BatchGeometry.build(cfg.run, world).micro_batch_size == int(local)
    assert system in cfg.submission.platform.lower()
    assert cfg.run.output_dir.endswith(path.stem)


@pytest.mark.parametrize(
    "path", [p for p in CONFIGS if p.stem not in SIZE_NAMED], ids=lambda p: p.stem
)
def test_system_config_is_mlperf_bert_large(path):
    cfg = load_config(path)
    m, d, o, s, r = cfg.model, cfg.data, cfg.optim, cfg.schedule, cfg.run
    assert (
        m.hidden_size,
        m.num_hidden_layers,
        m.num_attention_heads,
        m.intermediate_size,
        m.vocab_size,
    ) == (1024, 24, 16, 4096, 30522)
    # the reference, or a backend a GPU window validated (bert/model/attention.py's records)
    assert m.attention == "padded_sdpa" or BACKENDS[m.attention].gpu_validated
    # a fused switch is on only where a GPU window validated it (bert/model/fused.py's records)
    for flag in enabled(m):
        assert FUSED_OPS[flag].gpu_validated, (path.name, flag)
    assert not cfg.optim.fused_kernel or OPTIMIZERS[cfg.optim.name].sharded.fused_gpu_validated
    assert (d.max_seq_length, d.max_predictions_per_seq) == (512, 76)
    system = NAME.fullmatch(path.stem).group(3)
    assert (o.lr, s.total_steps, o.beta1, o.beta2, o.weight_decay) == HYPERPARAMETERS[system]
    assert (o.eps, o.max_grad_norm, s.warmup_steps) == (1e-6, 1.0, 0)
    assert r.precision in ("fp16", "bf16") and r.device == "cuda"
    assert cfg.eval.samples == 10_000
    nodes, gpus = (int(n) for n in path.stem.split("_")[2].split("x")[:2])
    assert RunShape.build(cfg, nodes * gpus).eval_interval_samples == 150_000
    for placeholder in (d.train_dir, d.eval_file, r.init_checkpoint):
        assert placeholder.startswith("/data/")


# -- launchers ------------------------------------------------------------------------------------


def bash(script: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "NPROC_PER_NODE": "8", **env}
    return subprocess.run(
        ["bash", str(ROOT / script), *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def commands(proc: subprocess.CompletedProcess) -> list[str]:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [line[2:] for line in proc.stdout.splitlines() if line.startswith("+ ")]


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_script_syntax(path):
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_torchrun_single_node_dry_run():
    cmds = commands(
        bash("launch/torchrun.sh", "configs/x.yaml", "--set", "run.seed=3", DRY_RUN="1")
    )
    assert cmds[0].endswith("launch/drop_caches.sh")
    assert cmds[1].startswith("python ")  # torchrun through launch/torchrun.py: exit statuses
    assert "/launch/torchrun.py --standalone --nnodes=1 --nproc_per_node=8 " in cmds[1]
    assert cmds[1].endswith(
        "run_pretraining.py --config configs/x.yaml --set run.seed=3 --set run.cache_cleared=false"
    )  # a dry run flushes nothing


def test_torchrun_multi_node_dry_run():
    cmds = commands(
        bash(
            "launch/torchrun.sh",
            "c.yaml",
            DRY_RUN="1",
            NNODES="2",
            NODE_RANK="1",
            MASTER_ADDR="node0",
            MASTER_PORT="1234",
        )
    )
    assert "--nnodes=2 --node_rank=1 --master_addr=node0 --master_port=1234" in cmds[1]
    assert "--standalone" not in cmds[1]


def test_cache_flag_can_be_left_out():
    cmds = commands(
        bash("launch/torchrun.sh", "c.yaml", DRY_RUN="1", CLEAR_CACHE="0", CACHE_CLEARED_KEY="")
    )
    assert len(cmds) == 1 and "cache_cleared" not in cmds[0]


def test_mpirun_dry_run(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("# two nodes\nnodeA slots=8\nnodeB slots=8\n")
    cmds = commands(
        bash("launch/mpirun.sh", "c.yaml", DRY_RUN="1", NNODES="2", HOSTFILE=str(hosts))
    )
    assert "-np 2 --map-by ppr:1:node" in cmds[0] and cmds[0].endswith("drop_caches.sh")
    assert f"--hostfile {hosts} -np 16 --map-by ppr:8:node" in cmds[1]
    assert "launch/rank_env.sh python " in cmds[1] and "--config c.yaml" in cmds[1]
    assert bash("launch/mpirun.sh", "c.yaml", DRY_RUN="1", NNODES="2").returncode == 2


def test_slurm_batch_dry_run(tmp_path):
    env = dict(
        DRY_RUN="1",
        SLURM_SUBMIT_DIR=str(ROOT),
        SLURM_JOB_NUM_NODES="2",
        GPUS_PER_NODE="8",
        NUM_RUNS="2",
        SEED_BASE="40",
        RESULTS_DIR=str(tmp_path),
    )
    cmds = commands(bash("launch/slurm.sbatch", "c.yaml", **env))
    flushes = [c for c in cmds if "--ntasks-per-node=1" in c]
    trains = [c for c in cmds if "--ntasks-per-node=8" in c]
    assert len(flushes) == 2 and all(c.endswith("drop_caches.sh") for c in flushes)
    assert [("run.seed=40" in trains[0]), ("run.seed=41" in trains[1])] == [True, True]
    assert all(c.startswith("srun --nodes=2 ") and "rank_env.sh" in c for c in trains)
    assert f"cp {tmp_path}/run_1/mlperf.log {tmp_path}/result_1.txt" in cmds


def test_run_and_time_dry_run_uses_distinct_seeds(tmp_path):
    cmds = commands(
        bash(
            "launch/run_and_time.sh",
            "c.yaml",
            "--set",
            "x.y=1",
            DRY_RUN="1",
            NUM_RUNS="3",
            RESULTS_DIR=str(tmp_path),
        )
    )
    runs = [c for c in cmds if "launch/torchrun.py" in c]
    seeds = [re.search(r"run\.seed=(\d+)", c).group(1) for c in runs]
    assert len(runs) == 3 and len(set(seeds)) == 3
    for i, c in enumerate(runs):
        assert f"--set x.y=1 --set run.seed={seeds[i]} --set run.output_dir={tmp_path}/run_{i}" in c
    assert (
        bash("launch/run_and_time.sh", "c.yaml", DRY_RUN="1", NUM_RUNS="2", SEEDS="5 5").returncode
        == 2
    )


FAKE_LAUNCHER = """#!/usr/bin/env bash
# Stands in for a launcher: writes a log naming its seed; exits with FAKE_STATUS for seed 11.
for arg in "$@"; do
  case "$arg" in run.seed=*) seed="${arg#run.seed=}" ;; run.output_dir=*) out="${arg#*=}" ;; esac
done
mkdir -p "$out" && echo "log of seed $seed" > "$out/mlperf.log"
[[ "$seed" == 11 ]] && exit "${FAKE_STATUS:-0}"
exit 0
"""


@pytest.mark.parametrize("status", ["1", "2"])
def test_run_and_time_collects_results(tmp_path, status):
    launcher = tmp_path / "fake.sh"
    launcher.write_text(FAKE_LAUNCHER)
    launcher.chmod(0o755)
    results = tmp_path / "results"
    proc = bash(
        "launch/run_and_time.sh",
        "c.yaml",
        LAUNCHER=str(launcher),
        NUM_RUNS="3",
        SEEDS="10 11 12",
        RESULTS_DIR=str(results),
        FAKE_STATUS=status,
    )
    if status == "1":  # not converged: kept, the series goes on
        assert proc.returncode == 0, proc.stderr
        assert [(results / f"result_{i}.txt").read_text() for i in range(3)] == [
            f"log of seed {s}\n" for s in (10, 11, 12)
        ]
        assert "exit statuses 0 1 0" in proc.stderr
    else:  # bad input: the series stops
        assert proc.returncode == 2
        assert not (results / "run_2").exists()


def rank_env(**variables: str) -> list[str]:
    """What launch/rank_env.sh exports, given scheduler variables (and none inherited)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "SLURM_", "PMI"))}
    show = [
        "bash",
        str(ROOT / "launch" / "rank_env.sh"),
        "bash",
        "-c",
        "echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_PORT",
    ]
    return subprocess.run(
        show, env={**base, **variables}, capture_output=True, text=True
    ).stdout.split()


def test_rank_env_prefers_mpi_over_slurm():
    slurm = {
        "SLURM_PROCID": "9",
        "SLURM_NTASKS": "16",
        "SLURM_LOCALID": "1",
        "SLURM_STEP_TASKS_PER_NODE": "8(x2)",
    }
    mpi = {
        "OMPI_COMM_WORLD_RANK": "5",
        "OMPI_COMM_WORLD_SIZE": "32",
        "OMPI_COMM_WORLD_LOCAL_RANK": "3",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
    }
    assert rank_env(**slurm) == ["9", "16", "1", "8", "29500"]
    assert rank_env(**slurm, **mpi) == ["5", "32", "3", "4", "29500"]  # mpirun inside sbatch
