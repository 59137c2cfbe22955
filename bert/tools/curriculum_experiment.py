"""Bucket-order curricula ([Zhang]) on the tiny CPU BERT: eval MLM accuracy vs samples trained.

Every run is the real program, `run_pretraining.py` (the trainer, the data pipeline with its
bucketed source and curriculum, the loss feedback), on the same synthetic data with the same
seed, so the same initial weights and the same number of samples; only the order and grouping
of the samples differ:

    baseline         data.curriculum.name=none: shuffled batches of mixed lengths
    shuffled         length buckets, every step's bucket drawn in a seeded random order
                     (in proportion to the bucket's share): the baseline with
                     length-homogeneous batches
    random           length buckets, bucket order a fresh permutation each round
    increasing       length buckets, shortest bucket first in every round
    decreasing       length buckets, longest first
    loss_controlled  Algorithm 1: stay on a bucket until its loss is below --loss-target
    exp3s            Algorithm 2: Exp3.S bandit rewarded by the drop of a bucket's loss since
                     its previous batch (reward visit_gain: the pipeline has no second forward)

The fixed orders give bucket b a number of batches per round in proportion to its share of
the data under REFERENCE 2's length histogram (data.curriculum.round_batches per round;
consecutive except for "shuffled"). Model and optimizer: configs/tiny_cpu.yaml (vocab 1024,
hidden 128, 2 layers; LAMB lr 1e-2, warmup 50), the schedule decaying to 0 at --steps.

    python scripts/curriculum_experiment.py --plot benchmarks/results/curriculum_tiny_cpu.png

Writes benchmarks/results/curriculum_tiny_cpu.json: per run the eval points (samples, tokens,
accuracy, mean training loss since the previous point), batches per bucket, the bucket of every
step, seconds; plus machine, date, commit and command. Eval points come from each run's MLPerf
log, buckets and tokens from its audit trail (--record-samples), losses from its progress lines.
Timings on a shared machine are noisy; compare the sample-based curves.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from bert.mlperf import constants as C
from bert.mlperf.constants import LOG_NAME
from bert.submission.reader import mllog_records
from bert.submission.system_desc import cpu_model
from bert.tools.common import ROOT, git_commit, import_pyplot, write_json
from data.order.bucketing import bucket_of
from data.sample_record import read_records
from data.sources.shards import list_shards, read_samples
from data.synthetic import generate, shard_name

RUNS = ("baseline", "shuffled", "random", "increasing", "decreasing", "loss_controlled", "exp3s")
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "curriculum_tiny_cpu.json"
ACCURACY_MARKS = (0.5, 0.6, 0.7, 0.72)
MAX_PRED = 20
STEP_LINE = re.compile(r"^step\s+(\d+) \| samples\s+\d+ \| loss\s+([0-9.naif]+)")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--curricula", default=",".join(RUNS), help=f"comma list of {RUNS}")
    p.add_argument("--steps", type=int, default=160, help="optimizer steps per run")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--eval-every", type=int, default=20, help="steps between evals")
    p.add_argument("--eval-samples", type=int, default=1000)
    p.add_argument(
        "--boundaries",
        default="16,32,48,64,80,96,112,128",
        help="bucket upper edges (lengths); the last one is the max length",
    )
    p.add_argument(
        "--round-batches",
        type=int,
        default=100,
        help="batches per round of the fixed orders (split by bucket share)",
    )
    p.add_argument(
        "--loss-target",
        type=float,
        default=4.0,
        help="loss_controlled: target loss (MLM + NSP) of every bucket",
    )
    p.add_argument("--loss-window", type=int, default=5, help="loss_controlled: batches averaged")
    p.add_argument(
        "--loss-max-batches",
        type=int,
        default=60,
        help="loss_controlled: longest visit of one bucket",
    )
    p.add_argument("--eta", type=float, default=0.1, help="exp3s step size")
    p.add_argument("--gamma", type=float, default=0.1, help="exp3s exploration")
    p.add_argument("--alpha", type=float, default=0.01, help="exp3s weight sharing")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--seed", type=int, default=42, help="model init, dropout and sample order")
    p.add_argument("--data-seed", type=int, default=12345)
    p.add_argument("--num-shards", type=int, default=4)
    p.add_argument("--samples-per-shard", type=int, default=4096)
    p.add_argument(
        "--data-dir",
        default=None,
        help="where the synthetic data goes (default: a temporary folder)",
    )
    # 1: on a shared 2-core machine two intra-op threads spin against other jobs
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="runs trained in parallel (separate processes, --threads each)",
    )
    p.add_argument("--out", default=str(DEFAULT_OUT))
    p.add_argument("--plot", default=None, help="also write a PNG of the curves (matplotlib)")
    args = p.parse_args(argv)
    args.curricula = [c.strip() for c in args.curricula.split(",") if c.strip()]
    unknown = sorted(set(args.curricula) - set(RUNS))
    if unknown:
        p.error(f"unknown curricula {unknown}; choose from {RUNS}")
    args.boundaries = [int(x) for x in args.boundaries.split(",")]
    return args


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------


def prepare_data(args, folder: Path) -> Path:
    """Synthetic shards + eval file in `folder`, reused when a previous call made the same."""
    params = dict(
        num_shards=args.num_shards,
        samples_per_shard=args.samples_per_shard,
        eval_samples=args.eval_samples,
        max_seq_length=args.boundaries[-1],
        max_predictions=MAX_PRED,
        vocab_size=1024,
        seed=args.data_seed,
    )
    manifest = folder / "curriculum_data.json"
    files = [folder / shard_name(k, args.num_shards) for k in range(args.num_shards)]
    fresh = manifest.is_file() and json.loads(manifest.read_text()) == params
    if not (fresh and all(f.is_file() for f in files)):
        folder.mkdir(parents=True, exist_ok=True)
        generate(folder, **params)
        manifest.write_text(json.dumps(params))
    return folder


def sample_lengths(folder: Path, max_len: int) -> dict[tuple[str, int], int]:
    """(shard name, index) -> sequence length of every training sample."""
    return {
        (path.name, i): len(s.input_ids)
        for path in list_shards(folder)
        for i, s in enumerate(read_samples(path, max_len, MAX_PRED))
    }


# --------------------------------------------------------------------------------------------
# One run: run_pretraining.py
# --------------------------------------------------------------------------------------------


def settings(name: str, args, data: Path, out: Path) -> dict:
    """The config overrides of one run (on top of configs/tiny_cpu.yaml)."""
    base = {
        "data.synthetic.enabled": "false",
        "data.train_dir": data,
        "data.eval_file": data / "eval.hdf5",
        "data.max_seq_length": args.boundaries[-1],
        "eval.samples": args.eval_samples,
        "run.global_batch_size": args.batch_size,
        "run.max_steps": args.steps,
        "schedule.total_steps": args.steps,
        "schedule.warmup_steps": min(args.warmup, args.steps),
        "optim.lr": args.lr,
        "eval.interval_samples": args.eval_every * args.batch_size,
        "eval.target_mlm_accuracy": 1.0,  # never stop early: every run trains all its samples
        "run.seed": args.seed,
        "run.output_dir": out,
        "run.threads": args.threads,
        "log.interval_s": 0,
        "submission.division": "open",
        # the attention of the recorded results (tiny_cpu.yaml's default changed after them;
        # both are exact, but their rounding differs, so the curves would move a little)
        "model.attention": "padded_sdpa",
    }
    if name == "baseline":
        return base
    curriculum = {
        "data.curriculum.name": name,
        "data.curriculum.bucket_boundaries": ",".join(map(str, args.boundaries)),
        "data.curriculum.round_batches": args.round_batches,
        "data.curriculum.loss_targets": args.loss_target,
        "data.curriculum.loss_window": args.loss_window,
        "data.curriculum.max_batches": args.loss_max_batches,
        "data.curriculum.eta": args.eta,
        "data.curriculum.gamma": args.gamma,
        "data.curriculum.alpha": args.alpha,
    }
    return {**base, **curriculum}


def run_one(name: str, args, data: Path, work: Path) -> dict:
    """run_pretraining.py for one curriculum; its log, audit trail and progress lines."""
    out = work / name
    cmd = [
        sys.executable,
        str(ROOT / "run_pretraining.py"),
        "--record-samples",
        str(out / "samples"),
    ]
    for key, value in settings(name, args, data, out).items():
        cmd += ["--set", f"{key}={value}"]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if proc.returncode not in (0, 1):  # 1: target not reached, as intended
        raise RuntimeError(
            f"{name}: run_pretraining.py failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
        )
    print(f"  {name:16s} done in {seconds:.0f} s", flush=True)
    return {
        "stdout": proc.stdout,
        "log": (out / LOG_NAME).read_text(),
        "records": read_records(out / "samples" / "rank0.txt"),
        "seconds": seconds,
    }


def run_all(args, data: Path, work: Path) -> dict:
    """Every run of args.curricula, args.jobs at a time; results do not depend on --jobs."""
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {name: pool.submit(run_one, name, args, data, work) for name in args.curricula}
        return {name: future.result() for name, future in futures.items()}


# --------------------------------------------------------------------------------------------
# Reading a run
# --------------------------------------------------------------------------------------------


def eval_points(log: str) -> list[tuple[int, float]]:
    """(samples trained, MLM accuracy) of every eval in an MLPerf log."""
    return [
        (int(record["metadata"][C.EPOCH_NUM]), float(record["value"]))
        for record in mllog_records(log)
        if record.get("key") == C.EVAL_ACCURACY
    ]


def step_losses(stdout: str) -> dict[int, float]:
    """Training loss of every step from the progress lines (one per step: interval 0)."""
    found = (STEP_LINE.match(line) for line in stdout.splitlines())
    return {int(m.group(1)): float(m.group(2)) for m in found if m}


def summarize(name: str, raw: dict, lengths: dict, args) -> dict:
    """The numbers of one run: eval curve with tokens and losses, buckets per step."""
    steps: dict[int, list[int]] = {}
    for step, shard, index in raw["records"]:
        steps.setdefault(step, []).append(lengths[(shard, index)])
    step_tokens = [sum(steps[s]) for s in range(len(steps))]
    edges = args.boundaries if name != "baseline" else [args.boundaries[-1]]
    buckets = [int(np.unique(bucket_of(np.array(steps[s]), edges))[0]) for s in range(len(steps))]
    losses = step_losses(raw["stdout"])
    points, previous = [], 0
    for samples, accuracy in eval_points(raw["log"]):
        done = samples // args.batch_size
        window = [losses[s] for s in range(previous + 1, done + 1) if s in losses]
        points.append(
            {
                "step": done,
                "samples": samples,
                "tokens": sum(step_tokens[:done]),
                "mlm_accuracy": round(accuracy, 5),
                "train_loss": round(float(np.mean(window)), 4) if window else None,
            }
        )
        previous = done
    curriculum = next(
        (line for line in raw["stdout"].splitlines() if line.startswith("data: ")),
        "data: no bucketing",
    )
    return {
        "curriculum": curriculum,
        "evals": points,
        "final_mlm_accuracy": points[-1]["mlm_accuracy"] if points else None,
        "first_samples_at_accuracy": first_samples_at(points),
        "batches_per_bucket": np.bincount(buckets, minlength=len(edges)).tolist(),
        "bucket_sequence": buckets,
        "seconds": round(raw["seconds"], 2),
    }


def first_samples_at(points: list[dict]) -> dict[str, int | None]:
    return {
        str(mark): next((p["samples"] for p in points if p["mlm_accuracy"] >= mark), None)
        for mark in ACCURACY_MARKS
    }


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------


def machine() -> dict:
    import torch

    return {
        "platform": platform.platform(),
        "cpu": cpu_model() or platform.processor(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def write_plot(plt, result: dict, path: str) -> None:
    """Eval accuracy against samples (left) and against tokens trained (right)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    for name, run in result["runs"].items():
        style = {"marker": "o", "ms": 3, "label": name, "lw": 2.2 if name == "baseline" else 1.2}
        accuracy = [p["mlm_accuracy"] for p in run["evals"]]
        axes[0].plot([p["samples"] for p in run["evals"]], accuracy, **style)
        axes[1].plot([p["tokens"] / 1e3 for p in run["evals"]], accuracy, **style)
    for ax, label in zip(axes, ("training samples", "training tokens (thousands)")):
        ax.axhline(0.72, color="grey", lw=0.8, ls="--")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("eval MLM accuracy")
    axes[0].legend(fontsize=8)
    config = result["config"]
    fig.suptitle(
        f"tiny BERT, synthetic data, CPU: bucket-order curricula ([Zhang]); "
        f"{config['steps']} steps of {config['batch_size']}, seed {config['seed']}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def print_table(runs: dict) -> None:
    marks = "  ".join(f"{'@' + str(m):>8s}" for m in ACCURACY_MARKS)
    print(f"{'curriculum':16s} {'final acc':>9s}  {marks}  {'seconds':>8s}")
    for name, run in runs.items():
        hits = "  ".join(f"{str(v or '-'):>8s}" for v in run["first_samples_at_accuracy"].values())
        print(f"{name:16s} {run['final_mlm_accuracy']:9.4f}  {hits}  {run['seconds']:8.1f}")


def main(argv=None) -> None:
    args = parse_args(argv)
    plt = import_pyplot() if args.plot else None  # fail before minutes of training
    started = dt.datetime.now(dt.timezone.utc)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        data = prepare_data(args, Path(args.data_dir) if args.data_dir else Path(tmp) / "data")
        lengths = sample_lengths(data, args.boundaries[-1])
        sizes = np.bincount(
            bucket_of(np.array(list(lengths.values())), args.boundaries),
            minlength=len(args.boundaries),
        ).tolist()
        print(
            f"pool: {len(lengths)} samples, bucket sizes {sizes}; eval {args.eval_samples} samples",
            flush=True,
        )
        raw = run_all(args, data, Path(tmp) / "runs")
    runs = {name: summarize(name, raw[name], lengths, args) for name in args.curricula}
    result = {
        "benchmark": "curriculum_tiny_cpu",
        "machine": machine(),
        "load_average_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "date": started.isoformat(timespec="seconds"),
        "commit": git_commit(),
        "command": shlex.join(["python", *sys.argv]),
        "config": {k: v for k, v in vars(args).items() if k not in ("out", "plot", "data_dir")}
        | {
            "program": "run_pretraining.py --config configs/tiny_cpu.yaml",
            "pool_bucket_sizes": sizes,
        },
        "runs": runs,
    }
    write_json(Path(args.out), result, indent=1)
    print(f"wrote {args.out}")
    if plt is not None:
        write_plot(plt, result, args.plot)
        print(f"wrote {args.plot}")
    print_table(runs)
