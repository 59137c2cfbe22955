"""Observability under torchrun with 2 gloo ranks: every line says its time, rank and level, only
rank 0 prints progress (the other rank logs warnings only), rank 0 alone writes the metrics, and
each rank writes its own trace of the profiler window."""

from __future__ import annotations

import gzip
import json
import re

import pytest

from bert.obs.sinks import read_records

from commands import RUN_PRETRAINING, run_python, torchrun
from tiny_run import make_tiny_data, tiny_settings
from bert.tools.common import set_args

LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d rank (\d) (INFO|WARNING|ERROR) (.*)")


@pytest.mark.distributed
def test_two_ranks_log_by_rank_and_trace_each(tmp_path):
    data = tmp_path / "data"
    make_tiny_data(data)
    out = tmp_path / "out"
    values = tiny_settings(
        data,
        out,
        **{"run.max_steps": 4, "log.interval_s": 0, "profile.start_step": 2, "profile.steps": 1},
    )
    del values["run.seed"], values["optim.lr"]  # tiny_cpu.yaml's, as this run always had
    args = set_args(values)
    proc = run_python(*torchrun(2, RUN_PRETRAINING, *args), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]  # budget: aborted
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    parsed = [LINE.fullmatch(line) for line in lines]
    # a profiler summary table continues its log line over several lines
    starts = [m for m in parsed if m is not None]
    assert starts and all(
        m is not None or not lines[i][:4].isdigit() for i, m in enumerate(parsed)
    ), proc.stdout
    progress = [m for m in starts if m.group(3).startswith("step ")]
    assert len(progress) == 4 and {m.group(1) for m in progress} == {"0"}
    assert {m.group(1) for m in starts} == {"0"}  # rank 1 had nothing above info to say
    records = read_records(out / "metrics.jsonl")
    assert [r["step"] for r in records if r["kind"] == "train"] == [1, 2, 3, 4]
    for rank in (0, 1):
        with gzip.open(out / "profile" / f"trace_rank{rank}_steps2-2.json.gz", "rt") as f:
            names = {event.get("name") for event in json.load(f)["traceEvents"]}
        assert {"data_wait", "forward", "backward", "optimizer"} <= names, rank
