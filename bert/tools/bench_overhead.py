"""What observing a run costs a training step, measured in one process.

    python scripts/bench_profile_overhead.py [--rounds 5] [--steps 20] [--json PATH]

One Trainer (the default tiny model, configs/tiny_cpu.yaml, on small synthetic shards) trains
the same way under three settings, interleaved round by round so that drift in the machine's
load hits them alike:
    no_window        profile.steps=0 (the default)
    window_elsewhere a profiler window configured for steps this run never reaches: the claim
                     under test is that this costs nothing outside the window
    inside_window    torch.profiler recording, with the named ranges on (for scale)
Each step is timed on the host (CPU: no device queue to drain). Besides, `instrumentation_us`
times the host work the metrics and ranges add to every step (named-range checks, the data-wait
clock, the FLOP bookkeeping, the window check), without the model, over many repetitions: the
direct cost, which the step-time comparison can only bound.

Writes JSON (date, machine, commit, command, settings, per-step times) to --json
(default benchmarks/results/profile_overhead_cpu.json).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from bert.config import load_config
from bert.core import ranges
from bert.obs.config import ProfileConfig
from bert.obs.profiler import ProfilerWindow
from bert.obs.run_record import PROJECT_ROOT, code_version

VARIANTS = ("no_window", "window_elsewhere", "inside_window")
NEVER = 10**9  # a step no run reaches


def build_trainer(folder: Path, steps: int):
    from bert.train.trainer import Trainer
    from data.synthetic import generate

    data = folder / "data"
    generate(
        data,
        num_shards=2,
        samples_per_shard=1024,
        eval_samples=64,
        max_seq_length=128,
        max_predictions=20,
        vocab_size=1024,
        seed=1,
    )
    overrides = [
        "data.synthetic.enabled=false",
        f"data.train_dir={data}",
        f"data.eval_file={data / 'eval.hdf5'}",
        f"run.output_dir={folder / 'out'}",
        f"run.max_steps={steps}",
        "log.interval_s=1000",
        "log.quiet=true",
        "eval.samples=64",
        "submission.division=open",
    ]
    return Trainer(load_config(PROJECT_ROOT / "configs" / "tiny_cpu.yaml", overrides))


def timed_steps(trainer, pipeline, first_step: int, count: int) -> list[float]:
    """Per-step seconds of `count` steps, as the trainer's loop runs them."""
    times, gbs = [], trainer.geometry.global_batch_size
    for step in range(first_step, first_step + count):
        start = time.perf_counter()
        loss = trainer.train_step(pipeline)
        trainer.progress.step(step, step * gbs, loss, trainer.optim.lr)
        trainer.obs.on_step_end(trainer, step)
        times.append(time.perf_counter() - start)
    return times


def run_variant(
    name: str, trainer, pipeline, first_step: int, count: int, folder: Path
) -> list[float]:
    obs = trainer.obs
    obs.window = None
    if name == "window_elsewhere":
        obs.window = ProfilerWindow(
            ProfileConfig(start_step=NEVER, steps=2),
            folder,
            trainer.ctx.rank,
            trainer.ctx.device,
            first_step,
        )
    if name != "inside_window":
        return timed_steps(trainer, pipeline, first_step, count)
    ranges.set_recording(True)
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            return timed_steps(trainer, pipeline, first_step, count)
    finally:
        ranges.set_recording(False)


def instrumentation_us(trainer, batches, repeats: int = 20000) -> float:
    """Host microseconds per step of what bert/obs adds to a step outside the window."""
    obs, squares = trainer.obs, trainer.obs.squares
    obs.window = ProfilerWindow(
        ProfileConfig(start_step=NEVER, steps=2), Path("unused"), 0, trainer.ctx.device, 1
    )
    entries = [(b.num_tokens, 1000.0) for b in batches]
    start = time.perf_counter()
    for step in range(repeats):
        squares._queue.extend(entries)  # what the packing thread queued for this step
        with ranges.named("data_wait"):
            waited = time.perf_counter()
            obs.data_ready(time.perf_counter() - waited, batches)
        for name in ("forward", "backward", "optimizer"):
            with ranges.named(name):
                pass
        obs.on_step_end(trainer, step)
    return (time.perf_counter() - start) / repeats * 1e6


def summary(times: list[float]) -> dict:
    return {
        "median_ms": statistics.median(times) * 1e3,
        "mean_ms": statistics.fmean(times) * 1e3,
        "steps": len(times),
    }


def measure(rounds: int, steps: int, warmup: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        trainer = build_trainer(folder, warmup + rounds * steps * len(VARIANTS) + 1)
        pipeline, _ = trainer._open_data()
        trainer.obs.on_train_start(trainer)
        try:
            step = 1 + len(timed_steps(trainer, pipeline, 1, warmup))
            times = {name: [] for name in VARIANTS}
            for r in range(rounds):
                for name in VARIANTS[r % 3 :] + VARIANTS[: r % 3]:  # rotate the order
                    times[name] += run_variant(name, trainer, pipeline, step, steps, folder)
                    step += steps
            batches = pipeline.next_step()
            micro = instrumentation_us(trainer, batches)
        finally:
            trainer._close_data()
            trainer.obs.close(publish=False)
    results = {name: summary(values) for name, values in times.items()}
    base = results["no_window"]["median_ms"]
    for name in VARIANTS:
        results[name]["median_vs_no_window"] = results[name]["median_ms"] / base
        rounds_ms = [
            statistics.median(times[name][i : i + steps]) * 1e3
            for i in range(0, len(times[name]), steps)
        ]
        results[name]["round_medians_ms"] = rounds_ms
        # how far one setting's own rounds differ: the noise the comparison stands in
        results[name]["round_spread"] = max(rounds_ms) / min(rounds_ms)
    return {
        "variants": results,
        "instrumentation_us_per_step": micro,
        "instrumentation_share_of_median_step": micro / 1e3 / base,
        "per_step_ms": {name: [t * 1e3 for t in values] for name, values in times.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per variant and round")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument(
        "--json",
        type=Path,
        default=PROJECT_ROOT / "benchmarks" / "results" / "profile_overhead_cpu.json",
    )
    args = parser.parse_args(argv)
    if min(args.rounds, args.steps) < 1 or args.warmup < 0:
        print("error: --rounds and --steps must be >= 1, --warmup >= 0", file=sys.stderr)
        return 2
    payload = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "host": platform.node(),
            "cpu": platform.processor() or platform.machine(),
            "cpu_count": __import__("os").cpu_count(),
            "torch": torch.__version__,
        },
        "code": code_version(),
        "command": [Path(sys.argv[0]).name, *(sys.argv[1:] if argv is None else argv)],
        "settings": {
            "config": "configs/tiny_cpu.yaml",
            "rounds": args.rounds,
            "steps_per_round": args.steps,
            "warmup_steps": args.warmup,
        },
        **measure(args.rounds, args.steps, args.warmup),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(payload, indent=1) + "\n")
    for name, row in payload["variants"].items():
        print(
            f"{name:<17} median {row['median_ms']:7.2f} ms/step  "
            f"x{row['median_vs_no_window']:.3f} of no_window  (its rounds' medians vary "
            f"x{row['round_spread']:.3f})"
        )
    print(
        f"instrumentation: {payload['instrumentation_us_per_step']:.1f} us per step "
        f"({payload['instrumentation_share_of_median_step']:.2%} of the median step)"
    )
    print(f"wrote {args.json}")
    return 0
