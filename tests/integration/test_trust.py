"""Results and logs tell the truth and survive failed runs.

- No log of an earlier run is replaced by a partial one: a run that fails before run_stop
  (missing or bad init checkpoint, truncated trainer.pt, missing rank file) leaves the earlier
  complete log byte-identical (a damaged checkpoint is refused before any log opens); a run
  that finishes
  keeps an earlier log beside it (`.previous`); an eval-only run never touches mlperf.log.
- A resumed run refuses changed training settings with one `error:` line (exit 2), marks its
  log (`resumed_from_checkpoint`), which scripts/package_results.py then refuses; every log
  carries the topology keys and passes the official 5.0.0 checker.
- `--quiet` still prints the run_stop line and how the run ended; a budget stop exits 0, a
  schedule that ends without the target 1.
- The console's samples/s is metrics.jsonl's; the time left counts to the run's last step
  (one speed figure).

The runs go through `run_pretraining.main` in this process (exit status and printed lines as a
user sees them) on a 1-layer BERT and tiny synthetic shards.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest
import torch

from bert.submission import reader as run_logs
from bert.train.checkpoint.layout import rank_file, step_dir

from commands import check_compliance, one_error_line, run_python
from tiny_run import make_tiny_data, tiny_settings
from bert.tools.common import set_args

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import run_pretraining  # noqa: E402


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return make_tiny_data(tmp_path_factory.mktemp("trust_data"))


def settings(data_dir: Path, out: Path) -> dict:
    return tiny_settings(
        data_dir,
        out,
        **{
            "run.max_steps": 4,
            "schedule.total_steps": 20,
            "schedule.warmup_steps": 2,
            "checkpoint.interval_steps": 2,
            "checkpoint.keep": 0,
            "log.interval_s": 1000,
            "submission.division": "closed",
        },
    )


def run(capsys, data_dir: Path, out: Path, *cli: str, **changed) -> tuple[int, str, str]:
    """run_pretraining.py with the tiny settings (`changed` on top): (status, stdout, stderr).
    An exception that escapes main counts as status 1, as it would for the process."""
    values = {**settings(data_dir, out), **changed}
    args = [*cli, *set_args(values)]
    capsys.readouterr()
    try:
        code = run_pretraining.main(args)
    except Exception as err:  # noqa: BLE001 - a crash, reported as the process would exit
        code = 1
        print(f"crash: {err!r}", file=sys.stderr)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def records(path: Path) -> list[dict]:
    return [
        json.loads(line.split(":::MLLOG ", 1)[1])
        for line in path.read_text().splitlines()
        if ":::MLLOG" in line
    ]


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.is_file())


@pytest.fixture
def finished(capsys, data_dir, tmp_path) -> Path:
    """An output folder after one complete run (4 steps, checkpoints at steps 2 and 4)."""
    out = tmp_path / "out"
    code, _, err = run(capsys, data_dir, out)
    assert code == 0, err  # the tiny budget: a budget stop, run_stop aborted
    # beside the log, the metrics and the run record (bert/obs/), published with it
    assert names(out) == ["metrics.jsonl", "mlperf.log", "run.json"]
    return out


# -- (2) a failed run leaves earlier results as they were -------------------------------------


def test_bad_init_checkpoint_is_refused_before_anything_is_written(
    capsys, data_dir, finished, tmp_path
):
    # the init checkpoint is read before the log opens: a missing or broken one writes nothing
    before = {name: (finished / name).read_bytes() for name in names(finished)}
    code, _, err = run(
        capsys, data_dir, finished, **{"run.init_checkpoint": tmp_path / "missing.pt"}
    )
    assert code == 2 and "missing.pt" in one_error_line(err)
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint")
    code, _, err = run(capsys, data_dir, finished, **{"run.init_checkpoint": garbage})
    assert code == 2 and "garbage.pt" in one_error_line(err)
    assert {name: (finished / name).read_bytes() for name in names(finished)} == before


def test_eval_only_leaves_mlperf_log_alone(capsys, data_dir, finished):
    log = finished / "mlperf.log"
    before = log.read_bytes()
    code, out, _ = run(capsys, data_dir, finished, "--eval-only")
    assert code == 0 and "eval-only: MLM accuracy" in out
    assert log.read_bytes() == before
    assert names(finished) == [
        "metrics.jsonl",
        "metrics_eval_only.jsonl",
        "mlperf.log",
        "mlperf_eval_only.log",
        "run.json",
        "run_eval_only.json",
    ]


def test_a_finished_run_keeps_the_earlier_log_beside_its_own(capsys, data_dir, finished):
    before = (finished / "mlperf.log").read_bytes()
    code, out, _ = run(capsys, data_dir, finished, **{"run.seed": 8})
    assert code == 0 and "is kept as" in out
    previous = [n for n in names(finished) if n.endswith(".previous")]
    # the log, and the metrics and run record that came with it
    assert sorted(n.split(".")[0] for n in previous) == ["metrics", "mlperf", "run"]
    log = next(n for n in previous if n.startswith("mlperf.log."))
    assert (finished / log).read_bytes() == before
    seeds = [r["value"] for r in records(finished / "mlperf.log") if r["key"] == "seed"]
    assert seeds == [8]


@pytest.mark.parametrize("damage", ["truncated trainer.pt", "missing rank file"])
def test_failed_resume_leaves_the_earlier_resumed_log(capsys, data_dir, finished, damage):
    ckpt = step_dir(finished / "checkpoints", 2)
    code, _, err = run(capsys, data_dir, finished, "--resume", str(ckpt))
    assert code == 0, err
    resumed = finished / "mlperf_resumed_step_2.log"
    before = resumed.read_bytes()
    if damage == "truncated trainer.pt":
        trainer_pt = ckpt / "trainer.pt"
        trainer_pt.write_bytes(trainer_pt.read_bytes()[:1000])
    else:
        (ckpt / rank_file(0)).unlink()
    code, _, err = run(capsys, data_dir, finished, "--resume", str(ckpt))
    assert code == 2 and str(ckpt) in one_error_line(err)
    assert resumed.read_bytes() == before
    # found before the log opens (bert/train/checkpoint/resume_point.py): no log at all
    assert not [n for n in names(finished) if ".partial" in n or n.endswith(".failed")]


# -- (3) resume tells the truth -------------------------------------------------------------------


@pytest.mark.parametrize(
    "changed, fragments",
    [
        ({"optim.lr": 0.001}, ["optim.lr=0.001 given", "optim.lr=0.01"]),
        ({"run.seed": 8}, ["run.seed=8 given", "run.seed=7"]),
        (
            {"data.balance": "serpentine", "schedule.total_steps": 30},
            [
                "data.balance='serpentine' given",
                "data.balance='none'",
                "1 more: schedule.total_steps",
            ],
        ),
    ],
    ids=["lr", "seed", "two-keys"],
)
def test_resume_refuses_changed_training_settings(capsys, data_dir, finished, changed, fragments):
    before = names(finished)
    code, _, err = run(capsys, data_dir, finished, "--resume", "auto", **changed)
    assert code == 2
    line = one_error_line(err)
    for fragment in ["checkpoints/step_00000004", *fragments]:
        assert fragment in line, line
    assert names(finished) == before  # refused before any log was opened


def test_resume_may_change_what_does_not_train(capsys, data_dir, finished):
    """Seed -1 takes the checkpoint's; budget, evaluation, logging are free."""
    code, _, err = run(
        capsys,
        data_dir,
        finished,
        "--resume",
        "auto",
        "--quiet",
        **{"run.seed": -1, "run.max_steps": 6, "eval.samples": 20, "log.interval_s": 5},
    )
    assert code == 0, err
    recs = records(finished / "mlperf_resumed_step_4.log")
    assert [r["value"] for r in recs if r["key"] == "seed"] == [7]
    assert [r["value"] for r in recs if r["key"] == "eval_samples"] == [20]


