"""End-to-end smoke of the training program on one device: what a user runs first.

    python scripts/bench/smoke_train.py --device cuda --out smoke.json   # the GPU window's step
    python scripts/bench/smoke_train.py --device cpu --out smoke.json    # the same on a CPU

Four short runs of run_pretraining.py's own entry point on synthetic shards of the learnable
language (data/synthetic_language.py), and what each check proves:

    full      bf16, two eval blocks, a checkpoint at each block's end, the loss of every
              step in metrics.jsonl:
              full_run               the program trains and evaluates end to end (exit 0: the
                                     target is out of reach on purpose, so the run stops at
                                     its step budget, before the schedule's end, as told)
              full_run_learned       the last eval is at least LEARNED_FLOOR (chance: 1/920):
                                     the model learns, so the evals below compare something
              compliance_but_target  its MLPerf log passes the official compliance checker
    first     bf16, the first block alone, one metrics record (no per-step host read):
              no_sync_in_step        no host sync inside the block's steady-state steps (CUDA:
                                     torch.cuda.set_sync_debug_mode("error") over them)
    resumed   `--resume` from `full`'s checkpoint at its first block's end, in a folder of its
              own, to the end of the second block:
              resume_same_losses     the loss of the first RESUME_LOSS_STEPS steps after the
                                     resume equals `full`'s at the same steps (bitwise on the
                                     CPU; on CUDA within RESUME_LOSS_BOUND, the rounding of
                                     atomics): weights, optimizer moments, data position and
                                     dropout RNG all came back. The first step's loss shows the
                                     weights, data and RNG; the optimizer shows from the second
              resume_same_evals      the resumed run's eval equals `full`'s at the same step
                                     (bitwise on the CPU; on CUDA within RESUME_TOLERANCE)
    fp16      fp16 with the loss scaler, FP16_STEPS steps:
              fp16_overflow_skipped  one forced overflow (an inf gradient at step 2) is
                                     skipped, and training goes on to a finite eval

The model differs by device: on CUDA a BERT of width 1024 (2 layers, 16 heads, FFN 4096, 512
positions, so the fused kernels' shape limits apply) with flash_varlen and the settings under
which it learns within the window's steps (bert/tools/gpu/learn.py); on the CPU a one-layer
tiny BERT (tiny_cpu.yaml's width 128) on sequences of 64, which learns within its 20 steps
(SHAPES). Both use the sharded LAMB, the prefetch thread (on CUDA its pinned side-stream copy)
and evals on the device. The JSON is rewritten after every check, so a killed smoke still
reports the runs that finished; window.py reads its `checks` (name -> passed, detail).
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bert.submission.compliance import parse_args as checker_args
from bert.submission.compliance import run_checker
from bert.mlperf import constants as C
from bert.mlperf.constants import LOG_NAME, resumed_log_name
from bert.submission.reader import mllog_records
from bert.obs.observer import file_suffix
from bert.obs.sinks import read_records
from bert.tools.common import git_commit, set_args, write_json
from bert.tools.gpu.learn import CUDA_SHAPE, LEARN
from bert.train.checkpoint import checkpoint_root, step_dir
from bert.train.cli import main as train_main  # run_pretraining.py's and open-bert-train's
from data.synthetic_language import FIRST_WORD_ID

# Steps per eval block: enough for each device's shape to learn within two blocks (SHAPES).
# CUDA: 100 steps of batch 128 in all runs, ~4 s of an H100 (train_compare: 300 in ~10 s).
STEPS_PER_BLOCK = {"cuda": 25, "cpu": 10}
FP16_STEPS = 4  # the forced overflow at step 2, then real steps: the loss scaler's mechanics
FORCED_OVERFLOW_STEP = 2

# The full run's last eval must reach this for the evals to mean anything: chance is 1/920
# (a word of the 1024 vocabulary), and runs that learned nothing agree at ~0, so comparing
# them cannot fail (every eval of the 2026-11-28 window was 0.0). Measured on the CPU
# (SHAPES["cpu"], eval of 128 samples): 0.157-0.188 after its 20 steps (run.seed 1234, 7, 99,
# 5), 0.005-0.017 after 10, before it starts to learn. 0.05 is 46 times chance and 3 times
# below the CPU's worst; CUDA's shape reached 0.75 after 50 steps (learn.py, in fp32).
LEARNED_FLOOR = 0.05
CHANCE = 1 / (LEARN["model.vocab_size"] - FIRST_WORD_ID)

# resume_same_losses compares the first RESUME_LOSS_STEPS steps after the resume: the first
# step's loss comes from the restored weights, data position and dropout RNG, the optimizer's
# moments and schedule show from the second; later steps only add drift on CUDA.
RESUME_LOSS_STEPS = 4
# |resumed loss - uninterrupted loss| <= bound * |uninterrupted loss| at each of those steps.
# CPU: 0. Its kernels are deterministic, so a resume that restored everything repeats the
# uninterrupted run's arithmetic bit for bit.
# CUDA: the resumed run starts from `full`'s own checkpoint, so the first step after the resume
# has the same weights, data and dropout RNG, and a deterministic forward (flash forward,
# GEMMs) gives the same loss. From the second step on, the backward's atomics (flash_varlen adds
# dQ's fp32 partial sums in whatever order the thread blocks come; the embedding backward may)
# make the weights differ in their low fp32 bits. (Comparing with ANOTHER run of the same
# settings, as the 2026-11-28b window did, adds a whole block of such drift: 1.3-2% gaps.) The
# forward runs in bf16: 8 significant bits, one unit in the last place (ulp) is 2^-8 = 0.39% of
# a value. Weights equal to fp32 rounding round to the same bf16 value or, near a rounding
# boundary, to neighbours one ulp apart, so the two runs' bf16 activations and logits differ by
# about an ulp at most; the cross entropy moves by less than an ulp of its value, since the
# per-token changes have random signs and the loss averages over a thousand masked tokens.
# Bound: two ulps of the loss, 2^-7 = 0.78% (0.05 at loss 7, 0.02 at 3), the second for the
# drift of the steps compared. What wrong resumes do, measured
# on the CPU shape (tests/tools/test_smoke_train.py runs each): lost optimizer moments move
# the second step's loss by 11%, a lost data position the four steps' by 0.7-1.7% (3 of 4
# past the bound), both fail here too; lost RNG state (other dropout masks) by 0.04-0.44%,
# inside it: on CUDA that fault is not told from rounding, the CPU's bitwise check catches it.
# Not yet measured on a GPU: the record keeps each step's gap for the next window to show.
RESUME_LOSS_BOUND = {"cpu": 0.0, "cuda": 2.0**-7}
# Eval accuracies of the resumed run against the uninterrupted one: bitwise on the CPU; on CUDA
# the rounding above may flip a few of the eval's thousand-odd predictions (0.02: ~25).
RESUME_TOLERANCE = {"cpu": 0.0, "cuda": 0.02}

# the exit status of a run stopped at its run.max_steps before the schedule's end without the
# target (bert/train/exit_status.py RUN_ENDS): how every smoke run ends
BUDGET_STOP = 0
SHAPES = {
    "cuda": {
        **CUDA_SHAPE,
        "eval.batch_size": 128,
        "data.synthetic.samples_per_shard": 4096,  # 8192: 50 steps of 128 see each at most once
        # the schedule's decay spans tiny_cpu.yaml's 800 steps: after the warmup the lr stays
        # near its peak, as in learn.py's measure
    },
    # tiny_cpu.yaml's model (width 128, init 0.08, vocabulary 1024) with one layer, on
    # sequences of 64 and batch 128: the cheapest measured shape that learns within 20 steps.
    # Eval MLM accuracy after 20 steps on the CPU (seed 1234): this shape 0.184; with
    # per_sequence attention two layers 0.179 at about twice the time, batch 64 0.063;
    # tiny_cpu's own shape (2 layers, sequences of 128, batch 32, lr 1e-2, warmup 20) 0.045
    # after 24 steps and 0.125 after 48. Padded
    # SDPA, not tiny_cpu's per_sequence: at batch 128 its 128 calls per layer cost more than
    # the padding (20 steps: 1.9 s of CPU time against 2.9 s).
    "cpu": {
        "model.num_hidden_layers": 1,
        "model.max_position_embeddings": 64,
        "model.attention": "padded_sdpa",
        "data.max_seq_length": 64,
        "data.max_predictions_per_seq": 10,
        "optim.lr": 2e-2,
        "schedule.warmup_steps": 5,
        "run.global_batch_size": 128,
        "eval.batch_size": 64,
        "run.threads": 1,
        "data.synthetic.samples_per_shard": 256,  # the 20 steps go 5 times over the 512
    },
}


def overrides(
    device: str, work: Path, output: str, precision: str, steps: int, every_step: bool
) -> list[str]:
    """One run of `steps` steps, an eval every block. every_step: a metrics record (the loss)
    at every step, one host read each; else one per block, so the steps between stay sync-free."""
    shape = SHAPES[device]
    block = min(steps, STEPS_PER_BLOCK[device])
    values = {
        **shape,
        "run.device": device,
        "run.precision": precision,
        "run.seed": 1234,
        "run.output_dir": str(work / output),
        "optim.sharded": "true",
        "run.max_steps": steps,
        "eval.interval_samples": block * shape["run.global_batch_size"],
        "eval.samples": 128,
        "eval.target_mlm_accuracy": 1.0,
        "log.interval_s": 0 if every_step else 1e9,
        "data.synthetic.enabled": "true",
        "data.synthetic.cache_dir": str(work / "cache"),
        "data.synthetic.num_shards": 2,
        "data.synthetic.eval_samples": 128,
    }
    return set_args(values)


def loss_gaps(resumed: dict, reference: dict, steps: list[int], bound: float) -> dict:
    """resume_same_losses' verdict: at each step, both losses present and finite and
    |resumed - reference| <= bound * |reference|. Curves map step -> loss."""
    failures, gaps = [], {}
    for step in steps:
        got, want = resumed.get(step), reference.get(step)
        if got is None or want is None:
            which = "resumed" if got is None else "uninterrupted"
            failures.append(f"step {step}: no loss in the {which} run")
            continue
        gaps[step] = abs(got - want)
        if not gaps[step] <= bound * abs(want):  # NaN and inf fail too
            failures.append(
                f"step {step}: loss {got!r} vs uninterrupted {want!r}, gap {gaps[step]:.3g} "
                f"above {bound:.3g} of it"
            )
    return {
        "steps": steps,
        "gaps": gaps,
        "max_gap": max(gaps.values(), default=None),
        "relative_bound": bound,
        "failures": failures,
        "passed": not failures,
    }


# ---- trainer callbacks (the Trainer's generic hooks) -----------------------------------------
class SyncFree:
    """CUDA: a host sync inside steps 2..block end-1 raises (set_sync_debug_mode("error"))."""

    def __init__(self, device: str):
        self.on = device == "cuda"
        self.last = STEPS_PER_BLOCK[device] - 1

    def on_train_start(self, trainer) -> None:
        pass

    def on_step_end(self, trainer, step: int) -> None:
        if not self.on:
            return
        import torch

        if step == 1:
            torch.cuda.set_sync_debug_mode("error")
        elif step == self.last:
            torch.cuda.set_sync_debug_mode("default")


class ForcedOverflow:
    """Makes one parameter's gradient inf during step `step` (1-based); records the skips."""

    def __init__(self, step: int):
        self.step, self.current, self.trainer = step, 1, None

    def on_train_start(self, trainer) -> None:
        self.trainer = trainer
        weight = trainer.raw_model.parameters().__next__()
        weight.register_hook(lambda grad: grad * math.inf if self.current == self.step else grad)

    def on_step_end(self, trainer, step: int) -> None:
        self.current = step + 1

    def skipped_steps(self) -> int:
        scaler = getattr(self.trainer.optim, "loss_scaler", None)
        return scaler.skipped_steps() if scaler is not None else -1


