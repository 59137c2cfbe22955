"""Shared by the kernel microbenchmarks: CUDA timing, run metadata, the JSON record.

Each benchmark times a fused kernel and the unfused PyTorch composition it replaces in the same
process, on the same inputs, and writes one JSON file with the device, torch version, date,
commit and command next to the numbers. Timings are medians of per-iteration CUDA-event times.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import statistics
import sys
from pathlib import Path
from typing import Callable

import torch

from bert.submission.system_desc import cpu_model
from bert.tools.common import ROOT, git_commit, write_json

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def parser(description: str, default_sizes: list[int], size_name: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument(f"--{size_name}", type=int, nargs="+", default=default_sizes)
    p.add_argument("--dtype", choices=sorted(DTYPES), nargs="+", default=["fp16", "bf16"])
    add_timing_args(p, 10, 100, "composition", "<benchmark>")
    return p


def add_timing_args(
    p: argparse.ArgumentParser, warmup: int, iters: int, compiled: str, name: str
) -> None:
    """--warmup, --iters, --no-compile (skips the torch.compile'd `compiled`) and --out (the
    JSON record, default results/bench/`name`.json)."""
    p.add_argument("--warmup", type=int, default=warmup)
    p.add_argument("--iters", type=int, default=iters)
    p.add_argument(
        "--no-compile",
        action="store_true",
        help=f"skip the torch.compile'd {compiled} (saves compile time)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"JSON output (default: results/bench/{name}.json)",
    )


def require_cuda_and_kernels(op: str) -> None:
    if not torch.cuda.is_available():
        sys.exit(f"{op}: this benchmark needs a CUDA GPU")
    import kernels

    kernels.require(op)  # raises with the build hint if the extension is missing


def time_ms(fn: Callable[[], object], warmup: int, iters: int) -> float:
    """Median milliseconds per call of fn on the current stream."""
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for s, e in zip(starts, ends, strict=True):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))


def metadata() -> dict:
    """The GPU (the CPU where there is none: smoke runs), versions, date, commit, command."""
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        device = {
            "device": props.name,
            "device_memory_gib": round(props.total_memory / 2**30, 1),
            "sm_count": props.multi_processor_count,
        }
    else:
        device = {"device": f"cpu ({cpu_model() or 'unknown model'})"}
    return {
        **device,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "command": shlex.join([sys.executable, *sys.argv]),
    }


def write(name: str, out: Path | None, rows: list[dict]) -> Path:
    path = out or ROOT / "results" / "bench" / f"{name}.json"
    return write_json(path, {"benchmark": name, **metadata(), "results": rows})


def report(row: dict) -> None:
    """One line per measured case, speedups relative to eager PyTorch."""
    base = row["torch_eager_ms"]
    parts = [f"{k}={v:.3f}ms ({base / v:.2f}x)" for k, v in row.items() if k.endswith("_ms") and v]
    keys = ", ".join(
        f"{k}={v}" for k, v in row.items() if not k.endswith("_ms") and not k.endswith("_gbps")
    )
    print(f"{keys}: " + "  ".join(parts), flush=True)
