"""The learning proof: runs of the training program that reach a real target on this device.

    python -m bert.tools.gpu.learning_proof --device cuda --out learning_proof.json  # the window
    python -m bert.tools.gpu.learning_proof --device cpu --out learning_proof.json   # its CPU twin

Each variant is one run of run_pretraining.py's own entry point on the learnable synthetic
shards (data/synthetic.py), from the same seed, until its eval MLM accuracy reaches MLPerf's
0.720 (run_stop success, exit 0) or its step budget runs out (a failed proof):
    reference  the plain PyTorch path: bf16 with flash_varlen on CUDA; on the CPU the default
               run's own config (configs/tiny_cpu.yaml, the README's main job), fp32
    fused      CUDA: every fused model flag valid for the model's erf GeLU plus the sharded
               LAMB's fused kernels (optim.fused_kernel), bf16
    fp16       CUDA: the reference path in fp16 with the dynamic loss scaler
A variant passes when its run ended with run_stop success, the official compliance checker
passes its log (the final accuracy rule included: the target is real), and, for every variant
but the reference, it reached the target within SAMPLES_SLACK of the reference's samples. The
record holds each run's eval curve (samples, accuracy) and samples to target, and is rewritten
after every run, so a killed proof keeps the runs that finished.

The CUDA shape is train_compare's (width 1024 so the fused kernels' shape limits apply, the
default run's 1024-word vocabulary, batch 128): on an H200 its reference reached 0.789 MLM
accuracy after 300 steps, the fused run 0.788 (benchmarks/results/gpu/2026-11-28_window/
train_compare.json). Here it stops at the target instead, with an eval every EVAL_EVERY_STEPS
steps so that 10% of the samples to target spans at least two evals. On an H200 all three
runs reached 0.720 at 5120 samples (2026-11-28b window, learning_proof.json).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
from pathlib import Path

from bert.submission.compliance import parse_args as checker_args
from bert.submission.compliance import run_checker
from bert.mlperf import constants as C
from bert.mlperf.constants import LOG_NAME
from bert.tools.common import git_commit, set_args, write_json
from bert.tools.gpu.smoke_train import mlperf_events, run
from bert.tools.gpu.learn import CUDA_SHAPE
from bert.tools.gpu.train_compare import fused_switches, run_stop

TARGET = 0.720  # MLPerf BERT's eval MLM accuracy target (shared/REFERENCE.md section 1)
# The fused and the fp16 runs reach the target within 10% of the reference's samples.
SAMPLES_SLACK = 1.10
SEED = 2718

# On CUDA an eval every 2 steps (256 samples): the 2026-11-28b window's runs reached 0.720 at
# step 40 (5120 samples) with an eval every 10, so 10% of the samples to target was under half
# an eval interval; at 2 steps it spans two (an eval of 2048 samples costs milliseconds there).
EVAL_EVERY_STEPS = 2
SHAPES = {
    # configs/tiny_cpu.yaml as shipped (the default run): nothing overridden but the folders
    "cpu": {},
    "cuda": {
        **CUDA_SHAPE,
        "eval.batch_size": 256,
        "data.synthetic.num_shards": 2,
        "data.synthetic.samples_per_shard": 8192,
        "data.synthetic.eval_samples": 2048,
        "eval.samples": 2048,
        "eval.interval_samples": EVAL_EVERY_STEPS * 128,
        # the step budget and the LR schedule's length: the H200 reference was at 0.789
        # after 300 steps of a 300-step schedule; a run that has not reached 0.720 by 500
        # has failed
        "schedule.total_steps": 500,
        "run.max_steps": 500,
    },
}
DEFAULT_VARIANTS = {"cpu": ("reference",), "cuda": ("reference", "fused", "fp16")}


def variant_settings(name: str, device: str) -> dict:
    """The overrides that make variant `name` on `device` (on top of SHAPES[device])."""
    if device == "cpu":
        if name != "reference":
            raise ValueError(f"the CPU twin runs the reference only, not {name!r}")
        return {}
    return {
        "reference": {"run.precision": "bf16"},
        "fused": {"run.precision": "bf16", "optim.sharded": "true"}
        | fused_switches(SHAPES["cuda"], "cuda"),
        "fp16": {"run.precision": "fp16"},
    }[name]


def run_args(device: str, work: Path, name: str) -> list[str]:
    values = {
        **SHAPES[device],
        **variant_settings(name, device),
        "run.device": device,
        "run.seed": SEED,
        "run.output_dir": str(work / name),
        "eval.target_mlm_accuracy": TARGET,
        "data.synthetic.enabled": "true",
        "data.synthetic.cache_dir": str(work / "cache"),
        "log.interval_s": 1e9,
    }
    return ["--quiet", *set_args(values)]


def eval_curve(events: list[dict]) -> list[list[float]]:
    """[samples trained, eval accuracy] per eval of an MLPerf log (epoch_num counts samples)."""
    return [
        [e.get("metadata", {}).get(C.EPOCH_NUM), e["value"]]
        for e in events
        if e.get("key") == C.EVAL_ACCURACY
    ]


def samples_to_target(curve: list[list[float]], target: float = TARGET) -> int | None:
    """The samples trained at the first eval at or above the target (None: never reached)."""
    return next((int(samples) for samples, acc in curve if acc >= target), None)


def strict_compliance(log: Path) -> dict:
    """The official checker, every rule (the final accuracy's too): the target is real here."""
    if not log.is_file():
        return {"passed": False, "reasons": [f"no log at {log.name}"]}
    verdict = run_checker(log, checker_args([str(log)]))
    return {"passed": verdict.passed, "reasons": verdict.reasons[-3:]}


def one_run(device: str, work: Path, name: str) -> dict:
    result = run(run_args(device, work, name))  # exit, error, seconds
    folder = work / name
    curve = eval_curve(mlperf_events(folder, LOG_NAME))
    stop = run_stop(folder)
    return {
        **result,
        "settings": variant_settings(name, device),
        C.RUN_STOP: None if stop is None else stop.get("status"),
        "steps": None if stop is None else stop.get("steps"),
        "evals": curve,
        "samples_to_target": samples_to_target(curve),
        "compliance": strict_compliance(folder / LOG_NAME),
    }


def run_failures(name: str, result: dict) -> list[str]:
    """Why one run is not a proof: it raised, did not end with run_stop success, never reached
    the target, or its log fails the checker."""
    if result.get("error"):
        return [f"{name} raised {result['error']}"]
    failures = []
    if (result.get("exit"), result.get(C.RUN_STOP)) != (0, "success"):
        failures.append(
            f"{name} ended with exit {result.get('exit')} and run_stop {result.get(C.RUN_STOP)}"
            f" (a proof ends with exit 0 and run_stop success)"
        )
    if result.get("samples_to_target") is None:
        best = max((acc for _, acc in result.get("evals", [])), default=None)
        failures.append(f"{name} never reached {TARGET} (best eval {best})")
    if not result.get("compliance", {}).get("passed"):
        failures.append(f"{name}'s log fails the compliance checker")
    return failures


def verdict(runs: dict) -> dict:
    """`passed` only when every run is a proof and each variant reached the target within
    SAMPLES_SLACK of the reference's samples; `failures` names every reason."""
    failures = [reason for name, result in runs.items() for reason in run_failures(name, result)]
    reference = runs.get("reference", {}).get("samples_to_target")
    if "reference" not in runs:
        failures.append("no reference run")
    ratios = {}
    for name, result in runs.items():
        reached = result.get("samples_to_target")
        if name == "reference" or reached is None or reference is None:
            continue
        ratios[name] = reached / reference
        if not ratios[name] <= SAMPLES_SLACK:
            failures.append(
                f"{name} needed {reached} samples, {ratios[name]:.3f}x the reference's "
                f"{reference} (at most {SAMPLES_SLACK}x)"
            )
    return {
        "target": TARGET,
        "samples_slack": SAMPLES_SLACK,
        "samples_to_target": {n: r.get("samples_to_target") for n, r in runs.items()},
        "ratio_to_reference": ratios,
        "failures": failures,
        "passed": not failures,
    }


def summary_line(device: str, found: dict, out: Path) -> str:
    reached = ", ".join(
        f"{name} {'never' if s is None else s}" for name, s in found["samples_to_target"].items()
    )
    head = "passed" if found["passed"] else f"FAILED: {'; '.join(found['failures'])}"
    return f"learning_proof ({device}): {head}. Samples to {TARGET}: {reached}; {out}"


def parse_variants(text: str, device: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    allowed = DEFAULT_VARIANTS[device]
    unknown = [n for n in names if n not in allowed]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"--variants on {device}: choose from {', '.join(allowed)} (got {text!r})"
        )
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=sorted(SHAPES), default="cuda")
    parser.add_argument(
        "--variants",
        help="comma-separated, reference first (default: reference,fused,fp16 on cuda; "
        "reference on cpu)",
    )
    parser.add_argument("--out", type=Path, required=True, help="the JSON record")
    parser.add_argument("--work", type=Path, help="scratch folder (default: a temporary one)")
    args = parser.parse_args(argv)
    try:
        names = (
            parse_variants(args.variants, args.device)
            if args.variants
            else DEFAULT_VARIANTS[args.device]
        )
    except argparse.ArgumentTypeError as err:
        parser.error(str(err))
    record = new_record(args.device, argv)
    with tempfile.TemporaryDirectory(prefix="learning-proof-") as tmp:
        work = (args.work or Path(tmp)).resolve()
        for name in names:
            record["runs"][name] = one_run(args.device, work, name)
            record["verdict"] = verdict(record["runs"])
            write_json(args.out, record)  # a killed proof keeps the finished runs
    print(summary_line(args.device, record["verdict"], args.out))
    return 0 if record["verdict"]["passed"] else 1


def new_record(device: str, argv: list[str] | None) -> dict:
    record = {
        "device": device,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "command": " ".join(
            [Path(sys.executable).name, "-m", "bert.tools.gpu.learning_proof"]
            + list(sys.argv[1:] if argv is None else argv)
        ),
        "shape": SHAPES[device],
        "target": TARGET,
        "seed": SEED,
        "runs": {},
    }
    if device == "cuda":
        import torch

        record["gpu"], record["torch"] = torch.cuda.get_device_name(0), torch.__version__
    return record


if __name__ == "__main__":
    sys.exit(main())