# ---- one run -----------------------------------------------------------------------------------
def run(argv: list[str], callbacks=()) -> dict:
    start = time.monotonic()
    try:
        code = train_main(argv, callbacks=callbacks)
        error = None
    except Exception as err:  # noqa: BLE001 - recorded: the smoke reports, it does not crash
        code, error = 1, f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    return {"exit": code, "error": error, "seconds": round(time.monotonic() - start, 1)}


def mlperf_events(folder: Path, name: str) -> list[dict]:
    log = folder / name
    if not log.is_file():
        return []
    return mllog_records(log.read_text())


def eval_accuracies(events: list[dict]) -> list[float]:
    return [e["value"] for e in events if e.get("key") == C.EVAL_ACCURACY]


def compliance(log: Path) -> dict:
    """The official checker on a smoke log (bert/submission/compliance.py). A smoke run stops long
    before MLPerf's 0.720, so the one rule it cannot meet is the final accuracy's: it passes
    when no other rule failed."""
    verdict = run_checker(log, checker_args([str(log)]))
    # the checker's reasons: WARNING lines ("Failed checks for", "CHECK for ... failed") and
    # the "Required ... occurrence" lines of missing or repeated keys
    failed = [line.strip() for line in verdict.reasons if "WARNING" in line or "Required" in line]
    target_only = all(
        "Failed checks for eval_accuracy" in line and ">= 0.720" in line for line in failed
    )
    return {
        "passed": verdict.passed or (bool(failed) and target_only),
        "failed_rules": failed,
        "tail": verdict.reasons[-3:],
        "note": "every rule but the final accuracy >= 0.720 (not trained to the target)",
    }


