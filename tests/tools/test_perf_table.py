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


# ---- the one-process ablation (the window's `throughput` record) --------------------------------


def ours(rounds, mfu_executed=0.3, **options):
    record = variant(rounds, **options)
    record.update(mfu_executed=mfu_executed, mfu_datasheet=0.08, mfu_executed_datasheet=0.25)
    return record


def hf(rounds, mfu_executed):
    record = variant(rounds)
    record["options"] = {"transformers": "5.17.0", "attention": "sdpa"}
    record.update(mfu_executed=mfu_executed, mfu_datasheet=0.04, mfu_executed_datasheet=0.1)
    return record


def ablation_window(tmp_path, hf_compile_executed=0.5, **extra) -> Path:
    fused = {"fused": True, "fused_flags": ["fused_dense"]}
    run = {
        "fastest": ours([1.0, 500.0]),
        "flash_varlen+fused": ours([1.0, 600.0], **fused),
        "flash_varlen+fused+fp8": ours([1.0, 750.0], fp8_linear=True, **fused),
        "flash_varlen+fused+fp8+graphs": ours(
            [1.0, 900.0], fp8_linear=True, cuda_graphs="captured", **fused
        ),
        "flash_varlen+graphs": ours([1.0, 550.0], cuda_graphs="captured"),
        "hf_eager": hf([1.0, 250.0], 0.4),
        "hf_compile": hf([1.0, 300.0], hf_compile_executed),
    }
    folder = window(tmp_path, "2030-01-01", "2030-01-01T00:00", "NVIDIA H100 80GB HBM3", {})
    record = {
        "precision": "bf16",
        "batch": 56,
        "steps": 10,
        "workload": {"mean_length": 254.0},
        "matmul_peak_tflops": 800.0,
        "datasheet_peak": {"tflops": 989.4},
        "variants": run,
        **extra,
    }
    (folder / "throughput.json").write_text(json.dumps(record))
    # an older kind of run beside it, so the main table has a row
    (folder / "throughput_eager.json").write_text(
        json.dumps({**record, "variants": {"fastest": variant([1.0, 500.0])}})
    )
    return folder


def test_the_ablation_shows_what_each_lever_adds(tmp_path):
    ablation_window(tmp_path, variants_refused={"flash_varlen+fusedlamb+graphs": "+graphs..."})
    table = perf_table.render(windows(tmp_path))
    rows = {line.split(" | ")[0]: line for line in table.splitlines() if line.startswith("| `")}
    together = rows["| `flash_varlen+fused+fp8+graphs`"]
    assert "+graphs 1.20x over `flash_varlen+fused+fp8`" in together  # 900 / 750
    # no flash_varlen+fp8+graphs (nor +fused+graphs) in the run to compare with
    assert together.split(" | ")[6] == "+graphs 1.20x over `flash_varlen+fused+fp8`"
    assert "+graphs 1.10x over `fastest`" in rows["| `flash_varlen+graphs`"]  # 550 / 500
    assert "+fused 1.20x over `fastest`" in rows["| `flash_varlen+fused`"]
    assert "+fp8 1.25x over `flash_varlen+fused`" in rows["| `flash_varlen+fused+fp8`"]
    # both HF ratios from the same process, MFU four ways, the refusal said
    assert "| 3.60x | 3.00x |" in together
    assert "| 0.100, 0.080 | 0.300, 0.250 |" in together
    assert "800 TFLOP/s) and the datasheet (989.4 TFLOP/s)" in table
    assert "`flash_varlen+fusedlamb+graphs` refused: +graphs..." in table
    goals = table.splitlines()[-1]
    assert "samples_per_s 900.00 on H100 80GB HBM3" in goals  # the best of ours, any variant
    assert "fastest/hf_compile 3.00 on H100" in goals and "(goal 2: met)" in goals
    # the fp8 variants are not the bf16 step: 0.3 (bf16 best) against HF compiled's 0.5
    assert "executed-FLOP MFU of the bf16 step 0.300 against HF compiled's 0.500" in goals
    assert goals.endswith("(goal: above it: not met).")


def test_the_executed_mfu_goal_can_be_met(tmp_path):
    ablation_window(tmp_path, hf_compile_executed=0.2)
    goals = perf_table.render(windows(tmp_path)).splitlines()[-1]
    assert "0.300 against HF compiled's 0.200" in goals and goals.endswith("met).")
    assert not goals.endswith("not met).")


def test_without_a_one_process_record_the_ablation_says_so():
    table = perf_table.render(windows())
    assert "has no complete record yet" in table or "The ablation, one process" in table


def test_executed_mfu_is_derived_for_records_older_than_the_figure():
    """Before the bench recorded mfu_executed its FLOP counts already said it: HF computes the
    workload's hf_executed_flops_per_step, our unpadded path the useful FLOPs."""
    run = {"workload": {"hf_executed_flops_per_step": 6.0, "useful_flops_per_step": 3.0}}
    older_hf = variant([300.0, 300.0])
    older_hf["options"] = {"transformers": "5.17.0"}
    assert perf_table.executed_mfu(older_hf, run) == pytest.approx(0.2)
    assert perf_table.executed_mfu(variant([500.0, 500.0]), run) == pytest.approx(0.1)
    padded = variant([500.0, 500.0], attention="padded_sdpa")
    assert perf_table.executed_mfu(padded, run) is None  # its padding is not in the record
    assert perf_table.executed_mfu(older_hf, {"workload": {}}) is None
