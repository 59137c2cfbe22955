"""Training checkpoints and `--resume`: a run that stops and resumes ends with exactly the
weights, optimizer state and data order of a run that never stopped (in process, one rank), and
the same for a 2-rank torchrun job killed mid-run with SIGKILL. Plus atomicity (an unfinished
`.partial` folder is never resumed from), pruning, clear errors, and eval-only mode."""

from __future__ import annotations

import json
import shutil
import signal
import sys
from pathlib import Path

import pytest
import torch

from bert.config import load_config
from bert.model.weights import CheckpointError
from bert.train.checkpoint.layout import (
    MANIFEST,
    Manifest,
    complete_checkpoints,
    load_trainer_state,
    step_dir,
)
from bert.train.checkpoint.resume_point import resume_candidates
from bert.train.checkpoint.settings import CONFIG_FILE
from bert.train.trainer import Trainer
from data.sample_record import read_records

from launchers import launch
from tiny_run import make_tiny_data
from bert.tools.common import set_args
from tiny_run import tiny_settings as shared_tiny_settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return make_tiny_data(tmp_path_factory.mktemp("resume_data"), num_shards=4)


def tiny_settings(data_dir, out, steps: int, **extra) -> dict:
    """A 1-layer BERT with dropout on (so the RNG state matters), evals every 2 steps."""
    return shared_tiny_settings(
        data_dir,
        out,
        **{
            "run.max_steps": steps,
            "log.quiet": True,
            "schedule.total_steps": 20,
            "schedule.warmup_steps": 2,
            **extra,
        },
    )


def overrides(settings: dict) -> list[str]:
    return [f"{key}={value}" for key, value in settings.items()]


def train(data_dir, out, steps: int, **extra):
    trainer = Trainer(load_config(None, overrides(tiny_settings(data_dir, out, steps, **extra))))
    return trainer, trainer.train()


