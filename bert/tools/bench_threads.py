"""Training time of the tiny CPU run against run.threads, idle and beside busy processes.

    python scripts/bench_threads.py                       # threads 1, 2 and PyTorch's default,
                                                          # with 0 and 1 busy neighbours
    python scripts/bench_threads.py --steps 100 --threads 1,0 --busy 0,1,2 --repeats 2 \\
        --json benchmarks/results/threads_tiny_cpu.json

Why: on a small shared machine a neighbour's busy process takes a core from the run. With
several intra-op threads every parallel op of the tiny model then waits for its descheduled
thread, and a run can take many times as long, where one thread loses only its share.

Each measurement is one `run_pretraining.py` process on configs/tiny_cpu.yaml (or --config)
for --steps steps, with its synthetic data written once to a temporary folder beforehand; the
time is the run's own training time (its `run_stop ... in S s` line: run_start to run_stop,
one eval included). A busy neighbour is a Python process spinning on one core, started before
and stopped after each measurement. Conditions run in a rotated order per repeat so that drifting
load from other users hits all of them alike; the load average is recorded with each run.
Threads 0 means PyTorch's default (no OMP_NUM_THREADS, run.threads=0). The JSON goes to
results/bench/ (git-ignored) unless --json names a file.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bert.submission.system_desc import cpu_model
from bert.tools.common import ROOT, git_commit, write_json

RUN_STOP = re.compile(r"run_stop (\w+): .* in ([0-9.]+) s")
SPIN = "while True: pass"
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default=str(ROOT / "configs" / "tiny_cpu.yaml"))
    p.add_argument("--steps", type=int, default=100, help="optimizer steps per run")
    p.add_argument("--threads", default="1,2,0", help="run.threads values; 0: PyTorch's default")
    p.add_argument("--busy", default="0,1", help="busy neighbour processes per condition")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--json", type=Path, help="output (default: results/bench/threads_*.json)")
    args = p.parse_args(argv)
    args.thread_counts = [int(t) for t in args.threads.split(",")]
    args.busy_counts = [int(b) for b in args.busy.split(",")]
    if args.steps < 1 or args.repeats < 1 or min(args.thread_counts + args.busy_counts) < 0:
        p.error("--steps and --repeats must be >= 1, --threads and --busy >= 0")
    return args


def make_data(config: str, folder: Path) -> list[str]:
    """The config's synthetic data, written once (outside every timing); its --set lines."""
    from bert.config import load_config
    from data.synthetic import generate

    cfg = load_config(config)
    syn, data = cfg.data.synthetic, cfg.data
    generate(
        folder,
        syn.num_shards,
        syn.samples_per_shard,
        syn.eval_samples,
        data.max_seq_length,
        data.max_predictions_per_seq,
        cfg.model.vocab_size,
        syn.seed,
    )
    return [
        "data.synthetic.enabled=false",
        f"data.train_dir={folder}",
        f"data.eval_file={folder / 'eval.hdf5'}",
    ]


@contextlib.contextmanager
def busy_neighbours(count: int):
    """`count` processes that each keep one core busy while the block runs."""
    procs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def train_seconds(args: argparse.Namespace, threads: int, data_sets: list[str], out: Path) -> dict:
    """One run: its training seconds (run_start..run_stop), wall seconds and status."""
    sets = [
        *data_sets,
        f"run.threads={threads}",
        f"run.max_steps={args.steps}",
        f"run.output_dir={out}",
        "log.interval_s=1000",
    ]
    cmd = [sys.executable, str(ROOT / "run_pretraining.py"), "--config", args.config]
    for item in sets:
        cmd += ["--set", item]
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    found = RUN_STOP.search(proc.stdout)
    if proc.returncode not in (0, 1) or not found:
        raise RuntimeError(f"run failed (status {proc.returncode}):\n{proc.stderr[-2000:]}")
    return {"train_s": float(found.group(2)), "wall_s": wall, "status": found.group(1)}


def conditions(args: argparse.Namespace, repeat: int) -> list[tuple[int, int]]:
    """(busy, threads) pairs, rotated by the repeat so drifting load hits each alike."""
    pairs = [(b, t) for b in args.busy_counts for t in args.thread_counts]
    shift = repeat % len(pairs)
    return pairs[shift:] + pairs[:shift]


def measure(args: argparse.Namespace, data_sets: list[str], work: Path) -> list[dict]:
    runs = []
    for repeat in range(args.repeats):
        for busy, threads in conditions(args, repeat):
            load = os.getloadavg()[0]
            with busy_neighbours(busy):
                result = train_seconds(args, threads, data_sets, work / f"run_{len(runs)}")
            runs.append(
                {
                    "busy": busy,
                    "threads": threads,
                    "repeat": repeat,
                    "load_average_1min_before": load,
                    **result,
                }
            )
            print(
                f"busy {busy} threads {threads or 'default'}: {result['train_s']:.1f} s "
                f"(load {load:.1f})",
                flush=True,
            )
    return runs


def summary(runs: list[dict]) -> dict:
    """Median training seconds per `busy N / threads T` condition."""
    keys = sorted({(r["busy"], r["threads"]) for r in runs})
    return {
        f"busy {b} / threads {t or 'default'}": statistics.median(
            r["train_s"] for r in runs if (r["busy"], r["threads"]) == (b, t)
        )
        for b, t in keys
    }


def shown(path: str) -> str:
    """A path inside the repository as the repository names it (records stay comparable)."""
    resolved = Path(path).resolve()
    return str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else path


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    date = dt.datetime.now(dt.timezone.utc)
    with tempfile.TemporaryDirectory(prefix="bench_threads.") as tmp:
        data_sets = make_data(args.config, Path(tmp) / "data")
        runs = measure(args, data_sets, Path(tmp))
    payload = {
        "date": date.isoformat(timespec="seconds"),
        "commit": git_commit(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_default_threads": torch.get_num_threads(),
        "config": shown(args.config),
        "steps": args.steps,
        "method": __doc__.split("\n\n")[3].replace("\n", " "),
        "median_train_s": summary(runs),
        "runs": runs,
    }
    path = args.json or ROOT / "results" / "bench" / f"threads_{date:%Y%m%d-%H%M%S}.json"
    write_json(path, payload)
    for key, seconds in payload["median_train_s"].items():
        print(f"{key:28s} {seconds:7.1f} s")
    print(f"wrote {path}")
    return 0
