"""A run leaves what it takes to see inside it (bert/obs/).

One 40-step run of a 1-layer BERT (in this process, through run_pretraining.main) with the
profiler window and TensorBoard on, then its files are read back:
- metrics.jsonl: every field present and sane (loss finite and falling, samples monotone, lr
  the schedule's value at that step), eval records equal to the MLPerf log's accuracies;
- TensorBoard events, read with TensorBoard's own reader, hold the same scalars;
- mlperf.log has tracked_stats at each eval point and passes the official checker;
- run.json: every config key with its value and source, versions, code, device, command;
- the trace (gzipped Chrome JSON) loads with json and holds the named ranges.
Plus --print-config, the TensorBoard requirement, the FLOP bookkeeping and the log format.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from bert.config import describe_fields, load_config
from bert.model.flops import batch_flops
from bert.obs.mfu import SquareSums
from bert.obs.logs import get_logger, setup_logging
from bert.obs.observer import file_suffix
from bert.core.ranges import RANGE_NAMES
from bert.obs.sinks import read_records
from bert.optim.schedule import lr_at
from bert.core.errors import ConfigError
from bert.train.config import LogConfig
from bert.model.flops import LengthMix, training_flops
from data.packing import Sample, pack_samples

from commands import check_compliance
from tiny_run import make_tiny_data, tiny_settings
from bert.tools.common import set_args

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import run_pretraining  # noqa: E402

STEPS, TOTAL_STEPS, BASE_LR, WARMUP, GBS, EVAL_EVERY = 40, 60, 2e-2, 2, 8, 160
TRAIN_FIELDS = {
    "kind",
    "time",
    "step",
    "samples",
    "loss",
    "finite",
    "lr",
    "grad_norm",
    "loss_scale",
    "skipped_steps",
    "samples_per_s",
    "tokens_per_s",
    "tflops_per_s",
    "mfu",
    "peak_memory_mib",
    "data_wait_share",
    "interval_steps",
}
EVAL_FIELDS = {"kind", "time", "step", "samples", "eval_mlm_accuracy", "eval_seconds"}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return make_tiny_data(tmp_path_factory.mktemp("obs_data"))


def tiny_args(data_dir: Path, out: Path, **changed) -> list[str]:
    return set_args(
        tiny_settings(
            data_dir,
            out,
            **{
                "model.attention": "padded_sdpa",
                "run.global_batch_size": GBS,
                "run.max_steps": STEPS,
                "eval.interval_samples": EVAL_EVERY,
                "schedule.total_steps": TOTAL_STEPS,
                "schedule.warmup_steps": WARMUP,
                "optim.lr": BASE_LR,
                "log.interval_s": 0,
                **changed,
            },
        )
    )


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, data_dir) -> tuple[Path, str]:
    """One run with every sink on: profiler window over steps 20-21 (an eval follows step 20),
    the sharded optimizer (its exchange ranges), TensorBoard. Returns (folder, stdout)."""
    out = tmp_path_factory.mktemp("obs_run") / "out"
    args = tiny_args(
        data_dir,
        out,
        **{
            "profile.start_step": 20,
            "profile.steps": 2,
            "optim.sharded": True,
            "log.tensorboard": True,
        },
    )
    captured = _capture(lambda: run_pretraining.main(args))
    assert captured["status"] == 0, captured  # a budget stop (the target never reached)
    return out, captured["stdout"]


def _capture(call) -> dict:
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = call()
    return {"status": status, "stdout": out.getvalue(), "stderr": err.getvalue()}


def mlperf_records(path: Path) -> list[dict]:
    return [
        json.loads(line.split(":::MLLOG ", 1)[1])
        for line in path.read_text().splitlines()
        if ":::MLLOG" in line
    ]


def test_run_leaves_its_files(run_dir):
    out, _ = run_dir
    names = {p.name for p in out.iterdir()}
    assert {"mlperf.log", "metrics.jsonl", "run.json", "tensorboard", "profile"} <= names
    assert not [n for n in names if n.endswith(".partial")]


def test_metrics_fields_are_present_and_sane(run_dir):
    out, _ = run_dir
    records = read_records(out / "metrics.jsonl")
    train = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train] == list(range(1, STEPS + 1))  # interval 0: every step
    for r in train:
        assert set(r) == TRAIN_FIELDS
        assert r["finite"] and r["loss"] > 0 and r["samples"] == r["step"] * GBS
        # the lr of the next update: lr_at(updates so far) (no fp16, so no skipped step)
        assert r["lr"] == pytest.approx(lr_at(r["step"], BASE_LR, TOTAL_STEPS, WARMUP), rel=1e-6)
        assert r["grad_norm"] > 0 and r["skipped_steps"] == 0 and r["loss_scale"] is None
        assert r["samples_per_s"] > 0 and r["tokens_per_s"] > r["samples_per_s"]
        assert 0 < r["mfu"] < 1 and r["tflops_per_s"] > 0
        assert r["peak_memory_mib"] > 0 and 0 <= r["data_wait_share"] <= 1
    losses = [r["loss"] for r in train]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.3  # it learns
    samples = [r["samples"] for r in records]
    assert samples == sorted(samples)
    evals = [r for r in records if r["kind"] == "eval"]
    assert all(set(r) == EVAL_FIELDS for r in evals)
    logged = [
        (r["metadata"]["epoch_num"], r["value"])
        for r in mlperf_records(out / "mlperf.log")
        if r["key"] == "eval_accuracy"
    ]
    assert [(r["samples"], r["eval_mlm_accuracy"]) for r in evals] == logged
    assert [r["samples"] for r in evals] == [EVAL_EVERY, 2 * EVAL_EVERY]


def test_tensorboard_events_hold_the_same_scalars(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, _ = run_dir
    events = list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1
    reader = EventAccumulator(str(events[0]))
    reader.Reload()
    train = [r for r in read_records(out / "metrics.jsonl") if r["kind"] == "train"]
    loss = reader.Scalars("train/loss")
    assert [e.step for e in loss] == [r["samples"] for r in train]
    assert [e.value for e in loss] == pytest.approx([r["loss"] for r in train], rel=1e-6)
    for tag in ("train/lr", "train/mfu", "train/data_wait_share", "eval/eval_mlm_accuracy"):
        assert reader.Scalars(tag), tag


def test_mlperf_log_has_tracked_stats_and_passes_the_checker(run_dir):
    out, _ = run_dir
    log = out / "mlperf.log"
    lines = mlperf_records(log)
    stats = [r for r in lines if r["key"] == "tracked_stats"]
    assert [r["metadata"]["samples_count"] for r in stats] == [EVAL_EVERY, 2 * EVAL_EVERY]
    train = {r["step"]: r for r in read_records(out / "metrics.jsonl") if r["kind"] == "train"}
    for r in stats:
        assert set(r["value"]) == {"throughput", "loss", "lr"} and r["value"]["throughput"] > 0
        assert r["value"]["lr"] == train[r["metadata"]["step"]]["lr"]
    checked = check_compliance(log)
    assert checked.returncode == 0 and f"PASS {log}" in checked.stdout, checked.stdout


def test_run_record(run_dir):
    out, _ = run_dir
    record = json.loads((out / "run.json").read_text())
    keys = {line.split(" ")[0] for line in describe_fields()}
    assert set(record["config"]) == keys
    config = record["config"]
    assert config["optim.lr"] == {"value": BASE_LR, "source": "--set"}
    assert config["model.initializer_range"]["source"] == "file"  # configs/tiny_cpu.yaml
    assert config["optim.beta1"]["source"] == "default"
    for name in ("torch", "numpy", "h5py", "mlperf-logging", "python"):
        assert record["versions"][name], name
    assert record["code"].get("git_commit") or record["code"].get("package_version")
    assert record["device"]["device"] == "cpu" and record["device"]["world_size"] == 1
    assert "--set" in record["command"] and record["config_file"].endswith("tiny_cpu.yaml")
    assert record["metrics"]["peak_source"].startswith("measured")  # CPU: a matmul at start
    assert record["result"]["status"] == "aborted" and record["result"]["steps"] == STEPS
    assert record["files"] == {"metrics": "metrics.jsonl", "mlperf_log": "mlperf.log"}


def test_trace_holds_the_named_ranges(run_dir):
    out, stdout = run_dir
    traces = list((out / "profile").glob("trace_rank0_steps20-21.json.gz"))
    assert len(traces) == 1
    with gzip.open(traces[0], "rt") as f:
        trace = json.load(f)
    names = {event.get("name") for event in trace["traceEvents"]}
    assert set(RANGE_NAMES) <= names  # eval: the eval after step 20 is inside the window
    # labelled with the training steps (warm-up 19, then 20 and 21), not the profiler's count
    assert "ProfilerStep#20" in names and "ProfilerStep#22" not in names
    table = stdout.split("profile: wrote", 1)[1]
    assert all(f"\n{name} " in table for name in RANGE_NAMES)  # the window's summary


def test_print_config_prints_the_resolved_config_and_exits(tmp_path):
    out = tmp_path / "out"
    captured = _capture(
        lambda: run_pretraining.main(
            ["--print-config", "--set", "optim.lr=0.5", "--set", f"run.output_dir={out}", "--quiet"]
        )
    )
    assert captured["status"] == 0 and captured["stderr"] == ""
    text = captured["stdout"]
    assert "  lr: 0.5  # --set" in text and "  quiet: true  # flag" in text
    assert "  hidden_size: 128  # file" in text and "  beta1: 0.9  # default" in text
    assert not out.exists()
    resolved = tmp_path / "resolved.yaml"
    resolved.write_text(text)
    assert yaml.safe_load(text)["optim"]["lr"] == 0.5
    assert load_config(resolved) == load_config(
        ROOT / "configs" / "tiny_cpu.yaml",
        ["optim.lr=0.5", f"run.output_dir={out}", "log.quiet=true"],
    )


def test_tensorboard_without_the_package_is_a_config_error(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "tensorboard" else real(name, *a),
    )
    with pytest.raises(ConfigError, match=r"tensorboard package: pip install .*\[track\]"):
        LogConfig(tensorboard=True)
    LogConfig(tensorboard=False)


def samples_of_lengths(lengths: list[int]) -> list[Sample]:
    return [
        Sample(
            np.full(n, 5, np.int16),
            np.zeros(n, np.int8),
            np.array([1], np.int16),
            np.array([7], np.int16),
            0,
        )
        for n in lengths
    ]


def test_square_sums_follow_the_packed_batches():
    """The packing thread's lengths reach the step in order; a mismatch stops the count."""
    squares = SquareSums()
    pack = squares.wrap(pack_samples)
    first, second = pack(samples_of_lengths([3, 4])), pack(samples_of_lengths([5]))
    assert squares.take([first, second]) == 9 + 16 + 25
    pack(samples_of_lengths([2]))
    later = pack(samples_of_lengths([6]))
    assert squares.take([later]) is None and squares.broken  # out of order: no guess
    assert squares.take([later]) is None


