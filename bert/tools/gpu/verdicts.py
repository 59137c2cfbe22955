"""kernels/VALIDATION.md's GPU figures and the README's GPU status, generated from the windows.

A verdict is per GPU test file, from each window's `summary.json` (`tests_per_file`): the file's
newest run, and its newest run on the target GPU (records.TARGET_GPU), since a kernel is
switched on only after its tests pass there. A window that ran only some files (a --continue
call) leaves the others' verdicts to the windows that ran them. Figures name their window
(date, device, commit).
"""

from __future__ import annotations

from collections.abc import Callable

from bert.model.attention import BACKENDS
from bert.model.config import COMPILE_SUBLAYERS_GPU_VALIDATED
from bert.model.fp8 import FP8_LINEAR_GPU_VALIDATED
from bert.model.fused import FUSED_OPS
from bert.optim.registry import OPTIMIZERS
from bert.train.graphs.config import CUDA_GRAPHS_GPU_VALIDATED
from bert.tools.gpu.records import (
    TARGET_GPU,
    Window,
    all_passed,
    newest_counts,
    outcome,
    window_tests,
)

# Each kernel's own tests (one op, one name: tests/kernels/test_<op>.py), read from the records;
# the optimizer's LAMB kernels beside the optimizer's tests (test_lamb.py) have their own name.
KERNEL_TESTS = {
    **{op.kernel: f"tests/kernels/test_{op.kernel}.py" for op in FUSED_OPS.values()},
    "lamb": "tests/kernels/test_lamb_kernel.py",
}
FUSED_MODEL = "tests/unit/test_fused_model.py"
ATTENTION = "tests/unit/test_attention.py"
# a switch is validated when the model-level test and its kernel's own tests pass
SWITCH_TESTS = {
    **{f"model.{flag}": (FUSED_MODEL, KERNEL_TESTS[op.kernel]) for flag, op in FUSED_OPS.items()},
    "optim.fused_kernel": (KERNEL_TESTS["lamb"],),
    "model.attention=flash_varlen": (ATTENTION,),
    "model.attention=grouped_flash": (ATTENTION, FUSED_MODEL),
    "model.compile_sublayers": (),
    "model.fp8_linear": ("tests/unit/test_fp8.py",),
    "run.cuda_graphs": ("tests/unit/test_cuda_graphs.py", "tests/unit/test_cuda_graphs_trainer.py"),
}


def registry_record(key: str) -> str | None:
    """The GPU record a switch's registry entry cites as its validation (what bert/gpu_status.py
    warns from), None while it has none; the docs state it beside the test counts."""
    if key.startswith("model.attention="):
        return BACKENDS[key.split("=", 1)[1]].gpu_validated
    if key == "model.compile_sublayers":
        return COMPILE_SUBLAYERS_GPU_VALIDATED
    if key == "model.fp8_linear":
        return FP8_LINEAR_GPU_VALIDATED
    if key == "run.cuda_graphs":
        return CUDA_GRAPHS_GPU_VALIDATED
    if key == "optim.fused_kernel":
        cited = [o.sharded.fused_gpu_validated for o in OPTIMIZERS.values() if o.sharded]
        return next((c for c in cited if c), None)
    return FUSED_OPS[key.removeprefix("model.")].gpu_validated


def newest_on(found: list[Window], gpu: str) -> Window | None:
    return next((w for w in reversed(found) if gpu in w.device), None)


def results(found: list[Window], files: tuple[str, ...], gpu: str = "") -> str:
    """Each file's newest run (on `gpu`, when given), with its window."""
    shown = []
    for f in files:
        run = newest_counts(found, f, gpu)
        where = f" ({run[0].name}, {run[0].device})" if run else ""
        shown.append(f"`{f.split('/')[-1]}` {outcome(run[1] if run else None)}{where}")
    return "; ".join(shown)


def passed_on(found: list[Window], files: tuple[str, ...], gpu: str = "") -> bool:
    """Every file's newest run (on `gpu`) passed."""
    runs = [newest_counts(found, f, gpu) for f in files]
    return all(run is not None and all_passed(run[1]) for run in runs)


def verdict(found: list[Window], files: tuple[str, ...]) -> str:
    """yes only when every file's newest run on the target GPU passed; else where it stands."""
    if not files:
        return "no: no GPU test"
    if passed_on(found, files, TARGET_GPU):
        return f"yes, on {TARGET_GPU}"
    if passed_on(found, files):
        where = sorted({newest_counts(found, f)[0].device for f in files})
        return f"not yet: passes on {', '.join(where)}, not yet rerun on {TARGET_GPU}"
    return "no: a file's newest run failed"


def switch_verdict(found: list[Window], key: str, files: tuple[str, ...]) -> str:
    """The registry's word (what a run warns about) first, then where the tests stand."""
    cited = registry_record(key)
    head = f"yes (registry cites `{cited}`)" if cited else "**no** (the registry cites no record)"
    return f"{head}; tests: {verdict(found, files)}"


def verdict_table(
    found: list[Window],
    first: str,
    rows: dict[str, tuple[str, ...]],
    judge: Callable[[list[Window], str, tuple[str, ...]], str],
) -> str:
    lines = [
        f"| {first} | each file's newest run | its newest run on {TARGET_GPU} (the target) | "
        "GPU-validated |",
        "|---|---|---|---|",
    ]
    for key, files in rows.items():
        lines.append(
            f"| `{key}` | {results(found, files) or 'no GPU test'} | "
            f"{results(found, files, TARGET_GPU) or 'no GPU test'} | {judge(found, key, files)} |"
        )
    return "\n".join(lines + ["", never_on(found, "A100", "sm_80")])


def never_on(found: list[Window], gpu: str, arch: str) -> str:
    if newest_on(found, gpu):
        return ""
    return f"No window has run on an {gpu} ({arch}): nothing is validated there."


def kernel_verdicts(found: list[Window]) -> str:
    rows = {op: (path,) for op, path in KERNEL_TESTS.items()}
    return verdict_table(found, "op", rows, lambda found, _, files: verdict(found, files))


def switch_verdicts(found: list[Window]) -> str:
    return verdict_table(found, "config", SWITCH_TESTS, switch_verdict)


def window_table(found: list[Window]) -> str:
    lines = [
        "| window | device | commit | GPU tests | steps failed or timed out |",
        "|---|---|---|---|---|",
    ]
    for w in found:
        unfinished = ", ".join(f"`{s}`" for s in w.summary.get("failed_steps", [])) or "none"
        lines.append(
            f"| `{w.folder.name}` | {w.summary['device']} | `{w.commit}` | "
            f"{window_tests(w)} | {unfinished} |"
        )
    return "\n".join(lines)