def assert_same_state(a: dict, b: dict, path: str = "") -> None:
    """Exact equality of nested checkpoint states (tensors bit for bit)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), f"{path} differs"
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), f"{path}: keys {sorted(a)} != {sorted(b)}"
        for key in a:
            assert_same_state(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{path}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_state(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def final_state(out: Path, step: int) -> dict:
    state = load_trainer_state(step_dir(out / "checkpoints", step))
    state.pop("config")  # the runs differ in output_dir and resume on purpose
    return state


@pytest.mark.parametrize(
    "extra",
    [
        {"optim.sharded": False},
        {"optim.sharded": True, "run.precision": "fp16"},  # loss scale and skipped-step counter
        {"optim.sharded": True, "run.gradient_accumulation_steps": 2},
        # the bandit's weights and pending draws, the bucket queues and the lagged losses
        {"data.curriculum.name": "exp3s", "data.curriculum.bucket_boundaries": "32,64"},
    ],
    ids=["replicated", "sharded-fp16", "sharded-accum", "curriculum-exp3s"],
)
def test_resumed_run_matches_uninterrupted(data_dir, tmp_path, extra):
    # 3 does not divide the 2-step eval blocks: the resume starts inside a block
    ckpt = {"checkpoint.interval_steps": 3, "checkpoint.keep": 0, **extra}
    _, whole = train(data_dir, tmp_path / "whole", 8, **ckpt)
    _, first = train(data_dir, tmp_path / "split", 5, **ckpt)
    assert first.steps == 5
    trainer, rest = train(data_dir, tmp_path / "split", 8, **ckpt, **{"checkpoint.resume": "auto"})
    assert trainer.start_point["step"] == 5 and rest.steps == 8 and rest.samples == 64
    assert_same_state(final_state(tmp_path / "whole", 8), final_state(tmp_path / "split", 8))
    assert rest.eval_accuracy == whole.eval_accuracy
    # the resumed run logs into its own file and keeps the eval points of the whole run
    log = (tmp_path / "split" / "mlperf_resumed_step_5.log").read_text()
    evals = [
        json.loads(line.split(":::MLLOG ", 1)[1])["metadata"]["epoch_num"]
        for line in log.splitlines()
        if '"key": "eval_accuracy"' in line
    ]
    assert evals == [48, 64]


def test_checkpoints_pruned_and_partial_ignored(data_dir, tmp_path):
    out = tmp_path / "run"
    train(data_dir, out, 6, **{"checkpoint.interval_steps": 2, "checkpoint.keep": 2})
    root = out / "checkpoints"
    assert [p.name for p in complete_checkpoints(root)] == ["step_00000004", "step_00000006"]
    assert not list(root.glob("*.partial")) and not list(root.rglob(".*.tmp"))
    # a save killed half-way: its folder has no manifest and is not resumed from
    shutil.copytree(root / "step_00000006", root / "step_00000008.partial")
    (root / "step_00000008.partial" / MANIFEST).unlink()
    assert resume_candidates("auto", out) == [root / "step_00000006", root / "step_00000004"]
    manifest = Manifest.read(root / "step_00000006")
    assert (manifest.step, manifest.samples, manifest.world_size) == (6, 48, 1)


def test_resume_auto_without_checkpoint_starts_fresh(data_dir, tmp_path):
    trainer, result = train(data_dir, tmp_path, 2, **{"checkpoint.resume": "auto"})
    assert trainer.ckpt.resume_from is None and result.steps == 2
    assert (tmp_path / "mlperf.log").is_file()


def test_resume_errors(data_dir, tmp_path):
    with pytest.raises(CheckpointError, match="not a complete training checkpoint"):
        resume_candidates(str(tmp_path), tmp_path)
    out = tmp_path / "run"
    train(data_dir, out, 2, **{"checkpoint.interval_steps": 2})
    folder = step_dir(out / "checkpoints", 2)
    manifest = json.loads((folder / MANIFEST).read_text())
    (folder / MANIFEST).write_text(json.dumps({**manifest, "world_size": 4}))
    with pytest.raises(CheckpointError, match="saved by 4 ranks, this job has 1"):
        train(data_dir, out, 4, **{"checkpoint.resume": str(folder)})
    # what a run with another global batch writes: its samples follow its batch
    (folder / MANIFEST).write_text(json.dumps({**manifest, "global_batch_size": 16, "samples": 32}))
    with pytest.raises(CheckpointError, match="run.global_batch_size=16"):
        train(data_dir, out, 4, **{"checkpoint.resume": "auto"})
    (folder / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(
        CheckpointError,
        match="optim.sharded=True given, the checkpoint was trained with optim.sharded=False",
    ):
        train(data_dir, out, 4, **{"checkpoint.resume": "auto", "optim.sharded": True})
    with pytest.raises(
        CheckpointError,
        match="model.hidden_size=64 given, the checkpoint was trained with model.hidden_size=32",
    ):
        train(data_dir, out, 4, **{"checkpoint.resume": "auto", "model.hidden_size": 64})
    # without its config.json a checkpoint is not one of this version: refused, never guessed
    (folder / CONFIG_FILE).unlink()
    with pytest.raises(CheckpointError, match="no config.json"):
        train(data_dir, out, 4, **{"checkpoint.resume": "auto"})


@pytest.mark.parametrize(
    "changed, words",
    [
        ({"step": 10**20, "samples": 8 * 10**20}, "step 100000000000000000000 is outside"),
        ({"samples": 17}, "samples 17 is not step 2 x global_batch_size 8"),
        ({"step": -1, "samples": -8}, "step -1 is outside"),
    ],
    ids=["step-1e20", "samples-not-step-x-batch", "negative"],
)
def test_resume_refuses_an_impossible_manifest_with_one_line(
    data_dir, tmp_path, capsys, changed, words
):
    sys.path.insert(0, str(ROOT))
    import run_pretraining

    out = tmp_path / "run"
    train(data_dir, out, 2, **{"checkpoint.interval_steps": 2})
    folder = step_dir(out / "checkpoints", 2)
    manifest = json.loads((folder / MANIFEST).read_text())
    (folder / MANIFEST).write_text(json.dumps({**manifest, **changed}))
    capsys.readouterr()
    args = [
        "--quiet",
        *set_args(tiny_settings(data_dir, out, 4, **{"checkpoint.resume": str(folder)})),
    ]
    assert run_pretraining.main(args) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and words in errors[0] and "Traceback" not in err, err


def test_resume_refuses_a_trainer_state_at_another_step_than_its_manifest(data_dir, tmp_path):
    out = tmp_path / "run"
    train(data_dir, out, 4, **{"checkpoint.interval_steps": 2, "checkpoint.keep": 2})
    root = out / "checkpoints"
    shutil.copy(step_dir(root, 2) / "trainer.pt", step_dir(root, 4) / "trainer.pt")
    with pytest.raises(CheckpointError, match="trainer.pt is at step 2 .* its manifest at step 4"):
        train(data_dir, out, 6, **{"checkpoint.resume": str(step_dir(root, 4))})


def test_the_resume_point_is_resolved_once(data_dir, tmp_path, monkeypatch):
    """`--resume auto` over a damaged newest checkpoint and an intact older one, with the first
    run's --record-samples trail: whether the run resumes (so the trail may grow) and the step
    it restores are one answer, the Checkpointer's, resolved once; the cli resolves nothing."""
    sys.path.insert(0, str(ROOT))
    import run_pretraining
    from bert.train.checkpoint import resume_point

    resolved = []
    real = resume_point.resume_candidates
    monkeypatch.setattr(
        resume_point, "resume_candidates", lambda *args: resolved.append(args) or real(*args)
    )
    out, records = tmp_path / "run", tmp_path / "records"

    def main(steps: int, *cli: str) -> int:
        settings = tiny_settings(data_dir, out, steps, **{"checkpoint.interval_steps": 2})
        return run_pretraining.main(["--record-samples", str(records), *cli, *set_args(settings)])

    assert main(4) == 0
    (step_dir(out / "checkpoints", 4) / "trainer.pt").write_bytes(b"not a pickle")
    resolved.clear()
    assert main(6, "--resume", "auto") == 0
    assert len(resolved) == 1
    assert (out / "mlperf_resumed_step_2.log").is_file()
    steps = [step for step, _, _ in read_records(records / "rank0.txt")]
    assert [s for i, s in enumerate(steps) if i == 0 or steps[i - 1] != s] == [
        0,
        1,
        2,
        3,
        2,
        3,
        4,
        5,
    ]


