"""Submission packaging (scripts/package_results.py) and run plots (scripts/plot_run.py).

Ten fake BERT runs are written with bert.mlperf.MLPerfLogger (distinct seeds, GBS 448, an eval
every 150,000 samples) and then re-timed, since the logger stamps the real clock: each run gets
its own run_stop - run_start. Rules from REFERENCE 1: 10 runs, drop the fastest and slowest,
average 8; at most one run may fail to converge (it counts as the slowest).
"""
from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from bert.config import Config
from bert.train.mlperf import MLPerfLogger

ROOT = Path(__file__).resolve().parents[1]
BLOCK = 150_000  # eval spacing for GBS 448 (REFERENCE 1)
MINUTES = [30.0, 25.0, 27.0, 29.0, 31.0, 26.0, 28.0, 33.0, 24.0, 32.0]
INIT_MS = 30_000


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    sys.path.insert(0, str(ROOT / "scripts"))  # package_results imports check_compliance
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return module


def write_log(path: Path, seed: int, converge: bool, blocks: int = 17) -> Path:
    """A complete closed-division BERT log; accuracy reaches 0.725 at the last block if
    `converge`, else stops at 0.70 (run_stop aborted)."""
    cfg = Config()
    path.parent.mkdir(parents=True, exist_ok=True)
    with MLPerfLogger(str(path), rank=0) as log:
        log.cache_clear(True)
        log.init_start()
        log.submission_info("open-bert", "1x8xA100-SXM4-80GB", "closed", "onprem")
        log.hyperparameters(cfg, train_samples=blocks * BLOCK, eval_samples=10_000, seed=seed)
        log.init_stop()
        log.run_start()
        for b in range(blocks):
            log.block_start(b * BLOCK, b * BLOCK, BLOCK)
            log.block_stop((b + 1) * BLOCK, b * BLOCK, BLOCK)
            log.eval_start((b + 1) * BLOCK)
            log.eval_stop((b + 1) * BLOCK)
            top = 0.725 if converge else 0.70
            log.eval_accuracy(0.35 + (top - 0.35) * (b + 1) / blocks, (b + 1) * BLOCK)
        log.run_stop("success" if converge else "aborted")
    return path


def retime(path: Path, minutes: float, t0_ms: int = 1_700_000_000_000) -> Path:
    """Init lines 1 ms apart, run_start 30 s after init_start, the run's lines evenly spread so
    that run_stop comes `minutes` after run_start."""
    records = [json.loads(line.split(":::MLLOG ", 1)[1]) for line in path.read_text().splitlines()
               if ":::MLLOG" in line]
    start = next(i for i, r in enumerate(records) if r["key"] == "run_start")
    run_ms, body = round(minutes * 60_000), len(records) - start - 1
    for i, record in enumerate(records):
        if i < start:
            record["time_ms"] = t0_ms + i
        else:
            record["time_ms"] = t0_ms + INIT_MS + round(run_ms * (i - start) / body)
    path.write_text("".join(f":::MLLOG {json.dumps(r)}\n" for r in records))
    return path


def make_runs(folder: Path, failed: tuple[int, ...] = ()) -> Path:
    """result_0..9.txt as launch/run_and_time.sh leaves them."""
    for i, minutes in enumerate(MINUTES):
        log = write_log(folder / f"result_{i}.txt", seed=1000 + 7 * i, converge=i not in failed,
                        blocks=16 + i % 2)
        retime(log, minutes)
    return folder


def package(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "package_results.py"), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


# -- packaging ------------------------------------------------------------------------------------

