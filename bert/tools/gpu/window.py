"""The GPU window: one device command of at most 420 s, its steps ordered by what they reveal.

    OUT=$OUT scripts/bench/validate_gpu.sh window                         # the first call
    OUT=$OUT scripts/bench/validate_gpu.sh window --continue SUMMARY      # only what it left

A lent GPU gives a session 15 minutes in all, the machine's start included, and at most 10 per
command: one command of about 7 minutes (timeout_s 480, budget WINDOW_BUDGET_S) plus one short
second call (timeout_s 300, budget CONTINUE_BUDGET_S). The steps, in this order:

    device          GPU, driver, torch/CUDA, which SDPA kernels this build has
    build           the kernels (a library that cannot raise fails it: kernels/raise_check.py),
                    first: the learning proof's fused run needs them
    learning_proof  run_pretraining.py to MLPerf's 0.720 three ways (reference bf16, every fused
                    switch, fp16; learning_proof.py): the verdict goes into summary.json
    smoke           run_pretraining.py on CUDA end to end (smoke_train.py): bf16 and fp16 with a
                    forced overflow, prefetch thread, evals, checkpoint and exact resume, no host
                    sync in the step, the compliance checker
    sdpa_probe      every SDPA kernel with a boolean mask against fp64 (probe_sdpa.py), and the
                    kernel padded_sdpa's pin lands on
    tests_<file>    then the GPU tests, one pytest process per file (fused model and attention
                    first), each test journaled: a test that kills its process is recorded as
                    crashed and the file goes on past it (Done when: 0 crashed, 0 failed)
    attention_probe every varlen attention path torch offers, on the packed BERT-Large batch,
                    timed and checked against fp64 (probe_attention.py), and the backend
                    `pick` would choose on this GPU
    train_compare   the fused switches trained against the reference (300 steps, same data)
    bench_lamb      the fused LAMB step against the foreach one
    throughput      ONE bench_throughput.py process with every variant (flash_varlen; each
                    lever alone: +fused, +fused+fusedlamb, +fp8, +graphs; together:
                    +fused+fp8(+graphs)) and both HF baselines, eager and compiled, so every
                    ratio, the fused path against HF compiled included, comes from one run.
                    HF compile's warm-up alone is 52-91 s: this is the long step, and the
                    plan puts it in the --continue call.

The plan spends time only where a step can finish. Each step has an expected duration
(bert/tools/gpu/expected.py), read from the newest committed window record (each number names
its record; a test reads it back) or, for a step no window has run yet, an estimate built from
recorded parts and marked so; and a cap, the kill limit, at least CAP_MARGIN above it. A step
starts only if its expected time fits what is left of the budget; otherwise it is recorded as
`skipped: would not finish (expected X s, Y s left)` and left for `--continue`, which runs
only the steps not finished (the device is read again and the build rerun, a no-op on the warm
machine). The first call prints and records (summary.json: plan) which steps each call is
expected to run, and at its end (summary.json: continue) what is left and its expected total.
"""

from __future__ import annotations

import ast
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from bert.tools.gpu import carry
from bert.tools.gpu.dry_run_checks import throughput_dry_run
from bert.tools.gpu.expected import expectation
from bert.tools.gpu import report as gpu_report

