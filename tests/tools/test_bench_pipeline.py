"""scripts/bench_pipeline.py: it runs and writes its JSON (timings are not asserted), and what it
times for each rank is that rank's share of the strategy's assignment."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from data.comm.wire import encode
from data.config import BatchGeometry
from data.order.strategies import STRATEGIES, balance
from data.packing import pack_samples
from bert.tools import bench_pipeline as bench

ROOT = Path(__file__).resolve().parents[2]


def test_bench_pipeline_writes_json(tmp_path):
    out, record = tmp_path / "bench.json", tmp_path / "record.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "bench_pipeline.py"),
            "--iters",
            "4",
            "--warmup",
            "1",
            "--batches",
            "1",
            "--global-batch",
            "32",
            "--ranks",
            "4",
            "--accum",
            "2",
            "--json",
            str(out),
            "--record",
            str(record),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    results = json.loads(out.read_text())
    assert sorted(results) == sorted(STRATEGIES)
    assert all(r["samples_per_s_per_rank"] > 0 for r in results.values())
    recorded = json.loads(record.read_text())
    assert recorded["results"] == results
    assert {"platform", "cpu_count", "date", "commit", "command"} <= set(recorded["machine"])
    assert "serpentine" in proc.stdout


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_each_rank_packs_its_assignment_row(strategy):
    """With two 2-rank nodes, what a rank packs is its row of the strategy's assignment: the
    benchmark times the real work (the node's all-gather, or the sparse transport replayed)."""
    args = bench.parse_args(
        [
            "--global-batch",
            "24",
            "--ranks",
            "4",
            "--ranks-per-node",
            "2",
            "--batches",
            "1",
            "--max-len",
            "64",
            "--max-pred",
            "10",
        ]
    )
    geometry = BatchGeometry.build(args, args.ranks)
    raw = bench.global_batches(strategy, args, geometry, np.random.default_rng(0))[0]
    record = STRATEGIES[strategy]
    gathered = (
        bench.Recorded.of(record, raw, 2)
        if record.transport == "sparse"
        else [encode(s, bench.no_origin(s)) for s in raw]
    )
    flat = [s for rank in raw for s in rank]
    assignment = balance(strategy, np.array([len(s.input_ids) for s in flat]), 4, 2)
    for rank in range(4):
        (packed,) = bench.prepare(strategy, rank, raw, gathered, geometry, args)
        want = pack_samples([flat[i] for i in assignment[rank]])
        np.testing.assert_array_equal(packed.input_ids.numpy(), want.input_ids)


def test_the_sparse_transport_runs_the_records_rows(monkeypatch):
    """The benchmark exchanges by the strategy record's `rows`, not by a function of its own: a
    sparse strategy registered with a counted rows function is timed with it."""
    called = []

    def counted_rows(lengths, world, ranks_per_node, rank):
        called.append(rank)
        return STRATEGIES["node_swap"].rows(lengths, world, ranks_per_node, rank)

    record = dataclasses.replace(STRATEGIES["node_swap"], rows=counted_rows)
    monkeypatch.setitem(STRATEGIES, "counted_swap", record)
    args = bench.parse_args(["--global-batch", "8", "--ranks", "2", "--ranks-per-node", "1"])
    args.batches = 1
    geometry = BatchGeometry.build(args, args.ranks)
    raw = bench.global_batches("counted_swap", args, geometry, np.random.default_rng(0))[0]
    gathered = bench.Recorded.of(record, raw, 1)
    for rank in range(2):
        bench.prepare("counted_swap", rank, raw, gathered, geometry, args)
    assert called == [0, 1]


def test_ranks_per_node_must_divide_the_ranks(capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(["--ranks", "8", "--ranks-per-node", "3"])
    assert "not a whole number of 3-rank nodes" in capsys.readouterr().err