def test_package_layout_checkers_and_score(tmp_path):
    runs = make_runs(tmp_path / "runs", failed=(7,))
    out = tmp_path / "submission"
    proc = package(str(runs), "--system", "1x8xA100", "--out", str(out),
                   "--accelerator", "NVIDIA A100-SXM4-80GB")
    # One non-converged run is allowed: it fails compliance but not the package.
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bench = out / "results" / "1x8xA100" / "bert"
    assert sorted(p.name for p in bench.glob("result_*.txt")) == \
        sorted(f"result_{i}.txt" for i in range(10))
    assert (bench / "result_3.txt").read_text() == (runs / "result_3.txt").read_text()
    from mlperf_logging.system_desc_checker.system_desc_checker import check_system_desc
    valid, name, _, _ = check_system_desc(str(out / "systems" / "1x8xA100.json"), "training",
                                          "5.0.0")
    assert valid and name == "1x8xA100"
    lines = proc.stdout.splitlines()
    for i in range(10):  # the official compliance checker passes every converged log
        row = next(line for line in lines if line.startswith(f"result_{i}.txt "))
        assert ("compliance FAIL" if i == 7 else "compliance PASS") in row, row
        assert f"seed {1000 + 7 * i}" in row
    assert any(line.startswith("rcp checker: ") for line in lines)
    assert any(line.startswith("package checker: ") for line in lines)
    # Converged: 24..33 without 33 (run 7 failed, counts as slowest); drop 24 and run 7.
    assert "score: 28.500 min (olympic mean of 8 of 10 runs)" in proc.stdout


def test_two_nonconverged_runs_give_no_score(tmp_path):
    runs = make_runs(tmp_path / "runs", failed=(2, 5))
    proc = package(str(runs), "--system", "s", "--out", str(tmp_path / "o"), "--skip-checks")
    assert proc.returncode == 1
    assert "score: none (2 runs did not converge; at most one may" in proc.stdout


def test_existing_package_needs_force(tmp_path):
    runs = make_runs(tmp_path / "runs")
    args = (str(runs), "--system", "s", "--out", str(tmp_path / "o"), "--skip-checks")
    assert package(*args).returncode == 0
    again = package(*args)
    assert again.returncode == 2 and "--force" in again.stderr
    assert package(*args, "--force").returncode == 0


def test_olympic_mean_arithmetic():
    script = load_script("package_results")
    assert script.olympic_mean(MINUTES) == pytest.approx(sum(sorted(MINUTES)[1:-1]) / 8)
    assert script.olympic_mean([3.0, 1.0, 2.0, math.inf]) == pytest.approx(2.5)
    with pytest.raises(script.NoScore):
        script.olympic_mean([1.0, 2.0, math.inf, math.inf])
    with pytest.raises(script.NoScore):
        script.olympic_mean([1.0, 2.0])


def test_score_is_run_stop_minus_run_start(tmp_path):
    script = load_script("package_results")
    run = script.read_run(retime(write_log(tmp_path / "r.txt", seed=5, converge=True), 12.25))
    assert run.converged and run.seed == 5 and run.minutes == pytest.approx(12.25)
    aborted = script.read_run(retime(write_log(tmp_path / "a.txt", seed=6, converge=False), 9))
    assert not aborted.converged and math.isinf(aborted.minutes)


# -- plots ----------------------------------------------------------------------------------------

def test_plot_data_from_log(tmp_path):
    plot = load_script("plot_run")
    lines = plot.read_lines(retime(write_log(tmp_path / "r.txt", 1, True, blocks=4), 10.0))
    samples, accuracy = plot.eval_curve(lines)
    assert samples == [BLOCK, 2 * BLOCK, 3 * BLOCK, 4 * BLOCK]
    assert accuracy[-1] == pytest.approx(0.725)
    minutes, rates = plot.block_throughput(lines)
    assert len(minutes) == 4 and minutes == sorted(minutes) and minutes[-1] < 10.0
    # 21 lines after run_start, evenly spread over 600 s; block_stop follows block_start.
    assert rates[0] == pytest.approx(BLOCK / (600 / 21), rel=1e-3)


def test_plot_renders(tmp_path):
    pytest.importorskip("matplotlib")
    plot = load_script("plot_run")
    log = retime(write_log(tmp_path / "r.txt", 1, True, blocks=3), 5.0)
    assert plot.main([str(log), "--out", str(tmp_path / "run.png")]) == 0
    assert (tmp_path / "run.png").stat().st_size > 0


def test_plot_without_matplotlib_says_how_to_install(tmp_path, capsys):
    if importlib.util.find_spec("matplotlib") is not None:
        pytest.skip("matplotlib is installed")
    plot = load_script("plot_run")
    assert plot.main([str(tmp_path / "r.txt"), "--out", str(tmp_path / "x.png")]) == 2
    assert "pip install matplotlib" in capsys.readouterr().err