def init_phase(recs: list[dict]) -> list[str]:
    keys = [r["key"] for r in recs]
    return keys[keys.index("init_start") : keys.index("init_stop")]


def test_resumed_log_is_marked_and_packaging_refuses_it(capsys, data_dir, finished, tmp_path):
    code, _, err = run(
        capsys, data_dir, finished, "--resume", str(step_dir(finished / "checkpoints", 2))
    )
    assert code == 0, err
    recs = records(finished / "mlperf_resumed_step_2.log")
    marks = [r for r in recs if r["key"] == "resumed_from_checkpoint"]
    assert len(marks) == 1 and marks[0]["value"] == 2 and marks[0]["metadata"]["samples"] == 16
    phase = init_phase(recs)
    assert "resumed_from_checkpoint" in phase
    assert phase.index("resumed_from_checkpoint") > phase.index("opt_base_learning_rate")
    assert "resumed_from_checkpoint" not in init_phase(records(finished / "mlperf.log"))
    # a copy under another name is still refused, for the mark
    copy = tmp_path / "result_0.txt"
    copy.write_bytes((finished / "mlperf_resumed_step_2.log").read_bytes())
    package = ROOT / "scripts" / "package_results.py"
    args = [copy, "--system", "s", "--out", tmp_path / "pkg", "--allow-aborted", "--unofficial"]
    proc = run_python(package, *args, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "MLLOG resumed_from_checkpoint event: resumed from step 2" in one_error_line(proc.stderr)


def test_topology_keys_logged_and_checker_passes(capsys, data_dir, tmp_path):
    out = tmp_path / "out"
    code, _, err = run(capsys, data_dir, out, **{"submission.division": "open"})
    assert code == 0, err
    code, _, err = run(
        capsys,
        data_dir,
        out,
        "--resume",
        "auto",
        **{"submission.division": "open", "run.max_steps": 6},
    )
    assert code == 0, err
    expected = {"number_of_nodes": 1, "accelerators_per_node": 0, "accelerator_model_name": "N/A"}
    for log in (out / "mlperf.log", out / "mlperf_resumed_step_4.log"):
        recs = records(log)
        found = {r["key"]: r["value"] for r in recs if r["key"] in expected}
        assert found == expected
        assert all(key in init_phase(recs) for key in expected)
        assert sum(r["key"] in expected for r in recs) == 3  # once each
        assert run_logs.read_run(log).topology == {k: str(v) for k, v in expected.items()}
        proc = check_compliance(log)
        assert proc.returncode == 0, proc.stdout + proc.stderr


# -- (4) what the console says ---------------------------------------------------------------


def test_quiet_still_reports_how_the_run_ended(capsys, data_dir, tmp_path):
    code, out, _ = run(capsys, data_dir, tmp_path / "out", "--quiet")
    assert code == 0  # 4 of the schedule's 20 steps: stopped at the step budget, as told
    lines = [line.split(" rank 0 INFO ", 1)[1] for line in out.splitlines()]  # the messages
    assert len(lines) == 2, lines  # the run_stop line and how it ended, with the log
    assert lines[0].startswith("run_stop aborted: eval MLM accuracy") and "4 steps" in lines[0]
    assert lines[1].startswith("ended: stopped at its step budget before the target")
    assert "exit status 0. MLPerf log: " in lines[1]
    result = json.loads((tmp_path / "out" / "run.json").read_text())["result"]
    assert (result["status"], result["end"], result["exit_status"]) == ("aborted", "step_budget", 0)


def test_a_schedule_that_ends_without_the_target_is_a_failure(capsys, data_dir, tmp_path):
    """No step budget below the schedule's end: running out of schedule without the target
    exits 1 and says so, where a budget stop (above) exits 0; the time left counts to the
    schedule's end, "at most" (the target may end the run sooner)."""
    out = tmp_path / "out"
    budget = {"run.max_steps": 0, "schedule.total_steps": 4, "log.interval_s": 0}
    code, printed, _ = run(capsys, data_dir, out, **budget)
    assert code == 1
    messages = [line.split(" rank 0 INFO ", 1)[1] for line in printed.splitlines()]
    assert messages[-1].startswith("ended: failed: the schedule ended without reaching the target")
    assert "exit status 1" in messages[-1]
    steps = [m for m in messages if m.startswith("step ")]
    assert steps and all("at most ~" in m and "to step 4 (the schedule's end)" in m for m in steps)
    result = json.loads((out / "run.json").read_text())["result"]
    assert (result["status"], result["end"], result["exit_status"]) == (
        "aborted",
        "target_missed",
        1,
    )
    # a step budget set at the schedule's end is no budget stop: the schedule ran out
    code, _, _ = run(capsys, data_dir, tmp_path / "again", **{**budget, "run.max_steps": 4})
    assert code == 1


RATE = re.compile(r"^step +(\d+) \| .* \| +([\d.]+) samples/s \|")


def test_the_console_rate_is_metrics_jsonl_rate(capsys, data_dir, tmp_path, monkeypatch):
    """One speed figure: each progress line's samples/s is the one metrics.jsonl records for the
    same step, evals' time excluded from both (an eval every 2 steps, a line every step; each
    eval made 1 s slower, which the interval after it must not count)."""
    from bert.train.trainer import Trainer

    evaluate = Trainer.evaluate

    def slow_evaluate(self, eval_set):
        time.sleep(1.0)
        return evaluate(self, eval_set)

    monkeypatch.setattr(Trainer, "evaluate", slow_evaluate)
    out = tmp_path / "out"
    code, printed, _ = run(capsys, data_dir, out, **{"log.interval_s": 0})
    assert code == 0
    console = {
        int(m.group(1)): float(m.group(2))
        for line in printed.splitlines()
        if (m := RATE.match(line.split(" rank 0 INFO ", 1)[-1]))
    }
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    recorded = {r["step"]: r["samples_per_s"] for r in metrics if r["kind"] == "train"}
    assert sorted(console) == sorted(recorded) == [1, 2, 3, 4]
    for step, rate in console.items():
        assert rate == pytest.approx(recorded[step], abs=0.051), (step, rate, recorded[step])
    assert 8 / recorded[3] < 1.0  # step 3's interval (8 samples) holds no eval second


def test_eta_is_to_the_last_step_at_the_mean_rate(monkeypatch, capsys):
    """The time left is to the run's last step at the mean rate since the start, not at the
    last interval's rate (which jumps), and the line says what ends the run there."""
    from bert.train import progress as progress_module

    clock = [1000.0]
    monkeypatch.setattr(progress_module.time, "time", lambda: clock[0])
    progress = progress_module.Progress(enabled=True, interval_s=5)
    progress.start(total_samples=1000, start_samples=100, total_steps=100, end_name="run.max_steps")
    clock[0] += 6.0  # 60 samples in 6 s
    progress.step(16, 160, torch.tensor(2.0), lambda: 1e-3)
    clock[0] += 7.0  # then 140 samples in 7 s: 20/s now, 200/13 s on average
    progress.step(30, 300, torch.tensor(2.0), lambda: 1e-3)
    first, second = capsys.readouterr().out.splitlines()
    assert "at most ~0:01:24 to step 100 (run.max_steps)" in first  # 840 samples at 10/s
    assert "20.0 samples/s" in second
    assert "at most ~0:00:45 to step 100 (run.max_steps)" in second  # 700 at 15.4/s, not 35 s


def test_an_eval_between_points_counts_in_no_rate(monkeypatch, capsys):
    """An eval ends an interval and the next starts after it: the rate after a long eval is
    the training rate (the console once showed 2.1 samples/s where training ran at 46)."""
    from bert.train import progress as progress_module

    clock = [1000.0]
    monkeypatch.setattr(progress_module.time, "time", lambda: clock[0])
    seen = []
    progress = progress_module.Progress(
        enabled=True, interval_s=5, on_point=lambda *point: seen.append(point)
    )
    progress.start(total_samples=10_000, total_steps=1000)
    clock[0] += 2.0
    progress.step(10, 100, torch.tensor(2.0), lambda: 1e-3)
    progress.point(10, 100, lambda: 1e-3)  # the eval point
    clock[0] += 60.0  # the eval
    progress.restart_interval(100)
    clock[0] += 6.0  # 120 samples in 6 s of training
    progress.step(22, 220, torch.tensor(2.0), lambda: 1e-3)
    assert "20.0 samples/s" in capsys.readouterr().out.splitlines()[-1]
    assert seen[-1][-1] == pytest.approx(6.0)  # the seconds metrics.jsonl's rate divides by