WINDOW_BUDGET_S = 420  # a 480-s device call leaves 60 s for the start and the copy back
# The second call: 15 minutes less the machine's start (up to 120 s) and the first call (480 s)
# leave 300 s, 60 of them for its own start and copy back, as for the first.
CONTINUE_BUDGET_S = 240
TEST_FILE_CAP_S = 60  # per test file
CAP_MARGIN = 1.25  # a cap is at least this much above its step's expected time
# Every call reads the device and runs the build again (a no-op when the machine is warm).
RERUN = ("device", "build")
# Test files that run first: the fused model and the attention backends (the GPU rows a
# config would turn on), then the sync check; every other file with GPU tests follows.
FIRST_TEST_FILES = (
    "tests/unit/test_fused_model.py",
    "tests/unit/test_attention.py",
    "tests/unit/test_sync_free.py",
    "tests/kernels/test_dense.py",
    "tests/kernels/test_bias_dropout_residual_layernorm.py",
    "tests/kernels/test_softmax_cross_entropy.py",
    "tests/kernels/test_embedding_backward.py",
    "tests/kernels/test_lamb_kernel.py",
)
# Files copied to $OUT beside summary.json and the log tarball (the device returns 8 at most);
# every other record is in the tarball.
RECORD_FILES = (
    "learning_proof.json",
    "smoke.json",
    "sdpa_probe.json",
    "train_compare.json",
    "bench_lamb.json",
    "throughput.json",
)
# The one throughput process's variants, the ablation of the speed levers: the validated eager
# path, each lever alone (the fused kernels, the fused LAMB on top of them, FP8 GEMMs, CUDA
# graphs), the levers together (graphs cannot run with the sharded optimizer the fused LAMB
# needs, so all together means fused + FP8 + graphs), and both HF baselines; the graphed ones
# are built last, so a capture that fails (recorded in variant_errors) comes after every other
# variant is built and warm. Not here any more, for the time they cost: +sharded (the flat
# LAMB without its kernels, a step towards +fusedlamb, not a lever: one block each in
# 2026-11-28's selection, 96.1 ms/step against the foreach 81.8) and +sublayers
# (torch.compile's sublayer fusion, the fused kernels' competitor: 536 samples/s against the
# fused 643 on the H100, 2026-11-26; its warm-up alone was 11.6 s).
THROUGHPUT_VARIANTS = (
    "fastest",
    "flash_varlen+fused",
    "flash_varlen+fused+fusedlamb",
    "flash_varlen+fp8",
    "flash_varlen+fused+fp8",
    "hf_eager",
    "hf_compile",
    "flash_varlen+graphs",
    "flash_varlen+fused+fp8+graphs",
)


@dataclass(frozen=True)
class Step:
    name: str
    cap_s: float  # the kill limit; the harness cuts it to what is left of the budget
    run: Callable  # (harness, step) -> None


def test_step_name(path: str) -> str:
    return "tests_" + Path(path).stem


def gpu_test_files(root: Path) -> list[str]:
    """Every test file with GPU tests, FIRST_TEST_FILES first: found by its marker, so a new
    GPU test file cannot be left out (the dry run compares this with pytest's collection)."""
    found = sorted(
        str(p.relative_to(root))
        for p in (root / "tests").rglob("test_*.py")
        if has_gpu_tests(p.read_text())
    )
    return [f for f in FIRST_TEST_FILES if f in found] + [
        f for f in found if f not in FIRST_TEST_FILES
    ]


def has_gpu_tests(source: str) -> bool:
    """A `mark.gpu` in the code or an import of gpu_gate, read from the syntax tree: the text
    alone also matched test_validate_gpu.py's fixture strings, and its run, with nothing to
    select, failed the 2026-11-26 window's step."""
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "gpu"
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "mark"
        ):
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and "gpu_gate" in (
            [getattr(node, "module", None)] + [a.name for a in node.names]
        ):
            return True
    return False


# ---- the steps ---------------------------------------------------------------------------------
def device(h, step: Step) -> None:
    h.device_info(step.cap_s)
    if h.dry_run:  # here, before device time: would the image import everything?
        missing = carry.uncovered()
        record = {
            "name": "carry",
            "status": "failed" if missing else "ok",
            "reason": (
                "the image lacks these and .whl/ would not bring them "
                "(scripts/bench/prepare_gpu_carry.sh WHEELS): " + ", ".join(missing)
            )
            if missing
            else "every requirement is on the image or carried",
        }
        h._record(record, 1 if missing else 0)