def test_batch_flops_agree_with_the_planner():
    """Per batch of equal lengths, the planner's per-sample count (bert/model/flops.py)."""
    cfg = load_config(None).model
    length, masked, batch = 100, 15, 6
    planned = training_flops(cfg, LengthMix(length, length**2, masked, 128))
    assert batch_flops(
        cfg, batch * length, batch * length**2, batch * masked, batch
    ) == pytest.approx(batch * planned, rel=1e-12)


def test_log_lines_carry_time_rank_and_level(capsys):
    setup_logging(rank=1)
    log = get_logger("test")
    log.info("hidden on rank 1")
    log.warning("shown on rank 1")
    setup_logging(rank=1, all_ranks=True)
    log.info("shown with all_ranks")
    setup_logging(rank=0)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
    assert re.fullmatch(f"{stamp} rank 1 WARNING shown on rank 1", lines[0]), lines
    assert re.fullmatch(f"{stamp} rank 1 INFO shown with all_ranks", lines[1]), lines


def test_file_suffix():
    assert file_suffix(Path("o/mlperf.log")) == ""
    assert file_suffix(Path("o/mlperf_resumed_step_4.log")) == "_resumed_step_4"
    assert file_suffix(Path("o/mlperf_eval_only.log")) == "_eval_only"
    assert file_suffix(Path("o/other.log")) == "_other"


