"""The README's GPU performance table is generated from the committed throughput records:
the rate drops each run's first round, a run the newest window lacks keeps an older
window's row naming that window, and the goals line reads the numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bert.tools.gpu import perf_table
from bert.tools.gpu.records import RECORDS, windows

NEWEST = RECORDS / "2026-11-28_window"


def variant(rounds: list[float], **options) -> dict:
    # samples_per_s is the median over all rounds, as bench_throughput records it
    return {
        "samples_per_s": sorted(rounds)[len(rounds) // 2],
        "samples_per_s_per_round": rounds,
        "mfu": 0.1,
        "options": {"attention": "flash_varlen", **options},
    }


def window(root: Path, name: str, date: str, device: str, runs: dict[str, dict]) -> Path:
    """A window folder with a summary and the given throughput runs (fastest vs hf_eager)."""
    folder = root / f"{name}_window"
    folder.mkdir()
    summary = {"date": date, "device": device, "commit": "a" * 40, "steps": []}
    (folder / "summary.json").write_text(json.dumps(summary))
    for stem, variants in runs.items():
        record = {
            "precision": "bf16",
            "batch": 56,
            "steps": 10,
            "workload": {"mean_length": 254.0},
            "variants": variants,
        }
        (folder / f"{stem}.json").write_text(json.dumps(record))
    return folder


def test_every_round_of_the_newest_runs_is_in_the_table():
    table = perf_table.render(windows())
    for path in NEWEST.glob("throughput_*.json"):
        for result in json.loads(path.read_text())["variants"].values():
            rounds = ", ".join(f"{r:.0f}" for r in result["samples_per_s_per_round"])
            assert f"| {rounds} |" in table


def test_the_rate_drops_the_first_round_and_ratios_use_it(tmp_path):
    eager = {"fastest": variant([100.0, 300.0]), "hf_eager": variant([50.0, 60.0, 70.0])}
    window(tmp_path, "2030-01-01", "2030-01-01T00:00", "NVIDIA H100", {"throughput_eager": eager})
    table = perf_table.render(windows(tmp_path))
    assert "| 100, 300 | 300 |" in table  # the mean, 200, would hide the slow first round
    assert "| 50, 60, 70 | 65 |" in table
    assert "| 4.62x hf_eager |" in table  # 300 / 65
    assert "median of the rounds after the first" in table


def test_a_run_the_newest_window_lacks_keeps_the_older_row_naming_its_window(tmp_path):
    old = {"fastest": variant([1.0, 500.0], compile=True), "hf_compile": variant([1.0, 250.0])}
    new = {"fastest": variant([1.0, 600.0]), "hf_eager": variant([1.0, 200.0])}
    window(tmp_path, "2030-01-01", "2030-01-01T00:00", "NVIDIA H100", {"throughput_compiled": old})
    window(tmp_path, "2030-01-02", "2030-01-02T00:00", "NVIDIA H200", {"throughput_eager": new})
    table = perf_table.render(windows(tmp_path))
    assert "| `throughput_compiled` | 2030-01-01 (H100, `aaaaaaa`) |" in table
    assert "| `throughput_eager` | 2030-01-02 (H200, `aaaaaaa`) |" in table
    goals = table.splitlines()[-1]
    assert "samples_per_s 600.00 on H200 (goal 1000: not met)" in goals
    assert "fastest/hf_compile 2.00 on H100 (goal 2: met)" in goals
    assert "fastest/hf_eager 3.00 on H200 (goal 3: met)" in goals


def test_a_partial_run_is_no_figure(tmp_path):
    folder = window(tmp_path, "2030-01-01", "2030-01-01T00:00", "NVIDIA H100", {})
    record = {"partial": True, "variants": {"fastest": variant([500.0])}}
    (folder / "throughput_sharded.json").write_text(json.dumps(record))
    with pytest.raises(SystemExit, match="error: perf_table: no complete throughput_"):
        perf_table.render(windows(tmp_path))


def test_a_folder_without_windows_is_one_error(tmp_path):
    with pytest.raises(SystemExit, match="error: gpu_docs: no <window>/summary.json"):
        windows(tmp_path)