def sdpa_probe(h, step: Step) -> None:
    out = h.work / "sdpa_probe.json"
    h.check_or_run(step.name, [h.py, "scripts/bench/probe_sdpa.py", "--out", str(out)], step.cap_s)
    if out.is_file():
        probe = json.loads(out.read_text())
        h.summary["sdpa_probe"] = {
            "pin": probe.get("pin"),
            "padded_sdpa_correct": probe.get("padded_sdpa_correct"),
            "verdicts": gpu_report.probe_verdicts(probe),
        }


def attention_probe(h, step: Step) -> None:
    """Each varlen attention path timed and checked against fp64 (probe_attention.py); its
    record travels in the tarball (RECORD_FILES is full), its verdicts and pick in the summary."""
    out = h.work / "attention_probe.json"
    argv = [h.py, "scripts/bench/probe_attention.py", "--out", str(out)]
    h.check_or_run(step.name, argv, step.cap_s)
    if out.is_file():  # partial too: rewritten after every case
        probe = json.loads(out.read_text())
        h.summary["attention_probe"] = {
            "verdicts": gpu_report.attention_verdicts(probe),
            "pick": probe.get("pick"),
        }


def smoke(h, step: Step) -> None:
    out = h.work / "smoke.json"
    h.check_or_run(
        step.name,
        [h.py, "scripts/bench/smoke_train.py", "--device", "cuda", "--out", str(out)],
        step.cap_s,
    )
    if out.is_file():
        record = json.loads(out.read_text())
        h.summary["smoke"] = {
            name: check["passed"] for name, check in record.get("checks", {}).items()
        }


def train_compare(h, step: Step) -> None:
    out = h.work / "train_compare.json"
    h.check_or_run(
        step.name,
        [
            h.py,
            "scripts/bench/train_compare.py",
            "--device",
            "cuda",
            "--out",
            str(out),
            "--plot",
            str(h.work / "train_compare.png"),
        ],
        step.cap_s,
    )
    if out.is_file():
        h.summary["train_compare"] = json.loads(out.read_text()).get("comparison")


def bench_lamb(h, step: Step) -> None:
    """The optimizer goal: one fused LAMB step on BERT-Large's shard in <= 1/3 of the
    foreach reference's time (bench_lamb.py's target_met), 1 and 8 ranks, fp32 and fp16."""
    out = h.work / "bench_lamb.json"
    h.check_or_run(
        step.name,
        [
            h.py,
            "scripts/bench/bench_lamb.py",
            "--no-compile",
            "--world",
            "1",
            "8",
            "--param-dtype",
            "fp32",
            "fp16",
            "--out",
            str(out),
        ],
        step.cap_s,
    )
    if out.is_file():
        h.summary["bench_lamb"] = gpu_report.speedups(json.loads(out.read_text()))


def learning_proof(h, step: Step) -> None:
    out = h.work / "learning_proof.json"
    h.check_or_run(
        step.name,
        [h.py, "scripts/bench/learning_proof.py", "--device", "cuda", "--out", str(out)],
        step.cap_s,
    )
    if out.is_file():  # partial too: rewritten after every run
        h.summary["learning_proof"] = json.loads(out.read_text()).get("verdict")


def throughput(h, step: Step) -> None:
    """bench_throughput.py on BERT-Large: every variant and both HF baselines in one process."""
    out = h.work / "throughput.json"
    argv = [h.py, "scripts/bench_throughput.py", "--model", "large", "--fastest", "flash_varlen"]
    argv += ["--variants", ",".join(THROUGHPUT_VARIANTS), "--repeats", "2", "--steps", "10"]
    argv += ["--json", str(out)]
    if h.dry_run:
        throughput_dry_run(h, step, argv)
        return
    h.check_or_run(step.name, argv, step.cap_s)
    if out.is_file():  # partial too: every round is written as it ends
        results = {step.name: gpu_report.throughput(json.loads(out.read_text()))}
        h.summary["throughput"] = results
        h.summary["targets"] = gpu_report.targets(results)


def build(h, step: Step) -> None:
    h.summary["kernels_built"] = h.build(step.cap_s)


