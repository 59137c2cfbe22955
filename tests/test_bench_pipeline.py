"""scripts/bench_pipeline.py runs and writes its JSON (a smoke test: timings are not asserted)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from data.order.strategies import STRATEGIES

ROOT = Path(__file__).resolve().parents[1]


def test_bench_pipeline_writes_json(tmp_path):
    out, record = tmp_path / "bench.json", tmp_path / "record.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_pipeline.py"), "--iters", "4",
         "--warmup", "1", "--batches", "1", "--global-batch", "32", "--ranks", "4",
         "--accum", "2", "--json", str(out), "--record", str(record)],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(out.read_text())
    assert sorted(results) == sorted(STRATEGIES)
    assert all(r["samples_per_s_per_rank"] > 0 for r in results.values())
    recorded = json.loads(record.read_text())
    assert recorded["results"] == results
    assert {"platform", "cpu_count", "date", "commit", "command"} <= set(recorded["machine"])
    assert "serpentine" in proc.stdout
