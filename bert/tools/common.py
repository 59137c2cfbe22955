"""Small helpers shared by the tools: provenance for result files, optional matplotlib, the
`--set` arguments of a training run."""

from __future__ import annotations

import datetime as dt
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from bert.build_info import stamped_commit
from bert.core.errors import install_hint
from bert.core.files import write_text_atomic
from bert.submission.system_desc import cpu_model

ROOT = Path(__file__).resolve().parents[2]


def git_commit() -> str:
    """The commit results are recorded under: $BERT_COMMIT, else the commit stamped into an
    installed copy at build time (bert/build_info.py), else HEAD (with -dirty when the
    working tree has changes), else the .whl/COMMIT file that scripts/bench/prepare_gpu_carry.sh
    writes before a GPU window (the GPU machine's copy of the tree has no .git); else
    "unknown"."""
    if os.environ.get("BERT_COMMIT"):
        return os.environ["BERT_COMMIT"]
    if stamped_commit():  # an installed copy: a git folder around it is not its code's
        return stamped_commit()
    try:
        run = dict(cwd=ROOT, capture_output=True, text=True, check=True)
        sha = subprocess.run(["git", "rev-parse", "HEAD"], **run).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], **run).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        pass
    stamp = ROOT / ".whl" / "COMMIT"
    if stamp.is_file():
        return stamp.read_text().strip()
    return stamped_commit() or "unknown"


def provenance(benchmark: str, machine: str | None = None) -> dict:
    """What a result record opens with: the benchmark, when it ran (UTC), on which machine
    (default: the CPU model and its core count), at which commit, by which command."""
    return {
        "benchmark": benchmark,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine or f"cpu ({cpu_model() or 'unknown model'}), {os.cpu_count()} cores",
        "commit": git_commit(),
        "command": shlex.join([sys.executable, *sys.argv]),
    }


def set_args(values: dict) -> list[str]:
    """`values` as run_pretraining.py's `--set key=value` arguments, in the dict's order."""
    return [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]


def write_json(path: Path, record: dict, indent: int = 2) -> Path:
    """`record` as JSON at `path`, through a temporary name: a result file is whole or absent,
    and a benchmark killed between two writes keeps its last complete record."""
    return write_text_atomic(path, json.dumps(record, indent=indent) + "\n")


def import_pyplot():
    """matplotlib.pyplot on a file-only backend; matplotlib is optional, so fail clearly."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit(f"--plot needs matplotlib, which is not installed: {install_hint('plot')}")
    return plt