def gpu_tests(h, step: Step) -> None:
    """One pytest process per file, each capped and started only if it can finish; counts per
    file in summary["tests"]."""
    files = gpu_test_files(h.root)
    if h.dry_run:
        h.collect_gpu_tests(files)
        return
    for path in files:
        name = test_step_name(path)
        if name in h.done or not starts(h, name):  # passed in the first call, or cannot finish
            continue
        junit = h.work / f"{name}.xml"
        tests = h.run_gpu_test_file(
            name,
            path,
            junit,
            TEST_FILE_CAP_S,
            require_kernels=h.summary.get("kernels_built", False),
        )
        h.summary.setdefault("tests_per_file", {})[path] = (
            gpu_report.journal_counts(tests)
            if tests
            else {"note": "no test reported: pytest did not start them (see its log)"}
        )
        h.summary.setdefault("test_failures", {}).update(gpu_report.journal_failures(tests))
        h.summary["tests"] = gpu_report.totals(h.summary["tests_per_file"])
        h.write()


STEPS = (
    Step("device", 20, device),
    # before the learning proof: its fused run needs the extension (kernels.require at build)
    Step("build", 90, build),
    Step("learning_proof", 150, learning_proof),
    Step("smoke", 100, smoke),
    Step("sdpa_probe", 40, sdpa_probe),
    Step("gpu_tests", TEST_FILE_CAP_S, gpu_tests),  # the cap of each file
    Step("attention_probe", 60, attention_probe),
    Step("train_compare", 90, train_compare),
    Step("bench_lamb", 45, bench_lamb),
    Step("throughput", 240, throughput),
)


# ---- the plan ----------------------------------------------------------------------------------
def units(root: Path) -> list[tuple[str, float]]:
    """What the plan counts, in order, with its cap: each step, the GPU tests one per file
    (named as summary.json's steps name them)."""
    out = []
    for step in STEPS:
        if step.name == "gpu_tests":
            out += [(test_step_name(f), step.cap_s) for f in gpu_test_files(root)]
        else:
            out.append((step.name, step.cap_s))
    return out


def caps_below_margin(plan_units: list[tuple[str, float]]) -> list[str]:
    """Every unit whose cap is not CAP_MARGIN above its expected time (the plan's safety)."""
    return [
        f"{name}: cap {cap:g} s < {CAP_MARGIN} x expected {expectation(name).seconds:g} s"
        for name, cap in plan_units
        if cap < CAP_MARGIN * expectation(name).seconds
    ]


def starts(h, name: str) -> bool:
    """A step starts only if its expected time fits what is left of the budget; otherwise it
    is recorded as skipped and left for --continue. A dry run checks every step's command."""
    expected, left = expectation(name).seconds, h.remaining()
    if h.dry_run or expected <= left:
        return True
    reason = f"would not finish (expected {expected:g} s, {left:.0f} s left)"
    print(f"[{h.stage}] {name}: skipped: {reason}", flush=True)
    h._record({"name": name, "status": "skipped", "reason": reason, "expected_s": expected}, 0)
    return False


def make_plan(plan_units: list[tuple[str, float]], budget_s: float, reserve_s: float) -> dict:
    """The plan's arithmetic: in order, each unit whose expected time fits what the earlier
    ones leave goes in this call, the others in the --continue call (with the device and the
    build again), whose expected total must fit CONTINUE_BUDGET_S."""
    left = budget_s - reserve_s
    rows, later = [], []
    for name, cap in plan_units:
        expected = expectation(name)
        here = expected.seconds <= left
        if here:
            left -= expected.seconds
        else:
            later.append(name)
        row = {"name": name, "expected_s": expected.seconds, "cap_s": cap}
        row |= {"record": expected.record} if expected.record else {"estimate": expected.basis}
        rows.append({**row, "call": "this" if here else "continue"})
    return {
        "budget_s": budget_s,
        "reserve_s": reserve_s,
        "steps": rows,
        "this_call_expected_s": round(budget_s - reserve_s - left, 1),
        "continue_call": continue_call(later, reserve_s),
    }