def test_a_data_position_that_does_not_fit_is_refused_naming_the_checkpoint(data_dir, tmp_path):
    """Restored when the pipeline opens at run_start, after the rest: still one DamagedCheckpoint
    naming the checkpoint, not a KeyError from inside the pipeline."""
    out = tmp_path / "run"
    train(data_dir, out, 2, **{"checkpoint.interval_steps": 2})
    folder = step_dir(out / "checkpoints", 2)
    rank_state = torch.load(folder / "rank_00000.pt", weights_only=False)
    torch.save({**rank_state, "pipeline": {"step": 2}}, folder / "rank_00000.pt")
    with pytest.raises(CheckpointError, match=f"{folder}: does not fit .*'source'"):
        train(data_dir, out, 4, **{"checkpoint.resume": "auto"})


def test_eval_only_reports_the_initial_accuracy(data_dir, tmp_path):
    """Eval-only scores the checkpoint it loads, opens no training shard, writes its own log."""
    trained, _ = train(data_dir, tmp_path / "train", 4)
    weights = tmp_path / "weights.pt"
    torch.save(trained.raw_model.state_dict(), weights)
    expected = trained.evaluate(trained._read_eval_set())
    no_shards = tmp_path / "no_shards"
    no_shards.mkdir()
    trainer, result = train(
        data_dir,
        tmp_path / "eval",
        4,
        **{"run.eval_only": True, "run.init_checkpoint": weights, "data.train_dir": no_shards},
    )
    assert result.status == "eval_only" and result.steps == 0
    assert result.eval_accuracy == expected
    log = (tmp_path / "eval" / "mlperf_eval_only.log").read_text()
    assert log.count('"key": "eval_accuracy"') == 1 and '"key": "block_start"' not in log