def test_a_step_with_metrics_and_ranges_on_reads_nothing_back(monkeypatch, data_dir, tmp_path):
    """The trainer's step, its metrics bookkeeping (data wait, tokens, FLOPs), Progress between
    points and the named ranges: no tensor value is read on the host (tests/unit/test_sync_free.py's
    proxy for a device sync)."""
    from bert.core import ranges
    from bert.train.trainer import Trainer
    from small_model import forbid_host_reads

    args = tiny_args(data_dir, tmp_path / "out", **{"log.interval_s": 1000})
    overrides = [args[i + 1] for i in range(0, len(args), 2)]
    trainer = Trainer(load_config(ROOT / "configs" / "tiny_cpu.yaml", overrides))
    pipeline, _ = trainer._open_data()
    trainer.obs.on_train_start(trainer)
    trainer.train_step(pipeline)  # first step: the optimizer's state is allocated
    ranges.set_recording(True)
    forbid_host_reads(monkeypatch)
    try:
        for step in (2, 3):
            loss = trainer.train_step(pipeline)
            trainer.progress.step(step, step * GBS, loss, trainer.optim.lr)
            trainer.obs.on_step_end(trainer, step)
    finally:
        monkeypatch.undo()
        ranges.set_recording(False)
        trainer._close_data()
        trainer.obs.close(publish=False)
    interval = trainer.obs.recorder.interval
    assert interval.steps == 3 and interval.flops_known and interval.flops > 0