def learned(evals: list[float]) -> tuple[bool, dict]:
    """full_run_learned's verdict: the last eval at least LEARNED_FLOOR (NaN fails)."""
    last = evals[-1] if evals else None
    passed = last is not None and last >= LEARNED_FLOOR
    return passed, {"last_eval": last, "floor": LEARNED_FLOOR, "chance": CHANCE}


def train_losses(folder: Path, log: str) -> dict[int, float]:
    """step -> loss: the records of kind "train" in the metrics.jsonl of the run whose MLPerf
    log is `log` (a resumed run's files carry the log's suffix, bert/obs/observer.py)."""
    metrics = folder / f"metrics{file_suffix(log)}.jsonl"
    records = read_records(metrics) if metrics.is_file() else []
    return {r["step"]: r["loss"] for r in records if r.get("kind") == "train"}


class Smoke:
    def __init__(self, device: str, out: Path, work: Path):
        self.device, self.out, self.work = device, out, work
        self.block = STEPS_PER_BLOCK[device]
        self.record = {
            "device": device,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "commit": git_commit(),
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "steps_per_block": self.block,
            "runs": {},
            "checks": {},
        }
        if device == "cuda":
            import torch

            self.record["gpu"] = torch.cuda.get_device_name(0)
            self.record["torch"] = torch.__version__

    def args(self, output: str, precision: str, steps: int, every_step: bool) -> list[str]:
        return ["--quiet", *overrides(self.device, self.work, output, precision, steps, every_step)]

    def check(self, name: str, passed: bool, detail) -> None:
        self.record["checks"][name] = {"passed": bool(passed), "detail": detail}
        self.write()

    def write(self) -> None:
        write_json(self.out, self.record)

    def full(self) -> dict:
        """The uninterrupted run, a checkpoint at each block's end; returns its evals and
        step -> loss, the resume's reference."""
        args = [*self.args("full", "bf16", 2 * self.block, every_step=True), *self.every_block()]
        result = run(args)
        self.record["runs"]["full"] = result
        evals = eval_accuracies(mlperf_events(self.work / "full", LOG_NAME))
        self.check(
            "full_run",
            result["exit"] == BUDGET_STOP and len(evals) == 2,
            {"evals": evals, **result},
        )
        self.check("full_run_learned", *learned(evals))
        if (self.work / "full" / LOG_NAME).is_file():
            self.check("compliance_but_target", *self._compliance(self.work / "full" / LOG_NAME))
        return {"evals": evals, "losses": train_losses(self.work / "full", LOG_NAME)}

    def _compliance(self, log: Path) -> tuple[bool, dict]:
        found = compliance(log)
        return found["passed"], found

    def every_block(self) -> list[str]:
        return ["--set", f"checkpoint.interval_steps={self.block}"]

    def first_half(self) -> None:
        """The first block and its checkpoint; its steady-state steps must not sync."""
        first = run(
            self.args("first", "bf16", self.block, every_step=False), [SyncFree(self.device)]
        )
        self.record["runs"]["first"] = first
        self.check(
            "no_sync_in_step",
            first["error"] is None,
            f"set_sync_debug_mode('error') over steps 2-{self.block - 1} of the first run"
            if self.device == "cuda"
            else "not applicable on the CPU (tests/unit/test_sync_free.py covers it)",
        )

    def second_half(self, reference: dict) -> None:
        """`--resume` from the full run's checkpoint at the end of its first block, in a folder
        of its own, to the end of the second block. Against the run that wrote the checkpoint,
        not another run of the same settings: on CUDA two such runs drift apart over a block
        (atomics in backward), and the 2026-11-28b window's check compared exactly that (1.3-2%
        gaps at the first steps after the resume)."""
        checkpoint = step_dir(checkpoint_root(self.work / "full"), self.block)
        args = self.args("resume", "bf16", 2 * self.block, every_step=True)
        resumed = run([*args, "--resume", str(checkpoint)])
        self.record["runs"]["resumed"] = resumed
        self._same_losses(reference["losses"], resumed)
        self._same_evals(reference["evals"], resumed)

    def _same_losses(self, want: dict, resumed: dict) -> None:
        steps = list(range(self.block + 1, self.block + 1 + RESUME_LOSS_STEPS))
        got = train_losses(self.work / "resume", resumed_log_name(self.block))
        verdict = loss_gaps(got, want, steps, RESUME_LOSS_BOUND[self.device])
        self.check("resume_same_losses", verdict["passed"], {**verdict, "resumed": resumed})

    def _same_evals(self, want: list[float], resumed: dict) -> None:
        """The resumed run's eval, at the second block's end, against the uninterrupted run's."""
        evals = eval_accuracies(mlperf_events(self.work / "resume", resumed_log_name(self.block)))
        want = want[-1:]
        gap = max((abs(a - b) for a, b in zip(evals, want)), default=math.inf)
        same = len(evals) == len(want) == 1 and gap <= RESUME_TOLERANCE[self.device]
        detail = {"evals": evals, "uninterrupted": want, "max_gap": gap}
        first = self.record["runs"].get("first")
        self.check("resume_same_evals", same, {**detail, "first": first, "resumed": resumed})

    def fp16(self) -> None:
        overflow = ForcedOverflow(FORCED_OVERFLOW_STEP)
        result = run(self.args("fp16", "fp16", FP16_STEPS, every_step=False), [overflow])
        self.record["runs"]["fp16"] = result
        evals = eval_accuracies(mlperf_events(self.work / "fp16", LOG_NAME))
        skipped = overflow.skipped_steps() if overflow.trainer is not None else -1
        self.check(
            "fp16_overflow_skipped",
            result["exit"] == BUDGET_STOP
            and skipped == 1
            and len(evals) == 1
            and math.isfinite(evals[0]),
            {"skipped_steps": skipped, "evals": evals, **result},
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), required=True)
    p.add_argument("--out", type=Path, required=True, help="JSON record (rewritten per run)")
    p.add_argument("--work", type=Path, help="scratch folder (default: a new temporary one)")
    args = p.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="smoke-train-"))
    smoke = Smoke(args.device, args.out.resolve(), work.resolve())
    smoke.write()
    try:
        reference = smoke.full()
        smoke.first_half()
        smoke.second_half(reference)
        smoke.fp16()
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    failed = [name for name, c in smoke.record["checks"].items() if not c["passed"]]
    smoke.record["failed_checks"] = failed
    smoke.write()
    print(
        f"smoke_train ({args.device}): {len(smoke.record['checks']) - len(failed)} of "
        f"{len(smoke.record['checks'])} checks passed; failed: {', '.join(failed) or 'none'}; "
        f"{args.out}"
    )
    return 1 if failed else 0