# -- a 2-rank job killed with SIGKILL mid-run, then resumed -----------------------------------


def run_job(data_dir, out, steps: int, *cli: str, **env: str) -> tuple[int, str]:
    """A 2-rank torchrun job (tests/launchers.py): (status, output).
    env: faults to inject (tests/faults.py runs the program then)."""
    settings = tiny_settings(
        data_dir,
        out,
        steps,
        **{
            "optim.sharded": True,
            "data.balance": "serpentine",
            "checkpoint.interval_steps": 3,
            "checkpoint.keep": 0,
            "run.global_batch_size": 16,
            "eval.interval_samples": 64,
            "log.interval_s": 1000,
        },
    )
    settings.pop("log.quiet")
    program = ROOT / "tests" / "faults.py" if env else ROOT / "run_pretraining.py"
    args = [str(program), "--quiet", "--record-samples", str(out / "rec"), *cli]
    args += set_args(settings)
    code, output, _ = launch("torchrun", 2, args, **env)
    return code, output


@pytest.mark.distributed
def test_killed_two_rank_job_resumes_to_the_same_weights(data_dir, tmp_path):
    code, output = run_job(data_dir, tmp_path / "whole", 8)
    assert code == 0, output[-3000:]  # a budget stop: too small for the target
    code, output = run_job(
        data_dir, tmp_path / "split", 8, BERT_TEST_KILL_RANK="1", BERT_TEST_KILL_STEP="5"
    )
    assert code != 0
    assert signal.SIGKILL.name in output or "-9" in output, output[-3000:]
    split_ckpts = tmp_path / "split" / "checkpoints"
    assert [p.name for p in complete_checkpoints(split_ckpts)] == ["step_00000003"]
    code, output = run_job(data_dir, tmp_path / "split", 8, "--resume", "auto")
    assert code == 0, output[-3000:]
    assert_same_state(final_state(tmp_path / "whole", 8), final_state(tmp_path / "split", 8))
    # The audit trail: the killed job handed out steps 0-4 (rank 0 maybe more, before it
    # noticed its peer's death), the resumed one steps 3-7 again, each step with exactly the
    # samples the uninterrupted job trained at that step.
    for rank in (0, 1):
        whole_rec = read_records(tmp_path / "whole" / "rec" / f"rank{rank}.txt")
        split_rec = read_records(tmp_path / "split" / "rec" / f"rank{rank}.txt")
        resumed_part = [r for r in whole_rec if r[0] >= 3]
        killed_part = split_rec[: len(split_rec) - len(resumed_part)]
        assert split_rec[len(killed_part) :] == resumed_part
        last_killed_step = killed_part[-1][0]
        assert last_killed_step >= 4
        assert killed_part == [r for r in whole_rec if r[0] <= last_killed_step]


def test_eval_only_command_line(data_dir, tmp_path, capsys):
    """`run_pretraining.py --eval-only` prints the accuracy and exits 0 (target not reached)."""
    sys.path.insert(0, str(ROOT))
    import run_pretraining

    settings = tiny_settings(data_dir, tmp_path, 4)
    settings.pop("log.quiet")
    args = ["--eval-only", *set_args(settings)]
    assert run_pretraining.main(args) == 0
    assert "eval-only: MLM accuracy" in capsys.readouterr().out