def test_plot_run_draws_metrics_jsonl(run_dir, tmp_path, capsys):
    """scripts/plot_run.py on metrics.jsonl files: one PNG of loss, lr, throughput, accuracy."""
    pytest.importorskip("matplotlib")
    import importlib.util

    spec = importlib.util.spec_from_file_location("plot_run", ROOT / "scripts" / "plot_run.py")
    plot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plot)
    out, _ = run_dir
    png = tmp_path / "metrics.png"
    assert plot.main([str(out / "metrics.jsonl"), "--out", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    broken = tmp_path / "broken" / "metrics.jsonl"
    broken.parent.mkdir()
    broken.write_text('{"kind": "train", "samples": 8}\nnot json\n')
    capsys.readouterr()
    assert plot.main([str(broken), "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == f"error: {broken}: line 2: not valid JSON (Expecting value: line 1 column 1 (char 0))\n"
    )
    assert not (tmp_path / "x.png").exists()


def test_overhead_benchmark_writes_its_record(tmp_path, capsys):
    """bert/tools/bench_overhead.py end to end at its smallest size (the numbers are the
    benchmark's, not asserted here)."""
    from bert.tools.bench_overhead import VARIANTS, main

    out = tmp_path / "overhead.json"
    assert main(["--rounds", "1", "--steps", "2", "--warmup", "0", "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert set(record["variants"]) == set(VARIANTS)
    assert all(row["steps"] == 2 and row["median_ms"] > 0 for row in record["variants"].values())
    assert 0 < record["instrumentation_us_per_step"] < 1e4
    assert {"date", "machine", "code", "command", "settings"} <= set(record)
    assert main(["--rounds", "0", "--json", str(tmp_path / "no.json")]) == 2
    assert not (tmp_path / "no.json").exists()


def test_window_ended_early_writes_what_it_recorded_beside_earlier_traces(tmp_path):
    """A run that stops inside its window (the target reached) still writes the trace, named
    after the steps it holds; a second run's trace never replaces the first's."""
    import torch

    from bert.core import ranges
    from bert.obs.config import ProfileConfig
    from bert.obs.profiler import ProfilerWindow

    paths = []
    for _ in range(2):
        window = ProfilerWindow(
            ProfileConfig(start_step=3, steps=10), tmp_path, 0, torch.device("cpu"), first_step=1
        )
        for step in range(1, 5):
            window.step_begin(step)
            assert ranges.active() == (step >= 2)  # step 2 warms up
            with ranges.named("forward"):
                torch.ones(64, 64) @ torch.ones(64, 64)
            window.step_end(step)
        window.close()
        assert not ranges.active()
        paths.append(window.trace_path)
    assert [p.name for p in paths] == [
        "trace_rank0_steps3-4.json.gz",
        "trace_rank0_steps3-4.1.json.gz",
    ]
    with gzip.open(paths[0], "rt") as f:
        events = json.load(f)["traceEvents"]
    assert sum(e.get("name") == "forward" for e in events) == 2  # steps 3 and 4, not 2
    labels = {e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")}
    # the training steps' own numbers (a run ending inside the window leaves the next one open)
    assert (
        {"ProfilerStep#3", "ProfilerStep#4"} <= labels <= {f"ProfilerStep#{n}" for n in (3, 4, 5)}
    )


def test_profile_keys_are_checked():
    with pytest.raises(ConfigError, match="profile.start_step=0 must be >= 1"):
        load_config(None, ["profile.start_step=0"])
    with pytest.raises(ConfigError, match="profile.steps=-1 must be >= 0"):
        load_config(None, ["profile.steps=-1"])


@pytest.mark.slow  # two whole runs of the command (about 14 s)
def test_the_profiler_window_keeps_kinetos_lines_off_the_console(tmp_path):
    """Kineto prints a `USDT:` line at each profiler start and stop, amid the progress lines; the
    run turns its logging off unless the user set KINETO_LOG_LEVEL (the control: their level
    wins, and the lines are back)."""
    import os

    entry = Path(run_pretraining.__file__)

    def stderr_of(env_extra: dict) -> str:
        env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"} | env_extra
        out = tmp_path / f"run{len(env_extra)}"
        done = subprocess.run(
            [sys.executable, str(entry), "--set", f"run.output_dir={out}"]
            + ["--set", "run.max_steps=4", "--set", "profile.start_step=2"]
            + ["--set", "profile.steps=1"],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        assert list((out / "profile").glob("trace_rank0_*.json.gz"))
        return done.stderr

    assert "USDT" not in stderr_of({})
    assert "USDT" in stderr_of({"KINETO_LOG_LEVEL": "0"})
