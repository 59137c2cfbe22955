"""Bucket-order curricula (seed 002) on the tiny CPU BERT: eval MLM accuracy vs samples trained.

Every run trains the same tiny model (configs/tiny_cpu.yaml sizes: vocab 1024, hidden 128,
2 layers, 2 heads, FFN 512, init 0.08; LAMB lr 1e-2, weight decay 0.01, warmup 50, linear decay
to 0 at --steps) from the same initial weights on the same synthetic data, with the same number
of samples; only the order and grouping of the samples differ:

    baseline         no bucketing: shuffled batches of mixed lengths, each sample once per epoch
    shuffled         length buckets, every step's bucket drawn in a seeded random order
                     (proportional to bucket size): the baseline with length-homogeneous batches
    random           length buckets, bucket order a fresh permutation each round
    increasing       length buckets, shortest bucket first in every round
    decreasing       length buckets, longest first
    loss_controlled  Algorithm 1: stay on a bucket until its loss is below --loss-target
    exp3s            Algorithm 2: Exp3.S bandit rewarded by the loss reduction on the batch

The fixed orders give bucket b a number of batches per round proportional to its size
(--round-batches per round; consecutive except for "shuffled"), so they train the data's own
length mix, only reordered. Defaults: 300 steps of 32 samples, eval of 1000 samples every 25
steps.

    python scripts/curriculum_experiment.py --jobs 2        # ~5-15 minutes on 2 shared cores
    python scripts/curriculum_experiment.py --plot curves.png   (needs matplotlib)

Writes benchmarks/results/curriculum_tiny_cpu.json: per curriculum the eval points (samples,
tokens, accuracy, mean training loss since the previous point), batches per bucket, seconds,
plus machine, date, commit and command. Timings on a shared machine are noisy; compare the
sample-based curves.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing
import os
import platform
import shlex
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

# runnable as `python scripts/curriculum_experiment.py` from the repo root without installing
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from scripts.script_utils import git_commit, import_pyplot  # noqa: E402 (needs the path above)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bert.config import ModelConfig  # noqa: E402
from bert.model import BertForPretraining, mlm_correct, pretraining_loss  # noqa: E402
from bert.optim import LAMB, PolyWarmupScheduler, param_groups  # noqa: E402
from data import bucketing, curriculum  # noqa: E402
from data.batching import PackedBatch, Sample, pack_samples  # noqa: E402
from data.shards import read_samples  # noqa: E402
from data.synthetic import generate, shard_name  # noqa: E402

RUNS = ("baseline", "shuffled", "random", "increasing", "decreasing", "loss_controlled",
        "exp3s")
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "curriculum_tiny_cpu.json"
ACCURACY_MARKS = (0.5, 0.6, 0.7, 0.72)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--curricula", default=",".join(RUNS), help=f"comma list of {RUNS}")
    p.add_argument("--steps", type=int, default=300, help="optimizer steps per run")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--eval-every", type=int, default=25, help="steps between evals")
    p.add_argument("--eval-samples", type=int, default=1000)
    p.add_argument("--boundaries", default="16,32,48,64,80,96,112,128",
                   help="bucket upper edges (lengths); the last one is the max length")
    p.add_argument("--round-batches", type=int, default=100,
                   help="batches per round of the fixed orders (split by bucket size)")
    p.add_argument("--loss-target", type=float, default=4.0,
                   help="loss_controlled: target loss (MLM + NSP) of every bucket")
    p.add_argument("--loss-window", type=int, default=5, help="loss_controlled: batches averaged")
    p.add_argument("--loss-max-batches", type=int, default=60,
                   help="loss_controlled: longest visit of one bucket")
    p.add_argument("--eta", type=float, default=0.1, help="exp3s step size")
    p.add_argument("--gamma", type=float, default=0.1, help="exp3s exploration")
    p.add_argument("--alpha", type=float, default=0.01, help="exp3s weight sharing")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--seed", type=int, default=42, help="model init, dropout and sample order")
    p.add_argument("--data-seed", type=int, default=12345)
    p.add_argument("--num-shards", type=int, default=4)
    p.add_argument("--samples-per-shard", type=int, default=4096)
    p.add_argument("--data-dir", default=None,
                   help="where the synthetic data goes (default: a temporary folder)")
    # 1: on a shared 2-core machine two intra-op threads spin against other jobs; measured
    # here under load, a step took ~20x longer with 2 threads than with 1
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--jobs", type=int, default=1,
                   help="runs trained in parallel (separate processes, --threads each)")
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

class Pool:
    """All training samples in memory, with their (shard, index) provenance."""

    def __init__(self, files: list[Path], max_len: int, max_pred: int):
        self.samples: list[Sample] = []
        prov = []
        for k, path in enumerate(files):
            shard = read_samples(path, max_len, max_pred)
            self.samples.extend(shard)
            prov.extend((k, i) for i in range(len(shard)))
        self.provenance = np.asarray(prov, dtype=np.int64)  # (N, 2)
        self.lengths = np.fromiter((s.input_ids.shape[0] for s in self.samples), np.int64)


def prepare_data(args, folder: Path) -> tuple[list[Path], Path]:
    """Synthetic shards + eval file in `folder`, reused when a previous call made the same."""
    params = dict(num_shards=args.num_shards, samples_per_shard=args.samples_per_shard,
                  eval_samples=args.eval_samples, max_seq_length=args.boundaries[-1],
                  max_predictions=20, vocab_size=1024, seed=args.data_seed)
    manifest = folder / "curriculum_data.json"
    files = [folder / shard_name(k, args.num_shards) for k in range(args.num_shards)]
    fresh = manifest.is_file() and json.loads(manifest.read_text()) == params
    if not (fresh and all(f.is_file() for f in files)):
        folder.mkdir(parents=True, exist_ok=True)
        generate(folder, **params)
        manifest.write_text(json.dumps(params))
    return files, folder / "eval.hdf5"


def eval_batches(eval_file: Path, args, size: int = 250) -> list[PackedBatch]:
    samples = read_samples(eval_file, args.boundaries[-1], 20, limit=args.eval_samples)
    return [pack_samples(samples[i:i + size]).to("cpu") for i in range(0, len(samples), size)]


def build_stream(name: str, pool: Pool, args) -> bucketing.CurriculumSampler:
    """Sampler + curriculum for one run; the baseline is a single bucket (plain shuffling)."""
    if name == "baseline":
        sampler = bucketing.BucketSampler(pool.lengths, [args.boundaries[-1]], args.batch_size,
                                          args.seed, provenance=pool.provenance)
        return bucketing.CurriculumSampler(
            sampler, curriculum.make_curriculum("random", 1, args.seed))
    sampler = bucketing.BucketSampler(pool.lengths, args.boundaries, args.batch_size,
                                      args.seed, provenance=pool.provenance)
    m = sampler.num_buckets
    if name in curriculum.ORDERS:
        visits = curriculum.proportional_visits(sampler.bucket_sizes, args.round_batches)
        opts = {"batches_per_visit": visits}
    elif name == "loss_controlled":
        opts = {"targets": args.loss_target, "window": args.loss_window,
                "max_batches": args.loss_max_batches}
    else:
        opts = {"eta": args.eta, "gamma": args.gamma, "alpha": args.alpha}
    return bucketing.CurriculumSampler(sampler, curriculum.make_curriculum(name, m, args.seed,
                                                                           **opts))


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------

def model_config() -> ModelConfig:
    return ModelConfig(vocab_size=1024, hidden_size=128, num_hidden_layers=2,
                       num_attention_heads=2, intermediate_size=512,
                       max_position_embeddings=128, initializer_range=0.08)


def batch_loss(model, batch: PackedBatch, vocab: int) -> torch.Tensor:
    mlm, nsp = pretraining_loss(*model(batch), batch, vocab)
    return mlm + nsp


def train_step(model, optimizer, scheduler, batch: PackedBatch, vocab: int) -> float:
    """One LAMB step on `batch`; returns its loss (MLM + NSP) before the update."""
    model.train()
    loss = batch_loss(model, batch, vocab)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()
    return float(loss.detach())


@torch.no_grad()
def loss_after_step(model, batch: PackedBatch, vocab: int, rng_state: torch.Tensor) -> float:
    """The same batch's loss after the update, with the training forward's dropout masks
    (RNG replayed), so the difference measures the update, not dropout noise."""
    with torch.random.fork_rng(devices=[]):
        torch.set_rng_state(rng_state)
        model.train()
        return float(batch_loss(model, batch, vocab))


@torch.no_grad()
def evaluate(model, batches: list[PackedBatch], vocab: int) -> float:
    """Token-weighted MLM accuracy over the eval batches."""
    model.eval()
    correct = total = 0
    for batch in batches:
        mlm_logits, _ = model(batch)
        correct += int(mlm_correct(mlm_logits, batch, vocab))
        total += batch.num_masked
    return correct / max(total, 1)


def run_in_process(name: str, args, files: list[Path], eval_file: Path) -> dict:
    """Entry point of a worker process: its own data in memory, then one run."""
    torch.set_num_threads(args.threads)
    pool = Pool(files, args.boundaries[-1], 20)
    return train_run(name, pool, eval_batches(eval_file, args), args)


def run_all(args, files: list[Path], eval_file: Path) -> dict:
    """Every curriculum of args.curricula, in order, or spread over args.jobs processes.

    Each run depends only on its own seeds, so results do not depend on --jobs; timings do.
    """
    if args.jobs <= 1:
        pool = Pool(files, args.boundaries[-1], 20)
        evals = eval_batches(eval_file, args)
        return {name: train_run(name, pool, evals, args) for name in args.curricula}
    # spawn, not fork: a forked child of a process that touched torch can hang in OpenMP
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=context) as executor:
        futures = {name: executor.submit(run_in_process, name, args, files, eval_file)
                   for name in args.curricula}
        return {name: future.result() for name, future in futures.items()}


def train_run(name: str, pool: Pool, evals: list[PackedBatch], args) -> dict:
    """One curriculum from the shared initial weights; eval every args.eval_every steps."""
    cfg = model_config()
    torch.manual_seed(args.seed)
    model = BertForPretraining(cfg)
    optimizer = LAMB(param_groups(model, 0.01), lr=args.lr, weight_decay=0.01)
    scheduler = PolyWarmupScheduler(optimizer, args.steps, args.warmup)
    stream = build_stream(name, pool, args)
    needs_after = stream.curriculum.needs_loss_after
    points, losses, buckets, tokens = [], [], [], 0
    started = time.perf_counter()
    eval_seconds = 0.0
    for step in range(args.steps):
        drawn = stream.next_batch(step)
        batch = pack_samples([pool.samples[i] for i in drawn.indices]).to("cpu")
        rng_state = torch.get_rng_state()
        loss = train_step(model, optimizer, scheduler, batch, cfg.vocab_size)
        after = loss_after_step(model, batch, cfg.vocab_size, rng_state) if needs_after else None
        stream.update(drawn.bucket, loss, after, step=step)
        losses.append(loss)
        buckets.append(drawn.bucket)
        tokens += int(drawn.lengths.sum())
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            t0 = time.perf_counter()
            accuracy = evaluate(model, evals, cfg.vocab_size)
            eval_seconds += time.perf_counter() - t0
            points.append({"step": step + 1, "samples": (step + 1) * args.batch_size,
                           "tokens": tokens, "mlm_accuracy": round(accuracy, 5),
                           "train_loss": round(float(np.mean(losses)), 4)})
            losses = []
            print(f"  {name:16s} step {step + 1:4d}  acc {accuracy:.4f}  "
                  f"loss {points[-1]['train_loss']:.3f}", flush=True)
    seconds = time.perf_counter() - started
    return summarize(stream, points, buckets, seconds, eval_seconds)


def summarize(stream, points: list[dict], buckets: list[int], seconds: float,
              eval_seconds: float) -> dict:
    first_at = {}
    for mark in ACCURACY_MARKS:
        hit = next((p["samples"] for p in points if p["mlm_accuracy"] >= mark), None)
        first_at[str(mark)] = hit
    return {
        "curriculum": stream.curriculum.describe(),
        "sampler": stream.sampler.describe(),
        "evals": points,
        "final_mlm_accuracy": points[-1]["mlm_accuracy"] if points else None,
        "first_samples_at_accuracy": first_at,
        "batches_per_bucket": np.bincount(buckets, minlength=stream.sampler.num_buckets).tolist(),
        "bucket_sequence": buckets,
        "seconds": round(seconds, 2),
        "train_seconds": round(seconds - eval_seconds, 2),
    }


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------

def machine() -> dict:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"platform": platform.platform(), "cpu": cpu, "cpu_count": os.cpu_count(),
            "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "python": platform.python_version()}


def write_json(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(payload, indent=1) + "\n")
    tmp.replace(path)


def write_plot(plt, result: dict, path: str) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, run in result["runs"].items():
        xs = [p["samples"] for p in run["evals"]]
        ax.plot(xs, [p["mlm_accuracy"] for p in run["evals"]], marker="o", ms=3, label=name)
    ax.axhline(0.72, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("training samples")
    ax.set_ylabel("eval MLM accuracy")
    ax.set_title("tiny BERT on synthetic data: bucket-order curricula (seed 002)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> None:
    args = parse_args(argv)
    plt = import_pyplot() if args.plot else None  # fail before minutes of training
    torch.set_num_threads(args.threads)
    started = dt.datetime.now(dt.timezone.utc)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.data_dir) if args.data_dir else Path(tmp)
        files, eval_file = prepare_data(args, folder)
        lengths = Pool(files, args.boundaries[-1], 20).lengths
        sizes = bucketing.bucket_counts(lengths, args.boundaries).tolist()
        print(f"pool: {lengths.size} samples, bucket sizes {sizes}; eval "
              f"{args.eval_samples} samples", flush=True)
        runs = run_all(args, files, eval_file)
    result = {
        "benchmark": "curriculum_tiny_cpu",
        "machine": machine(),
        "load_average_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "date": started.isoformat(timespec="seconds"),
        "commit": git_commit(),
        "command": shlex.join(["python", *sys.argv]),
        "config": {k: v for k, v in vars(args).items() if k not in ("out", "plot", "data_dir")}
        | {"model": vars(model_config()), "pool_bucket_sizes": sizes},
        "runs": runs,
    }
    write_json(Path(args.out), result)
    print(f"wrote {args.out}")
    if plt is not None:
        write_plot(plt, result, args.plot)
        print(f"wrote {args.plot}")
    print_table(runs)


def print_table(runs: dict) -> None:
    marks = "  ".join(f"{'@' + str(m):>8s}" for m in ACCURACY_MARKS)
    print(f"{'curriculum':16s} {'final acc':>9s}  {marks}  {'seconds':>8s}")
    for name, run in runs.items():
        hits = "  ".join(f"{str(v or '-'):>8s}" for v in run["first_samples_at_accuracy"].values())
        print(f"{name:16s} {run['final_mlm_accuracy']:9.4f}  {hits}  {run['seconds']:8.1f}")


if __name__ == "__main__":
    main()