def continue_call(names: list[str], reserve_s: float) -> dict:
    total = sum(expectation(n).seconds for n in (*RERUN, *names))
    return {
        "steps": names,
        "expected_s": round(total, 1),  # the device and the build included
        "budget_s": CONTINUE_BUDGET_S,
        "fits": total <= CONTINUE_BUDGET_S - reserve_s,
    }


def left_undone(h, plan_units: list[tuple[str, float]]) -> dict:
    """After the call: what --continue would run (every unit not finished ok)."""
    status = {s["name"]: s["status"] for s in h.summary["steps"]}
    names = [n for n, _ in plan_units if n not in RERUN and status.get(n) != "ok"]
    return continue_call(names, h.reserve_s)


def plan_lines(plan: dict) -> list[str]:
    room = plan["budget_s"] - plan["reserve_s"]
    lines = [
        f"plan: {plan['budget_s']:g} s less {plan['reserve_s']:g} kept back = {room:g} s; "
        "expected seconds from the records (* an estimate: no record yet)"
    ]
    for row in plan["steps"]:
        mark = "*" if "estimate" in row else " "
        where = "this call" if row["call"] == "this" else "--continue"
        lines.append(
            f"  {row['name']:44s}{row['expected_s']:7.1f} s{mark} cap {row['cap_s']:>4g}  {where}"
        )
    lines.append(f"this call: expected {plan['this_call_expected_s']:g} s of {room:g} s")
    lines.append(continue_line(plan["continue_call"], plan["reserve_s"]))
    return lines


def continue_line(call: dict, reserve_s: float) -> str:
    if not call["steps"]:
        return "--continue: nothing left"
    return (
        f"--continue: {', '.join(call['steps'])}; expected {call['expected_s']:g} s with the "
        f"device and the build again, of {call['budget_s'] - reserve_s:g} s (budget "
        f"{call['budget_s']:g} s less {reserve_s:g}){'' if call['fits'] else ': DOES NOT FIT'}"
    )


def run_window(h, previous: dict | None) -> None:
    """Every step in order, each started only if it can finish; with `previous` (a first call's
    summary), only the steps it did not finish (status other than ok), its finished records
    carried over."""
    done = h.done = set()
    if previous:
        done = h.done = {s["name"] for s in previous.get("steps", []) if s.get("status") == "ok"}
        h.summary["continued_from"] = {
            "commit": previous.get("commit"),
            "date": previous.get("date"),
            "done": sorted(done),
        }
        for key in (
            "learning_proof",
            "sdpa_probe",
            "attention_probe",
            "smoke",
            "throughput",
            "targets",
            "tests_per_file",
            "tests",
        ):
            if key in previous:
                h.summary.setdefault(key, previous[key])
    todo = [(n, cap) for n, cap in units(h.root) if n not in done or n in RERUN]
    h.summary["plan"] = make_plan(todo, h.budget_s, h.reserve_s)
    for line in plan_lines(h.summary["plan"]):
        print(f"[{h.stage}] {line}", flush=True)
    for step in STEPS:
        if step.name in done and step.name not in RERUN:
            continue
        # the GPU tests are started, or not, one file at a time (gpu_tests)
        if step.name == "gpu_tests" or starts(h, step.name):
            step.run(h, step)
    if not h.dry_run:  # a dry run finishes nothing on a GPU: its plan is the prediction
        h.summary["continue"] = left_undone(h, todo)
        print(f"[{h.stage}] {continue_line(h.summary['continue'], h.reserve_s)}", flush=True)
    copy_records(h)


def copy_records(h) -> None:
    """The main JSON records beside summary.json, as plain files to commit."""
    for name in RECORD_FILES:
        if (h.work / name).is_file():
            shutil.copy2(h.work / name, h.out / name)


def load_previous(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        print(
            f"error: validate_gpu: --continue {path}: cannot read a summary ({err})",
            file=sys.stderr,
        )
        raise SystemExit(2) from None
