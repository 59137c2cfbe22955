"""The README's GPU performance table is generated from the committed throughput records
(issue 23): it must equal what the generator makes of them, and the goals line must read the
numbers, not restate them."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from bert.tools.common import ROOT
from bert.tools.gpu import perf_table


def readme_block() -> str:
    text = (ROOT / "README.md").read_text()
    return text.split(perf_table.BEGIN, 1)[1].split(perf_table.END, 1)[0].strip()


# the records folder the README's table says it comes from (the newest window's, once rewritten)
WINDOW = ROOT / re.search(r"records: `([^`]+)`", readme_block()).group(1)


def test_readme_table_is_the_generated_one():
    assert readme_block() == perf_table.render(WINDOW).strip()


def test_every_recorded_variant_has_a_row_with_its_measured_rate():
    table = perf_table.render(WINDOW)
    for path in WINDOW.glob("throughput_*.json"):
        for result in json.loads(path.read_text())["variants"].values():
            assert f"| {result['samples_per_s']:.0f} |" in table


def test_goals_follow_the_numbers(tmp_path):
    shutil.copy(WINDOW / "throughput_eager.json", tmp_path / "throughput_eager.json")
    record = json.loads((tmp_path / "throughput_eager.json").read_text())
    assert "samples_per_s 524.37 (goal 1000: not met)" in perf_table.render(tmp_path)
    assert "fastest/hf_compile: not measured" in perf_table.render(tmp_path)
    record["variants"]["fastest"]["samples_per_s"] = 1234.5
    record["ratios"]["fastest/hf_eager"] = 3.1
    (tmp_path / "throughput_eager.json").write_text(json.dumps(record))
    goals = perf_table.render(tmp_path).splitlines()[-1]
    assert "samples_per_s 1234.50 (goal 1000: met)" in goals
    assert "fastest/hf_eager 3.10 (goal 3: met)" in goals


def test_a_folder_without_records_is_one_error(tmp_path):
    with pytest.raises(SystemExit, match="error: perf_table: no throughput_"):
        perf_table.render(tmp_path)
